package sink_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/walrelay/walrelay/sink"
	"github.com/walrelay/walrelay/sink/schema"
)

// benchOrderAvsc and benchOrderJSON are a typical outbox event: a dozen
// fields, a nested record, an array, a nullable union, a timestamp and a
// decimal (about 300 bytes of JSON).
const benchOrderAvsc = `{"type":"record","name":"OrderCreated","namespace":"shop","fields":[
 {"name":"id","type":"string"},{"name":"customer","type":"string"},{"name":"qty","type":"long"},
 {"name":"total","type":{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}},
 {"name":"currency","type":"string"},{"name":"paid","type":"boolean"},
 {"name":"note","type":["null","string"],"default":null},
 {"name":"created_at","type":{"type":"long","logicalType":"timestamp-micros"}},
 {"name":"items","type":{"type":"array","items":{"type":"record","name":"Item","fields":[
   {"name":"sku","type":"string"},{"name":"count","type":"int"},{"name":"price","type":"double"}]}}},
 {"name":"address","type":{"type":"record","name":"Address","fields":[{"name":"city","type":"string"},{"name":"zip","type":"string"}]}}]}`

const benchOrderJSON = `{"id":"o-000042","customer":"c-981","qty":3,"total":149.97,"currency":"EUR","paid":true,"note":"leave at the door",` +
	`"created_at":"2026-03-14T15:09:26.535897+00:00","items":[{"sku":"sku-1","count":1,"price":49.99},{"sku":"sku-2","count":2,"price":49.99}],` +
	`"address":{"city":"Lyon","zip":"69001"}}`

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
