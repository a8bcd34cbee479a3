package decoder

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

// rowOf returns the columns and text values of the Insert message msg
// (already decoded by d, so its relation is cached), as a query of the row
// in text format returns them: NULL as nil.
func rowOf(t *testing.T, d *Decoder, msg []byte) (table string, cols []RowColumn, vals [][]byte) {
	t.Helper()
	r := reader{b: msg, off: 1}
	id := r.u32()
	r.u8()
	d.readTuple(&r)
	if r.err != nil {
		t.Fatalf("re-read insert: %v", r.err)
	}
	rel := d.rels[id]
	if rel.alias != nil {
		rel = rel.alias
	}
	for i, c := range rel.cols {
		cols = append(cols, RowColumn{Name: c.name, Type: c.typ})
		v := d.vals[i]
		switch v.kind {
		case colText:
			vals = append(vals, append([]byte{}, v.in(msg)...))
		case colNull:
			vals = append(vals, nil)
		default:
			t.Skipf("column %s arrives as %q, which a query never returns", c.name, v.kind)
		}
	}
	return rel.table, cols, vals
}

// sameAsStream fails t unless the row event equals the stream event in every
// field but those only the WAL knows (LSN, XID), its poison included.
func sameAsStream(t *testing.T, row, stream Event) {
	t.Helper()
	want := stream
	want.LSN, want.XID, want.Poison = 0, 0, nil
	got := row
	got.Poison = nil
	if diff := eventDiff(got, want); diff != "" {
		t.Errorf("event %s: the row gives another event than its insert:\n%s", stream.ID, diff)
	}
	switch {
	case (row.Poison == nil) != (stream.Poison == nil):
		t.Errorf("event %s: row poison %v, stream poison %v", stream.ID, row.Poison, stream.Poison)
	case row.Poison != nil && row.Poison.Error() != stream.Poison.Error():
		t.Errorf("event %s: row poison %q, stream poison %q", stream.ID, row.Poison, stream.Poison)
	}
}

// TestDecodeRowMatchesCapture re-decodes every outbox INSERT of the real
// Postgres 15 capture as a row read from its table (the values the Insert
// carried, in text form) and requires the very event the stream gave: the
// same mapping, headers, timestamp, partition and poison.
func TestDecodeRowMatchesCapture(t *testing.T) {
	msgs := readCapture(t, capturePath)
	stream, err := New(captureConfig())
	if err != nil {
		t.Fatal(err)
	}
	rows, err := New(captureConfig())
	if err != nil {
		t.Fatal(err)
	}
	var out, rout Output
	n := 0
	for _, m := range msgs {
		if err := stream.Decode(m.walStart, m.data, &out); err != nil {
			t.Fatalf("decode capture at %s: %v", m.walStart, err)
		}
		if out.Kind != KindEvent || out.Event.Table == "" {
			continue
		}
		t.Run(out.Event.ID, func(t *testing.T) {
			table, cols, vals := rowOf(t, stream, m.data)
			if err := rows.DecodeRow(table, cols, vals, out.Event.CommitTime, &rout); err != nil {
				t.Fatalf("DecodeRow: %v", err)
			}
			if rout.Kind != KindEvent {
				t.Fatalf("kind %s, want event", rout.Kind)
			}
			sameAsStream(t, rout.Event, out.Event)
			n++
		})
	}
	if n < 10 {
		t.Fatalf("only %d table events in the capture were compared", n)
	}
	t.Logf("%d events of the capture re-decoded from their rows", n)
}

// TestDecodeRowMatchesInsert builds random rows of the test tables from
// good and bad values and requires DecodeRow to give each row's stream event.
func TestDecodeRowMatchesInsert(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	pick := func(vs ...tv) tv { return vs[rng.IntN(len(vs))] }
	strs := func() tv { return pick(txt("a"), txt(""), txt("ördér"), null(), txt("x-1")) }
	payloads := []tv{txt(`{"id": 1}`), txt(""), null(), txt(`"s"`), txt("[1, 2]")}
	headers := []tv{txt("{}"), null(), txt(`{"a": "b", "n": 1}`), txt(`["x"]`), txt(`{"id": "shadow", "traceparent": "00-1"}`), txt(`{"a":`)}
	stamps := []tv{txt("2026-11-21 05:40:01.123456+00"), null(), txt("2026-11-21 11:10:01.5+05:30"), txt("infinity")}
	byteas := []tv{txt(`\x0001ff`), txt(`\x0`), txt(`abc\\d\001`), null(), txt("")}
	stream := newTestDecoder(t, true)
	rows, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	var out, rout Output
	for i := range 500 {
		var rel uint32
		var row []tv
		if i%3 == 0 {
			rel = relBlob
			row = []tv{strs(), strs(), pick(byteas...), strs(), pick(byteas...)}
		} else {
			rel = relOutbox
			row = outboxRow(strs(), strs(), strs(), strs(), pick(payloads...), pick(headers...), pick(stamps...))
		}
		msg := encInsert(rel, row...)
		mustDecode(t, stream, walBase+0x10, msg, &out)
		table, cols, vals := rowOf(t, stream, msg)
		if err := rows.DecodeRow(table, cols, vals, commitTime, &rout); err != nil {
			t.Fatalf("row %d: DecodeRow: %v", i, err)
		}
		sameAsStream(t, rout.Event, out.Event)
	}
}

