package decoder

import (
	"bytes"
	"encoding/binary"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

// The capture in testdata/capture/pg15.pgo is produced by
// internal/capture (run.sh) from a real Postgres 15 with pgoutput. This test
// replays it and asserts every output; internal/capture/main.go holds the SQL
// that produced it.

const capturePath = "testdata/capture/pg15.pgo"

func captureConfig() Config {
	withTS := DefaultColumns()
	withTS.Timestamp = "created_at"
	routed := withTS
	routed.Partition = "part"
	routed.HeaderColumns = []string{"trace_id", "tenant_id", "sig"}
	return Config{
		Tables: []Table{
			{Name: "outbox", Columns: withTS},
			{Schema: "app", Name: "outbox_bytea"},
			{Name: "outbox_text", Columns: withTS},
			{Name: "outbox_debezium", Columns: DebeziumColumns()},
			{Name: "outbox_routed", Columns: routed},
		},
		MessagePrefix: "walrelay.outbox",
	}
}

// want is one expected non-KindNone output; for events, LSN, XID and
// CommitTime are filled in from the stream.
type want struct {
	kind    Kind
	reason  string
	table   string
	content string
	event   Event
}

func uuid(n string) string { return "00000000-0000-4000-8000-0000000000" + n }

func ts(s string) time.Time {
	t, err := time.Parse("2006-01-02 15:04:05.999999", s)
	if err != nil {
		panic(err)
	}
	return t
}

func tableEvent(table, id, aggType, aggID, evType, payload string) Event {
	name := table
	if i := bytes.IndexByte([]byte(table), '.'); i >= 0 {
		name = table[i+1:]
	}
	return Event{Table: table, TableName: name, ID: uuid(id), AggregateType: aggType, AggregateID: []byte(aggID),
		EventType: evType, Payload: []byte(payload)}
}

func with(e Event, f func(e *Event)) Event { f(&e); return e }

func captureWants() []want {
	begin, commit := want{kind: KindBegin}, want{kind: KindCommit}
	ev := func(e Event) want { return want{kind: KindEvent, event: e} }
	ignored := func(reason, table string) want { return want{kind: KindIgnored, reason: reason, table: table} }
	big := make([]byte, 20000)
	for i := range big {
		big[i] = byte(i % 256)
	}
	return []want{
		// T1
		begin,
		ev(with(tableEvent("public.outbox", "01", "order", "order-1", "OrderCreated",
			`{"id": 1, "items": [{"qty": 2, "sku": "A-1"}], "total": 9.99}`),
			func(e *Event) { e.Timestamp = ts("2026-11-21 05:40:01.123456") })),
		ev(with(tableEvent("public.outbox", "02", "order", "order-2", "OrderCreated", `{"id": 2}`), func(e *Event) {
			e.Headers = hdrs("tenant", "acme", "traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
			e.Timestamp = ts("2026-11-21 05:40:02")
		})),
		ignored(ReasonUnmappedTable, "public.other_table"),
		ev(with(tableEvent("public.outbox", "03", "order", "order-1", "OrderDeleted", ""), func(e *Event) {
			e.Payload = nil // SQL NULL
			e.Timestamp = ts("1900-01-01 00:00:00")
		})),
		commit,
		// T2
		begin,
		ev(tableEvent("app.outbox_bytea", "11", "blob", "blob-1", "BlobStored", "\x00\xff\xfe\x80\xc3\x28\xff\x0a\x5c\x22")),
		ev(tableEvent("app.outbox_bytea", "12", "blob", "blob-2", "BlobStored", "")),
		ev(tableEvent("app.outbox_bytea", "13", "blob", "blob-3", "BlobStored", string(big))),
		commit,
		// T3
		begin,
		ev(with(tableEvent("public.outbox_text", "21", "note", "note-1", "NoteAdded",
			"line1\nline2 \"quoted\" \\ backslash — ünïcödé ✓"), func(e *Event) {
			e.Headers = hdrs("traceparent", "t-1", "k", "vé")
			e.Timestamp = ts("2026-11-21 05:40:01.123456")
		})),
		ev(with(tableEvent("public.outbox_text", "22", "note", "", "NoteAdded", "no key"), func(e *Event) {
			e.AggregateID, e.AggregateIDNull, e.Poison = nil, true, ErrNullAggregateID
			e.Timestamp = ts("2026-11-21 05:40:02")
		})),
		ev(with(tableEvent("public.outbox_text", "23", "note", "note-3", "NoteAdded", "bad headers"), func(e *Event) {
			e.Poison = ErrBadHeaders
		})),
		commit,
		// T4
		begin, {kind: KindHeartbeat, content: "hb-1"}, commit,
		// T5
		begin,
		ev(with(tableEvent("", "31", "user", "user-7", "UserSignedUp", `{"email": "a@example.com"}`), func(e *Event) {
			e.Headers = hdrs("traceparent", "t-31")
		})),
		ev(tableEvent("", "32", "user", "user-7", "UserNote", `"plain \"text\""`)),
		ev(Event{Payload: []byte("not json"), Poison: ErrBadMessage}),
		ignored(ReasonForeignMessage, ""),
		ev(with(tableEvent("public.outbox", "33", "user", "user-7", "UserUpdated", `{"v": 2}`), func(e *Event) {
			e.Timestamp = ts("2026-11-21 05:40:03")
		})),
		commit,
		// non-transactional messages
		ignored(ReasonNonTransactional, ""),
		{kind: KindHeartbeat, content: "hb-nontx"},
		// T6
		begin, ignored(ReasonUpdate, "public.outbox"), ignored(ReasonDelete, "public.outbox"), commit,
		// T7
		begin,
		ev(with(tableEvent("public.outbox", "41", "order", "order-4", "OrderShipped", `{"id": 4}`), func(e *Event) {
			e.Timestamp = ts("2026-11-21 05:40:04")
		})),
		ignored(ReasonDelete, "public.outbox"),
		commit,
		// T8
		begin, ignored(ReasonTruncate, "public.outbox_text"), commit,
		// (the rolled back transaction is absent)
		// T9: ADD COLUMN between two inserts
		begin,
		ev(with(tableEvent("public.outbox", "61", "order", "order-6", "BeforeAlter", `{"v": 1}`), func(e *Event) {
			e.Timestamp = ts("2026-11-21 05:40:06")
		})),
		ev(with(tableEvent("public.outbox", "62", "order", "order-6", "AfterAlter", `{"v": 2}`), func(e *Event) {
			e.Timestamp = ts("2026-11-21 05:40:07")
		})),
		commit,
		begin,
		ev(with(tableEvent("public.outbox", "63", "order", "order-6", "NextTxn", `{"v": 3}`), func(e *Event) {
			e.Timestamp = ts("2026-11-21 05:40:08")
		})),
		commit,
		// T10: Debezium layout before and after DROP COLUMN tenant (jsonb
		// normalizes the second payload's key order).
		begin, ev(tableEvent("public.outbox_debezium", "71", "invoice", "inv-1", "InvoiceIssued", `{"amount": 10}`)), commit,
		begin, ev(tableEvent("public.outbox_debezium", "72", "invoice", "inv-1", "InvoicePaid", `{"paid": true, "amount": 10}`)), commit,
		// T11: from a replication origin
		begin,
		ev(with(tableEvent("public.outbox", "81", "order", "order-8", "Replicated", `{"v": 8}`), func(e *Event) {
			e.Timestamp = ts("2026-11-21 05:40:09")
		})),
		commit,
		// T12: outbox_drop is not mapped here
		begin, ignored(ReasonUnmappedTable, "public.outbox_drop"), commit,
		begin, ignored(ReasonUnmappedTable, "public.outbox_drop"), commit,
		// T13: partition and header columns; trace_id is added mid-stream.
		begin,
		ev(with(tableEvent("public.outbox_routed", "a1", "order", "order-10", "Routed", `{"v": 10}`), func(e *Event) {
			e.Headers = []Header{{"tenant", []byte("acme")}, {"tenant_id", []byte("42")}, {"sig", []byte{0, 0xff}}}
			e.Timestamp = ts("2026-11-21 05:40:10")
			e.Partition, e.HasPartition = 2, true
		})),
		ev(with(tableEvent("public.outbox_routed", "a2", "order", "order-10", "RoutedNulls", `{"v": 11}`), func(e *Event) {
			e.Timestamp = ts("2026-11-21 05:40:11")
		})),
		ev(with(tableEvent("public.outbox_routed", "a3", "order", "order-10", "Traced", `{"v": 12}`), func(e *Event) {
			e.Headers = hdrs("trace_id", "00-abc-01", "tenant_id", "9223372036854775807", "sig", "")
			e.Timestamp = ts("2026-11-21 05:40:12")
			e.Partition, e.HasPartition = 32767, true
		})),
		ev(with(tableEvent("public.outbox_routed", "a4", "order", "order-10", "BadPartition", `{"v": 13}`), func(e *Event) {
			e.Headers = hdrs("tenant_id", "-9223372036854775808")
			e.Timestamp = ts("2026-11-21 05:40:13")
			e.Poison = ErrBadPartition
		})),
		ev(with(tableEvent("", "a5", "user", "user-7", "Partitioned", `{}`), func(e *Event) {
			e.Partition, e.HasPartition = 4, true
		})),
		commit,
		// end marker
		ignored(ReasonForeignMessage, ""),
	}
}

func TestCaptureReplay(t *testing.T) {
	msgs := readCapture(t, capturePath)
	d, err := New(captureConfig())
	if err != nil {
		t.Fatal(err)
	}
	wants := captureWants()
	var (
		out       Output
		begin     Output
		got       int
		lastEnd   = begin.EndLSN
		types     = map[byte]int{}
		relations int
	)
	for i, m := range msgs {
		types[m.data[0]]++
		// walsender sends walStart 0/0 for all but the last message of one
		// output callback: Relation and Type messages, and a Begin sent
		// together with an Origin. Changes, messages and commits carry their
		// LSN, and a logical message's own LSN field equals it.
		switch m.data[0] {
		case 'I', 'U', 'D', 'T', 'C', 'M':
			if m.walStart == 0 {
				t.Errorf("message %d (%c): walStart 0", i, m.data[0])
			}
		}
		if m.data[0] == 'M' && pglogrepl.LSN(binary.BigEndian.Uint64(m.data[2:])) != m.walStart {
			t.Errorf("message %d: LSN field %s, walStart %s", i, pglogrepl.LSN(binary.BigEndian.Uint64(m.data[2:])), m.walStart)
		}
		if err := d.Decode(m.walStart, m.data, &out); err != nil {
			t.Fatalf("message %d at %s: %v", i, m.walStart, err)
		}
		if out.Kind == KindNone {
			if m.data[0] == 'R' {
				relations++
			}
			continue
		}
		if got >= len(wants) {
			t.Fatalf("message %d: unexpected %s", i, out.Kind)
		}
		w := wants[got]
		got++
		if out.Kind != w.kind || out.Reason != w.reason || out.Table != w.table || string(out.Content) != w.content {
			t.Fatalf("message %d (%c at %s): got %s %q %q %q, want %s %q %q %q", i, m.data[0], m.walStart,
				out.Kind, out.Reason, out.Table, out.Content, w.kind, w.reason, w.table, w.content)
		}
		switch out.Kind {
		case KindBegin:
			begin = out
			if !d.InTxn() {
				t.Fatalf("message %d: not in txn after begin", i)
			}
		case KindCommit:
			if out.XID != begin.XID || out.CommitLSN != begin.CommitLSN || out.EndLSN <= out.CommitLSN || out.EndLSN <= lastEnd {
				t.Fatalf("message %d: commit %+v does not match begin %+v (last end %s)", i, out, begin, lastEnd)
			}
			if out.EndLSN != m.walStart {
				t.Errorf("message %d: commit end LSN %s, walStart %s", i, out.EndLSN, m.walStart)
			}
			lastEnd = out.EndLSN
		case KindEvent:
			if !d.InTxn() {
				t.Fatalf("message %d: event outside a transaction", i)
			}
			e := w.event
			e.LSN, e.XID, e.CommitTime = m.walStart, begin.XID, begin.CommitTime
			if diff := eventDiff(out.Event, e); diff != "" {
				t.Errorf("message %d (%c at %s): %s", i, m.data[0], m.walStart, diff)
			}
		}
	}
	if got != len(wants) {
		t.Fatalf("got %d outputs, want %d", got, len(wants))
	}
	if d.InTxn() {
		t.Fatal("in a transaction at the end")
	}
	// The capture covers every message type and the interesting text forms.
	for _, typ := range []byte("BCORYIUDTM") {
		if types[typ] == 0 {
			t.Errorf("capture has no %c message", typ)
		}
	}
	if relations < 10 {
		t.Errorf("only %d relation messages", relations)
	}
	var all []byte
	for _, m := range msgs {
		all = append(all, m.data...)
	}
	for _, s := range []string{
		"+05:30",     // an offset with minutes (server timezone Asia/Kolkata)
		`\x00fffe80`, // bytea hex output
		`v\u00e9`,    // json keeps escapes
	} {
		if !bytes.Contains(all, []byte(s)) {
			t.Errorf("capture lacks %q", s)
		}
	}
	// 1900 in Asia/Kolkata has a historic offset with seconds (+05:21:10).
	if !regexp.MustCompile(`1900-01-01 \d\d:\d\d:\d\d[+-]\d\d:\d\d:\d\d`).Match(all) {
		t.Error("capture lacks a timestamptz with a seconds offset")
	}
	if bytes.Contains(all, []byte("ShouldNotAppear")) {
		t.Error("the rolled back transaction is in the capture")
	}
}

// TestCaptureDroppedColumn maps outbox_drop, whose event_type column is
// dropped mid-stream: its next Relation message must fail.
func TestCaptureDroppedColumn(t *testing.T) {
	cfg := captureConfig()
	cfg.Tables = append(cfg.Tables, Table{Name: "outbox_drop"})
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out Output
	var events []string
	for i, m := range readCapture(t, capturePath) {
		err := d.Decode(m.walStart, m.data, &out)
		if out.Kind == KindEvent {
			events = append(events, out.Event.ID)
		}
		if err == nil {
			continue
		}
		var mc *MissingColumnError
		if !errors.As(err, &mc) || !errors.Is(err, ErrMissingColumn) || m.data[0] != 'R' {
			t.Fatalf("message %d: %v", i, err)
		}
		if mc.Table != "public.outbox_drop" || mc.Column != "event_type" || mc.Field != "EventType" {
			t.Fatalf("got %+v", mc)
		}
		if last := events[len(events)-1]; last != uuid("91") {
			t.Fatalf("last event before the error: %s", last)
		}
		return
	}
	t.Fatal("no ErrMissingColumn")
}
