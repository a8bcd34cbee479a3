package sink_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/sink"
	"github.com/walrelay/walrelay/sink/schema"
)

// The envelope comes first, then the schema encoding: a table with both has its
// envelope (the value Debezium's router builds) encoded with the schema, which describes
// the envelope, as Debezium's Avro converter would encode its envelope struct.
func TestEnvelopeThenSchema(t *testing.T) {
	const envAvsc = `{"type":"record","name":"Envelope","namespace":"test","fields":[{"name":"payload","type":"string"},{"name":"eventType","type":"string"}]}`
	c := newCluster(t)
	reg := srfake.New()
	t.Cleanup(reg.Close)
	file := filepath.Join(t.TempDir(), "envelope.avsc")
	if err := os.WriteFile(file, []byte(envAvsc), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newSink(t, sink.Config{Brokers: c.ListenAddrs(), Topic: "orders",
		JSONValues: map[string]sink.JSONValue{"public.outbox": {}},
		Schema:     schema.Config{URLs: []string{reg.URL()}, Rules: []schema.Rule{{Table: "public.outbox", Value: schema.Binding{File: file}}}},
	}, fastRetries)
	if err := s.RegisterSchemas(testCtx(t)); err != nil {
		t.Fatalf("RegisterSchemas: %v", err)
	}
	ev := event(3, "order", "o-3")
	ev.PayloadType = 3802 // jsonb
	ev.Envelope = []decoder.EnvelopeField{{Name: "eventType", Type: 25, TypeMod: -1, Value: []byte("OrderCreated")}}
	a := newAcks(1)
	if err := s.Produce(testCtx(t), ev, a.done(ev.ID)); err != nil {
		t.Fatal(err)
	}
	allOK(t, a.wait(t, 1), []string{ev.ID})
	v := consume(t, c, "orders", 1)[0].Value
	_, body, err := (&sr.ConfluentHeader{}).DecodeID(v)
	if err != nil {
		t.Fatalf("value % x: %v", v, err)
	}
	var got map[string]any
	if err := avro.Unmarshal(avro.MustParse(envAvsc), body, &got); err != nil ||
		got["payload"] != string(ev.Payload) || got["eventType"] != "OrderCreated" {
		t.Fatalf("decoded %v, %v; want the envelope with payload %s", got, err, ev.Payload)
	}
}
