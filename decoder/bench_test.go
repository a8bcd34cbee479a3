package decoder

import (
	"strings"
	"testing"
)

// payload200 is a 200-byte jsonb payload.
var payload200 = func() string {
	p := `{"id": 12345, "items": [{"qty": 2, "sku": "A-1"}, {"qty": 1, "sku": "B-22"}], "total": 99.95, "currency": "EUR", "customer": "cust-000042", "note": "`
	return p + strings.Repeat("x", 200-len(p)-2) + `"}`
}()

const benchHeaders = `{"tenant": "acme", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}`

func benchDecoder(b *testing.B, timestamp bool) *Decoder {
	cols := DefaultColumns()
	if timestamp {
		cols.Timestamp = "created_at"
	}
	d, err := New(Config{Tables: []Table{{Name: "outbox", Columns: cols}}})
	if err != nil {
		b.Fatal(err)
	}
	var out Output
	mustDecode(b, d, 0, encRelation(relOutbox, "public", "outbox", outboxCols...), &out)
	mustDecode(b, d, walBase, encBegin(walBase+0x1000, commitTime, 700), &out)
	return d
}

func benchInsert(b *testing.B, headers string, timestamp bool) {
	if len(payload200) != 200 {
		b.Fatalf("payload is %d bytes", len(payload200))
	}
	d := benchDecoder(b, timestamp)
	msg := encInsert(relOutbox, txt("0193a0b4-7c1e-7d2f-9a3b-4c5d6e7f8091"), txt("order"), txt("order-12345"),
		txt("OrderCreated"), txt(payload200), txt(headers), txt("2026-11-21 11:10:01.123456+05:30"))
	var out Output
	b.ReportAllocs()
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		if err := d.Decode(walBase+0x10, msg, &out); err != nil || out.Kind != KindEvent || out.Event.Poison != nil {
			b.Fatal(err, out.Event.Poison)
		}
	}
}

// BenchmarkDecodeInsert: an INSERT into the default outbox table with a
// 200-byte jsonb payload and empty headers.
func BenchmarkDecodeInsert(b *testing.B) { benchInsert(b, "{}", false) }

// BenchmarkDecodeInsertHeaders: the same with two string headers.
func BenchmarkDecodeInsertHeaders(b *testing.B) { benchInsert(b, benchHeaders, false) }

// BenchmarkDecodeInsertTimestamp: the same as BenchmarkDecodeInsert with
// the created_at column mapped (timestamptz parsing).
func BenchmarkDecodeInsertTimestamp(b *testing.B) { benchInsert(b, "{}", true) }

// benchRouted decodes an INSERT into public.routed (routedCols) with empty
// headers, mapped as cols.
func benchRouted(b *testing.B, cols Columns) {
	d, err := New(Config{Tables: []Table{{Name: "routed", Columns: cols}}})
	if err != nil {
		b.Fatal(err)
	}
	var out Output
	mustDecode(b, d, 0, encRelation(relRouted, "public", "routed", routedCols...), &out)
	mustDecode(b, d, walBase, encBegin(walBase+0x1000, commitTime, 700), &out)
	msg := encInsert(relRouted, txt("0193a0b4-7c1e-7d2f-9a3b-4c5d6e7f8091"), txt("order"), txt("order-12345"),
		txt("OrderCreated"), txt(payload200), txt("{}"), txt("2026-11-21 11:10:01.123456+05:30"),
		txt("7"), txt("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"), txt("42"), txt(`\x0001ff`))
	b.ReportAllocs()
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		if err := d.Decode(walBase+0x10, msg, &out); err != nil || out.Kind != KindEvent || out.Event.Poison != nil {
			b.Fatal(err, out.Event.Poison)
		}
	}
}

// BenchmarkDecodeInsertHeaderColumns: the same as BenchmarkDecodeInsert into
// a table with three header columns (text, bigint, bytea) and no headers
// column entries.
func BenchmarkDecodeInsertHeaderColumns(b *testing.B) {
	c := DefaultColumns()
	c.HeaderColumns = []string{"trace_id", "tenant_id", "sig"}
	benchRouted(b, c)
}

// BenchmarkDecodeInsertPartition: the same as BenchmarkDecodeInsert with a
// partition column mapped.
func BenchmarkDecodeInsertPartition(b *testing.B) {
	c := DefaultColumns()
	c.Partition = "part"
	benchRouted(b, c)
}

// BenchmarkDecodeMessageEvent: a tableless outbox message.
func BenchmarkDecodeMessageEvent(b *testing.B) {
	d, err := New(Config{MessagePrefix: "walrelay.outbox"})
	if err != nil {
		b.Fatal(err)
	}
	var out Output
	mustDecode(b, d, walBase, encBegin(walBase+0x1000, commitTime, 700), &out)
	msg := encMessage(true, walBase+0x10, "walrelay.outbox", []byte(`{"id": "0193a0b4-7c1e-7d2f-9a3b-4c5d6e7f8091", "aggregate_type": "order", "aggregate_id": "order-12345", "event_type": "OrderCreated", "payload": `+payload200+`, "headers": `+benchHeaders+`}`))
	b.ReportAllocs()
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		if err := d.Decode(walBase+0x10, msg, &out); err != nil || out.Kind != KindEvent || out.Event.Poison != nil {
			b.Fatal(err, out.Event.Poison)
		}
	}
}

// BenchmarkDecodeBeginCommit: the framing of one transaction.
func BenchmarkDecodeBeginCommit(b *testing.B) {
	d := benchDecoder(b, false)
	var out Output
	mustDecode(b, d, walBase, encCommit(walBase+0x1000, walBase+0x1030, commitTime), &out)
	begin := encBegin(walBase+0x1000, commitTime, 700)
	commit := encCommit(walBase+0x1000, walBase+0x1030, commitTime)
	b.ReportAllocs()
	for b.Loop() {
		if d.Decode(walBase, begin, &out) != nil || d.Decode(walBase+0x1030, commit, &out) != nil {
			b.Fatal("decode")
		}
	}
}
