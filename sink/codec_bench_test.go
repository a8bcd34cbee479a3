package sink

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walrelay/walrelay/decoder"
)

// codecBatch is about 1 MiB of records as walrelay builds them (key, header keys and
// values, value), the content of one full batch. The headers repeat from record to record,
// as in a real batch; that is what lets zstd find matches in otherwise random payloads.
func codecBatch(value func(i int) string) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < 1<<20; i++ {
		ev := &decoder.Event{
			Table: "public.outbox", TableName: "outbox",
			ID:            fmt.Sprintf("6f1c2a9e-5b1d-4f6e-9c1a-%012d", i),
			AggregateType: "order", AggregateID: fmt.Appendf(nil, "order-%d", i%1024),
			EventType: "OrderCreated", Payload: []byte(value(i)),
			CommitTime: time.Unix(1_800_000_000+int64(i/100), 0),
			LSN:        pglogrepl.LSN(0x16_B374_D848 + 2100*i), XID: uint32(123456 + i/100),
		}
		rec := BuildRecord("outbox.event.order", ev)
		b.Write(rec.Key)
		for _, h := range rec.Headers {
			b.WriteString(h.Key)
			b.Write(h.Value)
		}
		b.Write(rec.Value)
	}
	return b.Bytes()
}

// orderJSON is a typical outbox payload: an order with two lines, ~430 bytes.
func orderJSON(i int) string {
	return fmt.Sprintf(`{"orderId":"ord-%08d","customerId":"cust-%05d","status":"CREATED","currency":"EUR",`+
		`"total":%d.%02d,"lines":[{"sku":"SKU-%06d","qty":%d,"price":%d.99},{"sku":"SKU-%06d","qty":1,"price":%d.50}],`+
		`"shippingAddress":{"street":"%d Main Street","city":"Berlin","zip":"10%03d","country":"DE"},`+
		`"createdAt":"2026-11-21T07:%02d:%02d.%06dZ"}`,
		i, i%9973, i%1000, i%100, i*7%1000000, i%5+1, i%300, i*13%1000000, i%50, i%999, i%1000, i%60, i%60, i*37%1000000)
}

// hexJSON is the bench's 2 KB payload: {"pad": "<hex of md5 output>", "seq": i}, the pad
// cut at a different offset per row (like test/bench/bench.sh), so lz4 finds no matches.
func hexJSON() func(i int) string {
	var blob []byte
	for g := 1; g <= 32768; g++ {
		s := md5.Sum(fmt.Append(nil, g))
		blob = append(blob, s[:]...)
	}
	return func(i int) string {
		off := (i * 7919) % (len(blob) - 1000)
		return fmt.Sprintf(`{"pad": "%s", "seq": %d}`, hex.EncodeToString(blob[off:off+987]), i)
	}
}

// BenchmarkCompression compresses one 1 MiB batch with each codec as walrelay configures
// it, through franz-go's compressor. MB/s is uncompressed input; ratio is in/out.
func BenchmarkCompression(b *testing.B) {
	payloads := []struct {
		name  string
		batch []byte
	}{
		{"order-json", codecBatch(orderJSON)},
		{"hex-2k", codecBatch(hexJSON())},
	}
	for _, p := range payloads {
		for _, name := range []string{"zstd", "lz4", "snappy", "gzip"} {
			b.Run(p.name+"/"+name, func(b *testing.B) {
				c, err := codec(name)
				if err != nil {
					b.Fatal(err)
				}
				comp, err := kgo.DefaultCompressor(c)
				if err != nil {
					b.Fatal(err)
				}
				var dst bytes.Buffer
				var out []byte
				b.SetBytes(int64(len(p.batch)))
				for b.Loop() {
					dst.Reset()
					out, _ = comp.Compress(&dst, p.batch)
				}
				if len(out) == 0 {
					b.Fatal("compressor returned nothing")
				}
				b.ReportMetric(float64(len(p.batch))/float64(len(out)), "ratio")
			})
		}
	}
}
