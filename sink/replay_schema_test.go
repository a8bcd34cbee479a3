package sink_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/sink"
)

// TestPrepareStoredEncodesWithSchema: a stored dead-letter record holds the
// payload as stored; PrepareStored encodes it by the schema rule of its
// table and event type, into the record Prepare makes of the event. A
// payload that does not fit is refused with ErrSchemaMismatch, and a record
// of a table without rules goes as it is.
func TestPrepareStoredEncodesWithSchema(t *testing.T) {
	s, c, _, _ := schemaSink(t, "orders")
	ctx := testCtx(t)
	ev := event(7, "order", "o-7")
	bad := event(8, "order", "o-8")
	bad.Payload = []byte(`{"agg":"o-8","seq":"soon"}`)
	other := event(9, "order", "o-9")
	other.Table, other.TableName = "public.other", "other"
	a := newAcks(3)
	for _, e := range []*decoder.Event{ev, bad, other} {
		if err := s.ProduceDeadLetter(ctx, e, "orders", "topic_refused", errors.New("refused"), a.done(e.ID)); err != nil {
			t.Fatal(err)
		}
	}
	r, err := s.Prepare(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	allOK(t, a.wait(t, 3), []string{ev.ID, bad.ID, other.ID})
	a = newAcks(1)
	s.Send(ctx, r, a.done(ev.ID))
	allOK(t, a.wait(t, 1), []string{ev.ID})
	dead := map[string]*kgo.Record{}
	for _, d := range consume(t, c, sink.DefaultDLQTopic, 3) {
		d.Topic = headerMap(d.Headers)[sink.HeaderDLQTopic]
		dead[headerMap(d.Headers)[sink.HeaderID]] = d
	}

	r, err = s.PrepareStored(ctx, dead[ev.ID], ev.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PrepareStored(ctx, dead[bad.ID], bad.ID, 0); !errors.Is(err, sink.ErrSchemaMismatch) {
		t.Errorf("a stored payload that does not fit: %v, want ErrSchemaMismatch", err)
	}
	ro, err := s.PrepareStored(ctx, dead[other.ID], other.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := newAcks(2)
	s.Send(ctx, r, b.done(ev.ID))
	s.Send(ctx, ro, b.done(other.ID))
	allOK(t, b.wait(t, 2), []string{ev.ID, other.ID})
	byID := map[string][]*kgo.Record{}
	for _, rec := range consume(t, c, "orders", 3) {
		id := headerMap(rec.Headers)[sink.HeaderID]
		byID[id] = append(byID[id], rec)
	}
	if got := byID[ev.ID]; len(got) != 2 || !bytes.Equal(got[0].Value, got[1].Value) || !bytes.Equal(got[0].Key, got[1].Key) {
		for _, rec := range got {
			t.Logf("record of %s: key % x value % x", ev.ID, rec.Key, rec.Value)
		}
		t.Errorf("%d records of %s from Prepare and from the stored record, want 2 with the same key and encoded value", len(got), ev.ID)
	} else if got[0].Value[0] != 0 || bytes.Equal(got[0].Value, ev.Payload) {
		t.Errorf("value % x: not Confluent-framed", got[0].Value)
	}
	if got := byID[other.ID]; len(got) != 1 || !bytes.Equal(got[0].Value, other.Payload) {
		t.Errorf("%d records of a table without rules, want 1 with the payload as stored %s", len(got), other.Payload)
	}
}
