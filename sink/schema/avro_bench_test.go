package schema

import (
	"strings"
	"testing"
)

// BenchmarkAvroEncode is the JSON to Avro conversion of one payload alone:
// make bench's event ({seq, pad}: two fields, 200 bytes) and a typical order
// event (a dozen fields, a nested record, an array, a union, a timestamp, a
// decimal: 300 bytes).
func BenchmarkAvroEncode(b *testing.B) {
	for _, bc := range []struct{ name, schema, payload string }{
		{"bench", `{"type":"record","name":"BenchEvent","namespace":"walrelay.bench","fields":[{"name":"seq","type":"long"},{"name":"pad","type":"string"}]}`,
			`{"pad": "` + strings.Repeat("0123456789abcdef", 11) + `", "seq": 123456}`},
		{"order", benchOrderAvsc, benchOrderJSON},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c, err := parseAvro(bc.schema, nil)
			if err != nil {
				b.Fatal(err)
			}
			data := []byte(bc.payload)
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			buf := make([]byte, 0, 512)
			for b.Loop() {
				if _, err := c.encode(buf[:0], data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

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
