package sink_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/sink"
)

// The row's trace context, as an application would write it into the
// headers column.
const (
	rowTraceID    = "4bf92f3577b34da6a3ce929d0e0e4736"
	rowSpanID     = "00f067aa0ba902b7"
	rowTracestate = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
)

func rowTraceparent(flags string) string { return "00-" + rowTraceID + "-" + rowSpanID + "-" + flags }

// tracedSink is a sink on a fresh kfake cluster whose spans end up in the
// returned exporter, sampled by sampler.
func tracedSink(t *testing.T, sampler sdktrace.Sampler, cfg sink.Config, opts ...sink.Option) (*sink.Sink, *tracetest.InMemoryExporter, func(topic string, n int) []*kgo.Record) {
	t.Helper()
	c := newCluster(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sampler))
	t.Cleanup(func() { _ = tp.Shutdown(testCtx(t)) })
	cfg.Brokers = c.ListenAddrs()
	s := newSink(t, cfg, append([]sink.Option{sink.WithTracerProvider(tp)}, opts...)...)
	return s, exp, func(topic string, n int) []*kgo.Record { return consume(t, c, topic, n) }
}

// walrelayDefault is the sampler walrelay uses when OTEL_TRACES_SAMPLER is
// not set (relayotel.DefaultSampler).
func walrelayDefault() sdktrace.Sampler { return sdktrace.ParentBased(sdktrace.NeverSample()) }

func withHeaders(ev *decoder.Event, kv ...string) *decoder.Event {
	for i := 0; i+1 < len(kv); i += 2 {
		ev.Headers = append(ev.Headers, decoder.Header{Key: kv[i], Value: []byte(kv[i+1])})
	}
	return ev
}

// produceOne prepares and sends ev and returns the done callback's error.
func produceOne(t *testing.T, s *sink.Sink, ev *decoder.Event) error {
	t.Helper()
	a := newAcks(1)
	if err := s.Produce(testCtx(t), ev, a.done(ev.ID)); err != nil {
		t.Fatalf("produce: %v", err)
	}
	return a.wait(t, 1)[0].err
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

func values(hs []kgo.RecordHeader, key string) []string {
	var out []string
	for _, h := range hs {
		if h.Key == key {
			out = append(out, string(h.Value))
		}
	}
	return out
}

func TestTracingContinuesRowTrace(t *testing.T) {
	const topic = "outbox.event.order"
	s, exp, consume := tracedSink(t, walrelayDefault(), sink.Config{})
	ev := withHeaders(event(1, "order", "order-7"), "traceparent", rowTraceparent("01"), "tracestate", rowTracestate, "tenant", "acme")
	before := time.Now()
	if err := produceOne(t, s, ev); err != nil {
		t.Fatalf("done: %v", err)
	}
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans exported, want 1", len(spans))
	}
	sp := spans[0]
	if got := sp.SpanContext.TraceID().String(); got != rowTraceID {
		t.Errorf("trace id %s, want the row's %s", got, rowTraceID)
	}
	if got := sp.Parent.SpanID().String(); got != rowSpanID || !sp.Parent.IsRemote() {
		t.Errorf("parent span %s (remote %v), want the row's %s, remote", got, sp.Parent.IsRemote(), rowSpanID)
	}
	if sp.SpanKind != trace.SpanKindProducer || sp.Name != "send "+topic {
		t.Errorf("span %q kind %v, want %q producer", sp.Name, sp.SpanKind, "send "+topic)
	}
	if !sp.StartTime.Equal(commitTime) {
		t.Errorf("span starts %v, want the commit time %v", sp.StartTime, commitTime)
	}
	if sp.EndTime.Before(before) {
		t.Errorf("span ends %v, before the record was sent (%v)", sp.EndTime, before)
	}
	if sp.Status.Code != codes.Unset {
		t.Errorf("status %v %q, want unset", sp.Status.Code, sp.Status.Description)
	}
	if got := sp.SpanContext.TraceState().String(); got != rowTracestate {
		t.Errorf("span tracestate %q, want the row's %q", got, rowTracestate)
	}
	a := attrs(sp)
	for k, want := range map[attribute.Key]string{
		"messaging.system":            "kafka",
		"messaging.operation.type":    "send",
		"messaging.operation.name":    "send",
		"messaging.destination.name":  topic,
		"messaging.client.id":         "walrelay",
		"messaging.kafka.message.key": "order-7",
		"messaging.message.id":        ev.ID,
		"walrelay.table":              "public.outbox",
		"walrelay.lsn":                ev.LSN.String(),
		"walrelay.event_type":         "Happened",
	} {
		if got := a[k].Emit(); got != want {
			t.Errorf("attribute %s = %q, want %q", k, got, want)
		}
	}
	if got := a["walrelay.xid"].AsInt64(); got != int64(ev.XID) {
		t.Errorf("walrelay.xid = %d, want %d", got, ev.XID)
	}
	if got := a["messaging.message.body.size"].AsInt64(); got != int64(len(ev.Payload)) {
		t.Errorf("messaging.message.body.size = %d, want %d", got, len(ev.Payload))
	}
	if _, ok := a["messaging.kafka.offset"]; !ok {
		t.Error("no messaging.kafka.offset attribute")
	}

	recs := consume(topic, 1)
	tp := values(recs[0].Headers, "traceparent")
	want := "00-" + rowTraceID + "-" + sp.SpanContext.SpanID().String() + "-01"
	if len(tp) != 1 || tp[0] != want {
		t.Errorf("record traceparent %q, want one pointing at walrelay's span: %q", tp, want)
	}
	if got := values(recs[0].Headers, "tracestate"); len(got) != 1 || got[0] != rowTracestate {
		t.Errorf("record tracestate %q, want the row's %q", got, rowTracestate)
	}
	if got := a["messaging.kafka.offset"].AsInt64(); got != recs[0].Offset {
		t.Errorf("messaging.kafka.offset = %d, the record is at %d", got, recs[0].Offset)
	}
	if got, want := a["messaging.destination.partition.id"].Emit(), fmt.Sprint(recs[0].Partition); got != want {
		t.Errorf("messaging.destination.partition.id = %q, the record is in partition %s", got, want)
	}
	if got := headerMap(recs[0].Headers)["tenant"]; got != "acme" {
		t.Errorf("header tenant = %q, want it carried", got)
	}
}

