package sink_test

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/sink"
)

// shadowing is a headers column that tries to shadow every kind of header
// walrelay sets, around two entries of its own.
var shadowing = []decoder.Header{
	{Key: "id", Value: []byte("forged-id")},
	{Key: "traceparent", Value: []byte("00-abc-def-01")},
	{Key: "event_type", Value: []byte("Forged")},
	{Key: "aggregate_type", Value: []byte("forged")},
	{Key: "walrelay.lsn", Value: []byte("0/0")},
	{Key: "walrelay.dlq.reason", Value: []byte("forged")},
	{Key: "ce_id", Value: []byte("forged")},
	{Key: "content-type", Value: []byte("text/forged")},
	{Key: "ID", Value: []byte("kept: header names are exact")},
}

// TestReservedHeadersDropped: entries of the headers
// column cannot shadow walrelay's own headers (id, event_type,
// aggregate_type, walrelay.*, CloudEvents ce_*; content-type only with
// CloudEvents on): each header walrelay sets appears once, with its value,
// and the app's other entries stay, in order.
func TestReservedHeadersDropped(t *testing.T) {
	t.Parallel()
	const topic = "outbox.event.order"
	c := newCluster(t, kfake.SeedTopics(1, topic))
	for i, ce := range []bool{false, true} {
		s := newSink(t, sink.Config{Brokers: c.ListenAddrs(), CloudEvents: ce})
		ev := event(i, "order", "o-1")
		ev.Headers = shadowing
		a := newAcks(1)
		if err := s.Produce(testCtx(t), ev, a.done(ev.ID)); err != nil {
			t.Fatal(err)
		}
		allOK(t, a.wait(t, 1), []string{ev.ID})
		recs := consume(t, c, topic, i+1)
		rec := recs[len(recs)-1]

		count := map[string]int{}
		var appKeys []string
		for _, h := range rec.Headers {
			count[h.Key]++
			if h.Key == "traceparent" || h.Key == "ID" || (!ce && h.Key == "content-type") {
				appKeys = append(appKeys, h.Key)
			}
		}
		for k, n := range count {
			if n != 1 {
				t.Errorf("cloudevents=%v: header %s appears %d times, want once", ce, k, n)
			}
		}
		h := headerMap(rec.Headers)
		want := map[string]string{
			sink.HeaderID: ev.ID, sink.HeaderEventType: ev.EventType, sink.HeaderAggregateType: ev.AggregateType,
			sink.HeaderLSN: ev.LSN.String(), "traceparent": "00-abc-def-01", "ID": "kept: header names are exact",
		}
		if ce {
			want[sink.HeaderCEID] = ev.ID
			want[sink.HeaderContentType] = "application/json"
		} else {
			want["content-type"] = "text/forged" // not walrelay's without CloudEvents
		}
		for k, v := range want {
			if h[k] != v {
				t.Errorf("cloudevents=%v: header %s = %q, want %q", ce, k, h[k], v)
			}
		}
		if _, ok := h["walrelay.dlq.reason"]; ok {
			t.Errorf("cloudevents=%v: a walrelay.* entry of the headers column was kept", ce)
		}
		if !ce {
			if _, ok := h["ce_id"]; ok {
				t.Errorf("cloudevents=off: a ce_* entry of the headers column was kept")
			}
		}
		wantApp := []string{"traceparent", "ID"}
		if !ce {
			wantApp = []string{"traceparent", "content-type", "ID"}
		}
		if !slices.Equal(appKeys, wantApp) {
			t.Errorf("cloudevents=%v: app headers %q, want %q in order", ce, appKeys, wantApp)
		}
	}
}

// TestReservedHeadersCounted: every dropped entry is
// reported to WithOnReservedHeader (the relay's
// walrelay_reserved_headers_dropped_total), including on dead letters, and
// nothing is reported for events without reserved entries.
func TestReservedHeadersCounted(t *testing.T) {
	t.Parallel()
	const topic = "outbox.event.order"
	c := newCluster(t, kfake.SeedTopics(1, topic))
	var mu sync.Mutex
	var got []string
	s := newSink(t, sink.Config{Brokers: c.ListenAddrs()}, sink.WithOnReservedHeader(func(k string) {
		mu.Lock()
		got = append(got, k)
		mu.Unlock()
	}))
	ctx := testCtx(t)
	a := newAcks(4)
	plain := event(1, "order", "o-1")
	if err := s.Produce(ctx, plain, a.done(plain.ID)); err != nil {
		t.Fatal(err)
	}
	ev := event(2, "order", "o-1")
	ev.Headers = shadowing
	if err := s.Produce(ctx, ev, a.done(ev.ID)); err != nil {
		t.Fatal(err)
	}
	if err := s.ProduceDeadLetter(ctx, ev, topic, "test", errors.New("test"), a.done(ev.ID+"-dlq")); err != nil {
		t.Fatal(err)
	}
	allOK(t, a.wait(t, 3), []string{plain.ID, ev.ID, ev.ID + "-dlq"})
	want := []string{"id", "event_type", "aggregate_type", "walrelay.lsn", "walrelay.dlq.reason", "ce_id"}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2*len(want) || !strings.HasPrefix(strings.Join(got, ","), strings.Join(want, ",")) {
		t.Errorf("reported %q, want %q for the record and again for the dead letter", got, want)
	}
}