func TestDecodeRowErrors(t *testing.T) {
	d, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	cols := make([]RowColumn, len(outboxCols))
	vals := make([][]byte, len(outboxCols))
	for i, c := range outboxCols {
		cols[i] = RowColumn{Name: c.name, Type: c.typ}
		vals[i] = []byte("x")
	}
	var out Output
	if err := d.DecodeRow("public.other", cols, vals, time.Time{}, &out); !errors.Is(err, ErrNotOutboxTable) {
		t.Errorf("unconfigured table: %v, want ErrNotOutboxTable", err)
	}
	var mc *MissingColumnError
	if err := d.DecodeRow("public.outbox", cols[1:], vals[1:], time.Time{}, &out); !errors.As(err, &mc) || mc.Column != "id" {
		t.Errorf("missing id column: %v, want a MissingColumnError for id", err)
	}
	if err := d.DecodeRow("public.outbox", cols, vals[1:], time.Time{}, &out); err == nil {
		t.Error("fewer values than columns: no error")
	}
	if out.Kind != KindNone {
		t.Errorf("kind after an error: %s, want none", out.Kind)
	}
	s := newTestDecoder(t, true)
	if err := s.DecodeRow("public.outbox", cols, vals, time.Time{}, &out); err == nil {
		t.Error("DecodeRow inside a stream transaction: no error")
	}
}

// TestDecodeRowOwnership: the event owns its memory; the caller may reuse
// its value buffers at once.
func TestDecodeRowOwnership(t *testing.T) {
	d, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	cols := make([]RowColumn, len(outboxCols))
	for i, c := range outboxCols {
		cols[i] = RowColumn{Name: c.name, Type: c.typ}
	}
	vals := [][]byte{[]byte("00000000-0000-4000-8000-000000000001"), []byte("order"), []byte("order-1"), []byte("OrderCreated"),
		[]byte(`{"id": 1}`), []byte(`{"traceparent": "t1"}`), []byte("2026-11-21 05:40:01.123456+00")}
	var out Output
	if err := d.DecodeRow("public.outbox", cols, vals, commitTime, &out); err != nil {
		t.Fatal(err)
	}
	ev := out.Event
	for _, v := range vals {
		for i := range v {
			v[i] = '#'
		}
	}
	if err := d.DecodeRow("public.outbox", cols, [][]byte{[]byte("2"), []byte("b"), []byte("c"), []byte("d"), nil, nil, nil}, commitTime, &out); err != nil {
		t.Fatal(err)
	}
	want := outboxEvent()
	want.LSN, want.XID = 0, 0
	want.Headers = hdrs("traceparent", "t1")
	if diff := eventDiff(ev, want); diff != "" {
		t.Error(diff)
	}
}

// TestDecodeRowFiltered: a row its table's filter does not publish is
// KindFiltered, with the stream's reason.
func TestDecodeRowFiltered(t *testing.T) {
	cfg := testConfig()
	cfg.Tables[0].Filter = Filter{ExcludeEventTypes: []string{"Skip*"}, IncludeAggregateTypes: []string{"order"}}
	stream, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out, rout Output
	for _, m := range [][]byte{encRelation(relOutbox, "public", "outbox", outboxCols...), encBegin(walBase, commitTime, 700)} {
		mustDecode(t, stream, 0, m, &out)
	}
	rows, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range [][]tv{goodRow(),
		outboxRow(txt("1"), txt("order"), txt("a"), txt("SkipMe"), txt("{}"), txt("{}"), null()),
		outboxRow(txt("2"), txt("invoice"), txt("a"), txt("Created"), txt("{}"), txt("{}"), null())} {
		msg := encInsert(relOutbox, r...)
		mustDecode(t, stream, walBase+0x10, msg, &out)
		table, cols, vals := rowOf(t, stream, msg)
		if err := rows.DecodeRow(table, cols, vals, commitTime, &rout); err != nil {
			t.Fatal(err)
		}
		if rout.Kind != out.Kind || rout.Reason != out.Reason || rout.Table != out.Table {
			t.Errorf("row %s: kind %s reason %q table %q, the stream gave %s %q %q", out.Event.ID, rout.Kind, rout.Reason, rout.Table,
				out.Kind, out.Reason, out.Table)
		}
		sameAsStream(t, rout.Event, out.Event)
	}
}
