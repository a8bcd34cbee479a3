package schema

import (
	"os"
	"path/filepath"
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

// benchOrderAvsc and benchOrderJSON are a typical outbox event: a dozen
// fields, a nested record, an array, a nullable union, a timestamp and a
// decimal (about 300 bytes of JSON); the sink's BenchmarkPrepareSchema
// reads the same files.
var benchOrderAvsc, benchOrderJSON = testdataText("bench-order.avsc"), testdataText("bench-order.json")

func testdataText(name string) string {
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		panic(err)
	}
	return strings.TrimSpace(string(b))
}
