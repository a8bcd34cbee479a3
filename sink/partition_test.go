package sink_test

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/walrelay/walrelay/sink"
)

// TestExplicitPartition: an event with a partition from the outbox's
// partition column lands there; one the topic lacks is refused (the relay
// dead-letters it); events without one go by key hash, consistently.
func TestExplicitPartition(t *testing.T) {
	t.Parallel()
	const topic = "outbox.event.order"
	c := newCluster(t, kfake.SeedTopics(3, topic))
	s := newSink(t, sink.Config{Brokers: c.ListenAddrs()})
	ctx := testCtx(t)

	a := newAcks(8)
	var ids []string
	for i := 0; i < 4; i++ {
		ev := event(i, "order", "same-key")
		if i < 2 {
			ev.Partition, ev.HasPartition = 2, true
		}
		ids = append(ids, ev.ID)
		if err := s.Produce(ctx, ev, a.done(ev.ID)); err != nil {
			t.Fatal(err)
		}
	}
	allOK(t, a.wait(t, 4), ids)
	recs := consume(t, c, topic, 4)
	byID := map[string]int32{}
	for _, r := range recs {
		for _, h := range r.Headers {
			if h.Key == sink.HeaderID {
				byID[string(h.Value)] = r.Partition
			}
		}
	}
	if byID[ids[0]] != 2 || byID[ids[1]] != 2 {
		t.Fatalf("explicit partition not honoured: %v", byID)
	}
	if byID[ids[2]] != byID[ids[3]] {
		t.Fatalf("same key went to different partitions: %v", byID)
	}

	bad := event(9, "order", "k")
	bad.Partition, bad.HasPartition = 7, true
	err := s.Produce(ctx, bad, a.done(bad.ID))
	var pe *sink.ProduceError
	if !errors.Is(err, sink.ErrNoSuchPartition) || !errors.As(err, &pe) || pe.EventID != bad.ID {
		t.Fatalf("partition 7 of 3: got %v", err)
	}
	a.none(t)
}
