package sink

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestBatchingModes: adaptive batching (the default) paces the gate's rounds by
// the linger and lets the client send at once; fixed batching and a
// transactional sink give the linger to the client (0 included: a zero linger
// used to be replaced by the 5ms default, so it could not be turned off).
func TestBatchingModes(t *testing.T) {
	for _, tc := range []struct {
		name        string
		batching    string
		linger      time.Duration
		opts        []Option
		gate        bool
		pace        time.Duration
		kafkaLinger time.Duration
	}{
		{"default", "", 0, nil, true, 0, 0},
		{"adaptive, paced", BatchingAdaptive, 5 * time.Millisecond, nil, true, 5 * time.Millisecond, 0},
		{"fixed", BatchingFixed, 5 * time.Millisecond, nil, false, 0, 5 * time.Millisecond},
		{"fixed, no linger", BatchingFixed, 0, nil, false, 0, 0},
		{"fixed, 50ms", BatchingFixed, 50 * time.Millisecond, nil, false, 0, 50 * time.Millisecond},
		{"transactional", "", 5 * time.Millisecond, []Option{WithTransactionalID("walrelay-test")}, false, 0, 5 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(Config{Brokers: []string{"127.0.0.1:1"}, Batching: tc.batching, Linger: tc.linger}, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := s.gate != nil; got != tc.gate {
				t.Fatalf("adaptive batching %v, want %v", got, tc.gate)
			}
			if tc.gate && s.gate.pace != tc.pace {
				t.Errorf("rounds paced %v, want %v", s.gate.pace, tc.pace)
			}
			if got := s.client.OptValue(kgo.ProducerLinger); got != tc.kafkaLinger {
				t.Errorf("producer lingers %v, want %v", got, tc.kafkaLinger)
			}
		})
	}
}

// TestTransactionalIDOnlyThroughTheOption: a transactional id passed as a raw
// client option would get adaptive batching's zero linger and no transaction
// handling; New refuses it.
func TestTransactionalIDOnlyThroughTheOption(t *testing.T) {
	_, err := New(Config{Brokers: []string{"127.0.0.1:1"}}, WithClientOpts(kgo.TransactionalID("x")))
	if err == nil {
		t.Fatal("New accepted a transactional id passed as a client option")
	}
}

func TestBatchingRefusesUnknownMode(t *testing.T) {
	err := Config{Brokers: []string{"127.0.0.1:1"}, Batching: "eager"}.Validate()
	if se, ok := err.(*SettingError); !ok || se.Setting != "Batching" {
		t.Fatalf("got %v, want a *SettingError for batching", err)
	}
}
