package sink_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/walrelay/walrelay/sink"
)

func TestZZRetain(t *testing.T) {
	const topic = "outbox.event.order"
	c := newCluster(t, kfake.SeedTopics(1, topic))
	s := newSink(t, sink.Config{Brokers: c.ListenAddrs(), Linger: time.Minute})
	ctx := testCtx(t)
	a := newAcks(1)
	ev := event(1, "order", "o-1")
	if err := s.Produce(ctx, ev, a.done(ev.ID)); err != nil {
		t.Fatal(err)
	}
	copy(ev.Payload, "XXXXXXXX")
	copy(ev.AggregateID, "zz")
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	a.wait(t, 1)
	for _, r := range consume(t, c, topic, 1) {
		t.Logf("key=%q value=%q", r.Key, r.Value)
	}
}