// What happens to a row's headers, by what the row carries and what the
// sampler decides.
func TestTracingSamplingAndHeaders(t *testing.T) {
	const topic = "outbox.event.order"
	cases := []struct {
		name    string
		sampler sdktrace.Sampler
		headers []string
		spans   int
		// wantTP: the record's traceparent: "" none, "row" unchanged, "span" walrelay's span.
		wantTP string
		wantTS string // the record's tracestate ("" none)
		root   bool   // the span has no parent
	}{
		{name: "no trace context, default sampler: no span, nothing added",
			sampler: walrelayDefault(), headers: []string{"tenant", "acme"}},
		{name: "unsampled parent: no span, headers as the row had them",
			sampler: walrelayDefault(), headers: []string{"traceparent", rowTraceparent("00"), "tracestate", rowTracestate},
			wantTP: "row", wantTS: rowTracestate},
		{name: "no trace context, roots sampled: a root span, traceparent added",
			sampler: sdktrace.ParentBased(sdktrace.AlwaysSample()), spans: 1, wantTP: "span", root: true},
		{name: "invalid traceparent, roots sampled: a root span replaces it, the stray tracestate goes",
			sampler: sdktrace.ParentBased(sdktrace.AlwaysSample()), headers: []string{"traceparent", "00-zz-yy-01", "tracestate", rowTracestate},
			spans: 1, wantTP: "span", root: true},
		{name: "repeated traceparent: one left, pointing at the span",
			sampler: walrelayDefault(), headers: []string{"traceparent", rowTraceparent("01"), "traceparent", rowTraceparent("01")},
			spans: 1, wantTP: "span"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, exp, consume := tracedSink(t, tc.sampler, sink.Config{})
			ev := withHeaders(event(1, "order", "order-7"), tc.headers...)
			rowTP := values(sink.BuildRecord(topic, ev).Headers, "traceparent")
			if err := produceOne(t, s, ev); err != nil {
				t.Fatalf("done: %v", err)
			}
			spans := exp.GetSpans()
			if len(spans) != tc.spans {
				t.Fatalf("%d spans, want %d", len(spans), tc.spans)
			}
			hs := consume(topic, 1)[0].Headers
			tp := values(hs, "traceparent")
			switch tc.wantTP {
			case "":
				if len(tp) != 0 {
					t.Errorf("traceparent %q added, want none", tp)
				}
			case "row":
				if !slicesEqual(tp, rowTP) {
					t.Errorf("traceparent %q, want the row's %q", tp, rowTP)
				}
			case "span":
				sc := spans[0].SpanContext
				want := fmt.Sprintf("00-%s-%s-01", sc.TraceID(), sc.SpanID())
				if len(tp) != 1 || tp[0] != want {
					t.Errorf("traceparent %q, want %q", tp, want)
				}
			}
			if ts := values(hs, "tracestate"); !slicesEqual(ts, nonEmpty(tc.wantTS)) {
				t.Errorf("tracestate %q, want %q", ts, tc.wantTS)
			}
			if tc.spans > 0 && spans[0].Parent.IsValid() == tc.root {
				t.Errorf("span parent %v, want root=%v", spans[0].Parent.SpanID(), tc.root)
			}
		})
	}
}

