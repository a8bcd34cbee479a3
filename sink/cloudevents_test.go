package sink_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/walrelay/walrelay/sink"
)

// TestCloudEventsHeaders: with CloudEvents on, records carry the binary-mode
// headers (Kafka protocol binding) next to walrelay's own; off, none.
func TestCloudEventsHeaders(t *testing.T) {
	t.Parallel()
	const topic = "outbox.event.order"
	c := newCluster(t, kfake.SeedTopics(1, topic))
	for _, on := range []bool{true, false} {
		s := newSink(t, sink.Config{Brokers: c.ListenAddrs(), CloudEvents: on,
			CloudEventsSource: "//db.example/{table}", ContentType: "application/json"})
		ev := event(1, "order", "o-1")
		ev.Table = "billing.outbox"
		ev.Timestamp = time.Date(2026, 11, 21, 6, 0, 0, 123000000, time.UTC)
		a := newAcks(1)
		if err := s.Produce(testCtx(t), ev, a.done(ev.ID)); err != nil {
			t.Fatal(err)
		}
		allOK(t, a.wait(t, 1), []string{ev.ID})
		recs := consume(t, c, topic, map[bool]int{true: 1, false: 2}[on])
		h := headerMap(recs[len(recs)-1].Headers)
		want := map[string]string{
			sink.HeaderCESpecVersion: "1.0",
			sink.HeaderCEID:          ev.ID,
			sink.HeaderCEType:        ev.EventType,
			sink.HeaderCESource:      "//db.example/billing.outbox",
			sink.HeaderCETime:        "2026-11-21T06:00:00.123Z",
			sink.HeaderContentType:   "application/json",
		}
		for k, v := range want {
			got, ok := h[k]
			if on && got != v {
				t.Errorf("cloudevents on: header %s = %q, want %q", k, got, v)
			}
			if !on && ok {
				t.Errorf("cloudevents off: unexpected header %s", k)
			}
		}
		if h[sink.HeaderID] != ev.ID {
			t.Errorf("walrelay's id header missing (on=%v)", on)
		}
	}
}
