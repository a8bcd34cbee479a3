package sink_test

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/walrelay/walrelay/sink"
	"github.com/walrelay/walrelay/sink/schema"
)

const seqAvsc = `{"type":"record","name":"Happened","namespace":"test","fields":[{"name":"agg","type":"string"},{"name":"seq","type":"long"}]}`

// schemaSink is a sink on kfake whose events of public.outbox are encoded
// with seqAvsc by srfake's registry; down makes the registry answer 503.
func schemaSink(t *testing.T, topic string) (*sink.Sink, *kfake.Cluster, *srfake.Registry, *atomic.Bool) {
	t.Helper()
	c := newCluster(t)
	reg := srfake.New()
	t.Cleanup(reg.Close)
	down := &atomic.Bool{}
	reg.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	file := filepath.Join(t.TempDir(), "happened.avsc")
	if err := os.WriteFile(file, []byte(seqAvsc), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newSink(t, sink.Config{Brokers: c.ListenAddrs(), Topic: topic, Schema: schema.Config{
		URLs:  []string{reg.URL()},
		Rules: []schema.Rule{{Table: "public.outbox", Value: schema.Binding{File: file}}},
	}}, fastRetries)
	return s, c, reg, down
}

// An encoded record goes through Prepare and Send like any other: Kafka
// holds the Confluent frame, the key and headers are as without a schema.
func TestPrepareEncodesWithSchema(t *testing.T) {
	s, c, reg, _ := schemaSink(t, "orders")
	if err := s.RegisterSchemas(testCtx(t)); err != nil {
		t.Fatalf("RegisterSchemas: %v", err)
	}
	ss, ok := reg.GetSchema("orders-value", 1)
	if !ok {
		t.Fatal("RegisterSchemas did not register orders-value (a fixed topic)")
	}
	a := newAcks(1)
	ev := event(7, "order", "o-7")
	if err := s.Produce(testCtx(t), ev, a.done(ev.ID)); err != nil {
		t.Fatal(err)
	}
	allOK(t, a.wait(t, 1), []string{ev.ID})
	recs := consume(t, c, "orders", 1)
	v := recs[0].Value
	id, body, err := (&sr.ConfluentHeader{}).DecodeID(v)
	if err != nil || id != ss.ID {
		t.Fatalf("value % x: id %d, %v; want %d", v, id, err, ss.ID)
	}
	var got map[string]any
	if err := avro.Unmarshal(avro.MustParse(seqAvsc), body, &got); err != nil || got["agg"] != "o-7" || got["seq"] != int64(7) {
		t.Fatalf("decoded %v, %v", got, err)
	}
	if string(recs[0].Key) != "o-7" || headerMap(recs[0].Headers)[sink.HeaderID] != ev.ID {
		t.Fatalf("key %q headers %v", recs[0].Key, recs[0].Headers)
	}
}

// A payload that does not fit is refused by Prepare with a *ProduceError
// wrapping ErrSchemaMismatch; its dead-letter record carries the
// validator's message and the payload as stored.
func TestPrepareSchemaMismatch(t *testing.T) {
	s, c, _, _ := schemaSink(t, "orders")
	ev := event(1, "order", "o-1")
	ev.Payload = []byte(`{"agg":"o-1","seq":"soon"}`)
	_, err := s.Prepare(testCtx(t), ev)
	var pe *sink.ProduceError
	if !errors.As(err, &pe) || !errors.Is(err, sink.ErrSchemaMismatch) || sink.IsRetryable(err) {
		t.Fatalf("Prepare: %v, want a *ProduceError wrapping ErrSchemaMismatch", err)
	}
	if pe.Topic != "orders" || !strings.Contains(err.Error(), `seq: "soon" is not an integer`) {
		t.Fatalf("Prepare: %v", err)
	}
	a := newAcks(1)
	if err := s.ProduceDeadLetter(testCtx(t), ev, pe.Topic, "schema_mismatch", err, a.done(ev.ID)); err != nil {
		t.Fatal(err)
	}
	allOK(t, a.wait(t, 1), []string{ev.ID})
	recs := consume(t, c, sink.DefaultDLQTopic, 1)
	h := headerMap(recs[0].Headers)
	if h[sink.HeaderDLQReason] != "schema_mismatch" || !strings.Contains(h[sink.HeaderDLQError], `seq: "soon" is not an integer`) ||
		string(recs[0].Value) != string(ev.Payload) {
		t.Fatalf("dead letter: headers %v value %q", h, recs[0].Value)
	}
}

// A registry outage while an event's schema is first resolved is retryable
// (the pipeline waits and calls Prepare again); after it, the event is
// encoded and its subject has one version.
func TestPrepareRegistryOutageRetryable(t *testing.T) {
	s, _, reg, down := schemaSink(t, "orders")
	down.Store(true)
	ev := event(1, "order", "o-1")
	_, err := s.Prepare(testCtx(t), ev)
	if !sink.IsRetryable(err) || !errors.Is(err, sink.ErrRegistryUnavailable) || errors.Is(err, sink.ErrSchemaMismatch) {
		t.Fatalf("Prepare during an outage: %v, want IsRetryable", err)
	}
	if err := s.RegisterSchemas(testCtx(t)); !sink.IsRetryable(err) {
		t.Fatalf("RegisterSchemas during an outage: %v, want IsRetryable", err)
	}
	down.Store(false)
	if _, err := s.Prepare(testCtx(t), ev); err != nil {
		t.Fatalf("Prepare after the outage: %v", err)
	}
	if _, ok := reg.GetSchema("orders-value", 2); ok {
		t.Fatal("a second version was registered")
	}
}

// A permanent registry error (401) is neither retryable nor a mismatch:
// the relay stops on it instead of dead-lettering every event.
func TestPrepareRegistryNotAuthorizedStops(t *testing.T) {
	c := newCluster(t)
	reg := srfake.New(srfake.WithAuth("Bearer right"))
	t.Cleanup(reg.Close)
	file := filepath.Join(t.TempDir(), "h.avsc")
	os.WriteFile(file, []byte(seqAvsc), 0o600)
	s := newSink(t, sink.Config{Brokers: c.ListenAddrs(), Topic: "orders", Schema: schema.Config{
		URLs: []string{reg.URL()}, BearerToken: "wrong",
		Rules: []schema.Rule{{Table: "public.outbox", Value: schema.Binding{File: file}}},
	}})
	_, err := s.Prepare(testCtx(t), event(1, "order", "o-1"))
	if !errors.Is(err, schema.ErrNotAuthorized) || sink.IsRetryable(err) || errors.Is(err, sink.ErrSchemaMismatch) {
		t.Fatalf("Prepare: %v, want ErrNotAuthorized", err)
	}
	if strings.Contains(err.Error(), "wrong") {
		t.Fatalf("the token shows in %q", err)
	}
}

// A schema setting that cannot work fails Validate and New.
func TestSchemaConfigValidated(t *testing.T) {
	cfg := sink.Config{Brokers: []string{"127.0.0.1:9092"}, Schema: schema.Config{
		Rules: []schema.Rule{{Table: "public.outbox", Value: schema.Binding{Subject: "s"}}}}}
	var se *schema.SettingError
	if err := cfg.Validate(); !errors.As(err, &se) || se.Setting != "URLs" {
		t.Fatalf("Validate: %v", err)
	}
	if _, err := sink.New(cfg); !errors.As(err, &se) {
		t.Fatalf("New: %v", err)
	}
}

// Subjects of the topic strategy are registered at start when the topic
// does not depend on the event; otherwise on their topic's first event.
func TestRegisterSchemasKnownTopics(t *testing.T) {
	for _, tc := range []struct {
		template string
		want     []string // subjects registered by RegisterSchemas
	}{
		{"orders", []string{"orders-value"}},
		{"x.{table}", []string{"x.outbox-value"}},
		{"x.{aggregate_type}", nil},
		{"x.{event_type}", nil},
	} {
		s, _, reg, _ := schemaSink(t, tc.template)
		if err := s.RegisterSchemas(testCtx(t)); err != nil {
			t.Fatalf("%s: %v", tc.template, err)
		}
		for _, subject := range []string{"orders-value", "x.outbox-value", "x.order-value", "x.Happened-value"} {
			want := false
			for _, w := range tc.want {
				want = want || w == subject
			}
			if reg.SubjectExists(subject) != want {
				t.Errorf("%s: subject %s registered %v, want %v", tc.template, subject, !want, want)
			}
		}
		if _, err := s.Prepare(testCtx(t), event(1, "order", "o-1")); err != nil {
			t.Fatalf("%s: %v", tc.template, err)
		}
	}
}
