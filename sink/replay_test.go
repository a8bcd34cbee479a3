package sink_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/sink"
)

// TestMarkReplay: a replayed record is the record Prepare makes, with the
// replay marker instead of the WAL position headers.
func TestMarkReplay(t *testing.T) {
	c := newCluster(t)
	s := newSink(t, sink.Config{Brokers: c.ListenAddrs(), Topic: "replay.{aggregate_type}", CloudEvents: true})
	ctx := testCtx(t)
	ev := event(1, "order", "o-1")
	ev.Headers = nil
	plain, err := s.Prepare(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Prepare(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	r = r.MarkReplay("r-1")
	a := newAcks(2)
	s.Send(ctx, plain, a.done("plain"))
	s.Send(ctx, r, a.done("replay"))
	allOK(t, a.wait(t, 2), []string{"plain", "replay"})
	recs := consume(t, c, "replay.order", 2)
	orig, rep := recs[0], recs[1]
	if string(orig.Value) != string(rep.Value) || string(orig.Key) != string(rep.Key) || !orig.Timestamp.Equal(rep.Timestamp) {
		t.Errorf("replayed record differs: key %q value %q ts %v, original key %q value %q ts %v",
			rep.Key, rep.Value, rep.Timestamp, orig.Key, orig.Value, orig.Timestamp)
	}
	want := headerMap(orig.Headers)
	delete(want, sink.HeaderLSN)
	delete(want, sink.HeaderXID)
	want[sink.HeaderReplay] = "r-1"
	got := headerMap(rep.Headers)
	if len(got) != len(want) || len(rep.Headers) != len(want) {
		t.Errorf("replay headers %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("replay header %s = %q, want %q", k, got[k], v)
		}
	}
}

func TestTemplateMatches(t *testing.T) {
	tests := []struct {
		tmpl  string
		topic string
		want  bool
	}{
		{"outbox.event.{aggregate_type}", "outbox.event.order", true},
		{"outbox.event.{aggregate_type}", "outbox.event.", false},
		{"outbox.event.{aggregate_type}", "outbox.events", false},
		{"outbox.event.{aggregate_type}", "other.event.order", false},
		{"{table}.{aggregate_type}.v1", "outbox.order.item.v1", true},
		{"{table}.{aggregate_type}.v1", "outbox.order.v2", false},
		{"fixed", "fixed", true},
		{"fixed", "fixed2", false},
		{"a.{event_type}", "a.x y", false},
	}
	for _, tt := range tests {
		tm, err := sink.ParseTemplate(tt.tmpl)
		if err != nil {
			t.Fatal(err)
		}
		if got := tm.Matches(tt.topic); got != tt.want {
			t.Errorf("%q matches %q = %v, want %v", tt.tmpl, tt.topic, got, tt.want)
		}
	}
	ts, err := sink.Config{Topic: "a.{aggregate_type}", TableTopics: map[string]string{"b.t": "b.{event_type}", "a.t": "t.fixed"}}.Templates()
	if err != nil {
		t.Fatal(err)
	}
	var srcs []string
	for _, tm := range ts {
		srcs = append(srcs, tm.String())
	}
	if strings.Join(srcs, " ") != "a.{aggregate_type} t.fixed b.{event_type}" {
		t.Errorf("templates %v", srcs)
	}
}

// TestPrepareStored: a stored dead-letter record goes back to its topic
// without the dead-letter headers; a record still too large is refused
// like Prepare refuses it.
func TestPrepareStored(t *testing.T) {
	c := newCluster(t)
	s := newSink(t, sink.Config{Brokers: c.ListenAddrs()})
	ctx := testCtx(t)
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	stored := &kgo.Record{Topic: "stored.order", Partition: 3, Key: []byte("o-1"), Value: []byte(`{"a":1}`), Timestamp: ts,
		Headers: []kgo.RecordHeader{{Key: "id", Value: []byte("e1")}, {Key: sink.HeaderDLQReason, Value: []byte("topic_refused")},
			{Key: "traceparent", Value: []byte("t")}, {Key: sink.HeaderDLQTopic, Value: []byte("stored.order")}}}
	r, err := s.PrepareStored(ctx, stored, "e1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.Topic() != "stored.order" {
		t.Errorf("topic %q", r.Topic())
	}
	a := newAcks(1)
	s.Send(ctx, r, a.done("e1"))
	allOK(t, a.wait(t, 1), []string{"e1"})
	got := consume(t, c, "stored.order", 1)[0]
	if h := headerMap(got.Headers); len(h) != 2 || h["id"] != "e1" || h["traceparent"] != "t" {
		t.Errorf("headers %v, want id and traceparent only", h)
	}
	if string(got.Key) != "o-1" || string(got.Value) != `{"a":1}` || !got.Timestamp.Equal(ts) {
		t.Errorf("record key %q value %q ts %v", got.Key, got.Value, got.Timestamp)
	}
	big := *stored
	big.Value = make([]byte, 2<<20) // above the topic's max.message.bytes (1 MiB)
	if _, err := s.PrepareStored(ctx, &big, "e2", 0); !errors.Is(err, sink.ErrTooLarge) {
		t.Errorf("too large: %v, want ErrTooLarge", err)
	}
	bad := *stored
	bad.Topic = "bad topic"
	if _, err := s.PrepareStored(ctx, &bad, "e3", 0); !errors.Is(err, sink.ErrInvalidTopic) {
		t.Errorf("invalid topic: %v, want ErrInvalidTopic", err)
	}
}

// TestPrepareStoredJSONValue: a table of Config.JSONValues without envelope
// columns gets the value Prepare writes (the JSON payload expanded, bytea as
// base64, text as a JSON string, NULL a tombstone) from the payload its
// dead-letter record stored and the payload column's type.
func TestPrepareStoredJSONValue(t *testing.T) {
	c := newCluster(t)
	s := newSink(t, sink.Config{Brokers: c.ListenAddrs(), Topic: "stored.{aggregate_type}",
		JSONValues: map[string]sink.JSONValue{"public.outbox": {ExpandPayload: true}}})
	ctx := testCtx(t)
	var evs []*decoder.Event
	var ids, sent []string
	types := map[string]uint32{}
	for i, p := range []struct {
		typ     uint32
		payload []byte
	}{{3802, []byte(`{"a": 1, "gone": null}`)}, {17, []byte{0, 1, 0xfe}}, {25, []byte("not json")}, {3802, nil}} {
		ev := event(i, "order", "o-1")
		ev.Payload, ev.PayloadType = p.payload, p.typ
		evs, ids, sent, types[ev.ID] = append(evs, ev), append(ids, ev.ID), append(sent, ev.ID, "dead "+ev.ID), p.typ
	}
	a := newAcks(2 * len(evs))
	for _, ev := range evs {
		r, err := s.Prepare(ctx, ev)
		if err != nil {
			t.Fatal(err)
		}
		s.Send(ctx, r, a.done(ev.ID))
		if err := s.ProduceDeadLetter(ctx, ev, "stored.order", "topic_refused", errors.New("refused"), a.done("dead "+ev.ID)); err != nil {
			t.Fatal(err)
		}
	}
	allOK(t, a.wait(t, 2*len(evs)), sent)
	a = newAcks(len(evs))
	for _, d := range consume(t, c, sink.DefaultDLQTopic, len(evs)) {
		d.Topic = headerMap(d.Headers)[sink.HeaderDLQTopic]
		id := headerMap(d.Headers)[sink.HeaderID]
		r, err := s.PrepareStored(ctx, d, id, types[id])
		if err != nil {
			t.Fatal(err)
		}
		s.Send(ctx, r, a.done(id))
	}
	allOK(t, a.wait(t, len(evs)), ids)
	byID := map[string][]*kgo.Record{}
	for _, rec := range consume(t, c, "stored.order", 2*len(evs)) {
		id := headerMap(rec.Headers)[sink.HeaderID]
		byID[id] = append(byID[id], rec)
	}
	for _, ev := range evs {
		got := byID[ev.ID]
		if len(got) != 2 || string(got[0].Value) != string(got[1].Value) || (got[0].Value == nil) != (got[1].Value == nil) {
			for _, rec := range got {
				t.Logf("record of %s: value %q", ev.ID, rec.Value)
			}
			t.Errorf("payload %q of type %d: the record made from its dead letter differs from Prepare's", ev.Payload, ev.PayloadType)
		}
	}
}

// TestDeadLetterCopy: a dead letter carries its event's commit time to the
// microsecond, and its copy (a redrive moving it to the end of its
// partition) is the same record in the same partition, naming the
// original.
func TestDeadLetterCopy(t *testing.T) {
	c := newCluster(t)
	s := newSink(t, sink.Config{Brokers: c.ListenAddrs(), Topic: "copy.{aggregate_type}", DLQTopic: "copy.dlq", TopicPartitions: 3})
	ctx := testCtx(t)
	ev := event(1, "order", "o-1")
	ev.CommitTime = time.Date(2026, 11, 29, 1, 2, 3, 456789000, time.UTC)
	dl, err := s.PrepareDeadLetter(ctx, ev, "copy.order", string(sink.ReasonTopicRefused), errors.New("refused"))
	if err != nil {
		t.Fatal(err)
	}
	a := newAcks(1)
	s.Send(ctx, dl, a.done("dead letter"))
	allOK(t, a.wait(t, 1), []string{"dead letter"})
	orig := consume(t, c, "copy.dlq", 1)[0]
	if got := headerMap(orig.Headers)[sink.HeaderDLQCommitTime]; got != "2026-11-29T01:02:03.456789Z" {
		t.Errorf("dead letter's %s = %q, want the commit time to the microsecond", sink.HeaderDLQCommitTime, got)
	}
	cp, err := s.PrepareDeadLetterCopy(ctx, orig, ev.ID)
	if err != nil {
		t.Fatal(err)
	}
	a = newAcks(1)
	s.Send(ctx, cp, a.done("copy"))
	allOK(t, a.wait(t, 1), []string{"copy"})
	recs := consume(t, c, "copy.dlq", 2)
	moved := recs[1]
	if recs[0].Offset != orig.Offset {
		moved = recs[0]
	}
	if moved.Partition != orig.Partition || string(moved.Key) != string(orig.Key) || string(moved.Value) != string(orig.Value) || !moved.Timestamp.Equal(orig.Timestamp) {
		t.Errorf("copy %d/%d key %q value %q ts %v; original %d/%d key %q value %q ts %v", moved.Partition, moved.Offset, moved.Key, moved.Value, moved.Timestamp,
			orig.Partition, orig.Offset, orig.Key, orig.Value, orig.Timestamp)
	}
	want := headerMap(orig.Headers)
	want[sink.HeaderDLQMovedFrom] = fmt.Sprintf("%d/%d", orig.Partition, orig.Offset)
	got := headerMap(moved.Headers)
	if len(got) != len(want) {
		t.Errorf("copy's headers %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("copy's header %s = %q, want %q", k, got[k], v)
		}
	}
}

// TestValidateOnlyTopics: a dry run's sink prepares a record for a missing
// topic as Kafka would create it, and creates nothing; a creation Kafka
// would refuse is refused as it would be.
func TestValidateOnlyTopics(t *testing.T) {
	c := newCluster(t, kfake.SeedTopics(1, "other"))
	c.ControlKey(int16(kmsg.CreateTopics), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.CreateTopicsRequest)
		if !req.ValidateOnly {
			t.Errorf("the sink asked Kafka to create %s", req.Topics[0].Topic)
		}
		if req.Topics[0].Topic != "dry.refused" {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic, rt.ErrorCode = req.Topics[0].Topic, kerr.PolicyViolation.Code
		resp.Topics = append(resp.Topics, rt)
		return resp, nil, true
	})
	s := newSink(t, sink.Config{Brokers: c.ListenAddrs(), Topic: "dry.{aggregate_type}", ValidateOnlyTopics: true})
	ctx := testCtx(t)
	if r, err := s.Prepare(ctx, event(1, "order", "o-1")); err != nil || r.Topic() != "dry.order" {
		t.Fatalf("prepare for a missing topic: %v, %v; want a record for dry.order", r.Topic(), err)
	}
	if _, err := s.Prepare(ctx, event(2, "refused", "o-1")); !errors.Is(err, sink.ErrTopicRefused) {
		t.Fatalf("prepare for a topic Kafka would refuse: %v, want ErrTopicRefused", err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	topics, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil || topics.Has("dry.order") {
		t.Fatalf("topics after the dry run: %v (%v); want dry.order not created", topics.Names(), err)
	}
}