func slicesEqual(a, b []string) bool {
	return strings.Join(a, "\n") == strings.Join(b, "\n") && len(a) == len(b)
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// Without a tracer provider the record is exactly the untraced one.
func TestTracingOffLeavesRecordAlone(t *testing.T) {
	const topic = "outbox.event.order"
	c := newCluster(t)
	s := newSink(t, sink.Config{Brokers: c.ListenAddrs()}, sink.WithTracerProvider(nil))
	ev := withHeaders(event(1, "order", "order-7"), "traceparent", rowTraceparent("01"), "tracestate", rowTracestate)
	want := sink.BuildRecord(topic, ev).Headers
	if err := produceOne(t, s, ev); err != nil {
		t.Fatalf("done: %v", err)
	}
	got := consume(t, c, topic, 1)[0].Headers
	if len(got) != len(want) {
		t.Fatalf("headers %v, want %v", headerMap(got), headerMap(want))
	}
	for i := range want {
		if got[i].Key != want[i].Key || !bytes.Equal(got[i].Value, want[i].Value) {
			t.Errorf("header %d = %s=%q, want %s=%q", i, got[i].Key, got[i].Value, want[i].Key, want[i].Value)
		}
	}
}

func TestTracingProduceErrorMarksSpan(t *testing.T) {
	c := newCluster(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(walrelayDefault()))
	s := newSink(t, sink.Config{Brokers: c.ListenAddrs()}, sink.WithTracerProvider(tp))
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		return produceResponse(req.(*kmsg.ProduceRequest), kerr.TopicAuthorizationFailed.Code), nil, true
	})
	err := produceOne(t, s, withHeaders(event(1, "order", "order-7"), "traceparent", rowTraceparent("01")))
	if !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("done(%v), want TOPIC_AUTHORIZATION_FAILED", err)
	}
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	if sp := spans[0]; sp.Status.Code != codes.Error || !strings.Contains(sp.Status.Description, "TOPIC_AUTHORIZATION_FAILED") {
		t.Errorf("status %v %q, want error naming TOPIC_AUTHORIZATION_FAILED", sp.Status.Code, sp.Status.Description)
	}
	if got := attrs(spans[0])["error.type"].Emit(); got != "TOPIC_AUTHORIZATION_FAILED" {
		t.Errorf("error.type = %q", got)
	}
	if _, ok := attrs(spans[0])["messaging.kafka.offset"]; ok {
		t.Error("a failed record's span has an offset")
	}
}

func TestTracingDeadLetterSpan(t *testing.T) {
	s, exp, consume := tracedSink(t, walrelayDefault(), sink.Config{})
	ev := withHeaders(event(1, "order", "order-7"), "traceparent", rowTraceparent("01"))
	a := newAcks(1)
	ctx := testCtx(t)
	r, err := s.PrepareDeadLetter(ctx, ev, "outbox.event.order", "too_large", errors.New("too large"))
	if err != nil {
		t.Fatal(err)
	}
	s.Send(ctx, r, a.done(ev.ID))
	if err := a.wait(t, 1)[0].err; err != nil {
		t.Fatalf("done: %v", err)
	}
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	at := attrs(spans[0])
	if at["messaging.destination.name"].Emit() != sink.DefaultDLQTopic || at["walrelay.dlq.reason"].Emit() != "too_large" {
		t.Errorf("destination %q reason %q, want %s and too_large", at["messaging.destination.name"].Emit(), at["walrelay.dlq.reason"].Emit(), sink.DefaultDLQTopic)
	}
	want := fmt.Sprintf("00-%s-%s-01", rowTraceID, spans[0].SpanContext.SpanID())
	if got := values(consume(sink.DefaultDLQTopic, 1)[0].Headers, "traceparent"); len(got) != 1 || got[0] != want {
		t.Errorf("dead-letter record traceparent %q, want %q", got, want)
	}
}
