package sink

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestLingerReachesTheProducer: the configured linger is the producer's, 0 included.
// A zero linger used to be replaced by the 5ms default, so `--linger 0` could not
// turn lingering off.
func TestLingerReachesTheProducer(t *testing.T) {
	for _, want := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 50 * time.Millisecond} {
		s, err := New(Config{Brokers: []string{"127.0.0.1:1"}, Linger: want})
		if err != nil {
			t.Fatal(err)
		}
		if got := s.client.OptValue(kgo.ProducerLinger); got != want {
			t.Errorf("Linger %v: producer lingers %v", want, got)
		}
		s.Close()
	}
}

// TestAdaptiveBatchingOnlyWithoutLinger: the gate batches adaptively only with
// linger 0 and no transactional id (a forced linger and Kafka transactions keep
// franz-go's own batching).
func TestAdaptiveBatchingOnlyWithoutLinger(t *testing.T) {
	for _, tc := range []struct {
		name   string
		linger time.Duration
		opts   []Option
		want   bool
	}{
		{"default", 0, nil, true},
		{"forced linger", 5 * time.Millisecond, nil, false},
		{"transactional", 0, []Option{WithTransactionalID("walrelay-test")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(Config{Brokers: []string{"127.0.0.1:1"}, Linger: tc.linger}, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := s.gate != nil; got != tc.want {
				t.Errorf("adaptive batching %v, want %v", got, tc.want)
			}
		})
	}
}
