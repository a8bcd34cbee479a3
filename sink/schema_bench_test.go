package sink_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/walrelay/walrelay/sink"
	"github.com/walrelay/walrelay/sink/schema"
)

// benchOrderAvsc and benchOrderJSON are a typical outbox event: a dozen
// fields, a nested record, an array, a nullable union, a timestamp and a
// decimal (about 300 bytes of JSON), shared with sink/schema's
// BenchmarkAvroEncode.
var benchOrderAvsc, benchOrderJSON = benchTestdata("bench-order.avsc"), benchTestdata("bench-order.json")

func benchTestdata(name string) string {
	b, err := os.ReadFile(filepath.Join("schema", "testdata", name))
	if err != nil {
		panic(err)
	}
	return strings.TrimSpace(string(b))
}

// BenchmarkPrepareSchema is Prepare of one event (topic known, schema
// resolved: no I/O) with the payload passed through as today, validated
// against a JSON Schema, and converted to Avro.
func BenchmarkPrepareSchema(b *testing.B) {
	dir := b.TempDir()
	avsc := filepath.Join(dir, "order.avsc")
	jsonSchema := filepath.Join(dir, "order.json")
	os.WriteFile(avsc, []byte(benchOrderAvsc), 0o600)
	os.WriteFile(jsonSchema, []byte(`{"type":"object","properties":{"id":{"type":"string"},"qty":{"type":"integer"},
	 "items":{"type":"array","items":{"type":"object","properties":{"sku":{"type":"string"},"count":{"type":"integer"}}}}},
	 "required":["id","qty","items"]}`), 0o600)
	for _, bc := range []struct {
		name string
		rule *schema.Binding
	}{
		{"passthrough", nil},
		{"jsonschema", &schema.Binding{File: jsonSchema}},
		{"avro", &schema.Binding{File: avsc}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "orders"))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			cfg := sink.Config{Brokers: c.ListenAddrs(), Topic: "orders"}
			if bc.rule != nil {
				reg := srfake.New()
				defer reg.Close()
				cfg.Schema = schema.Config{URLs: []string{reg.URL()}, Rules: []schema.Rule{{Table: "public.outbox", Value: *bc.rule}}}
			}
			s := newSink(b, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ev := benchEvent(0)
			ev.Payload = []byte(benchOrderJSON)
			if _, err := s.Prepare(ctx, ev); err != nil { // topic look-up, schema registration
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(ev.Payload)))
			for b.Loop() {
				if _, err := s.Prepare(ctx, ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
