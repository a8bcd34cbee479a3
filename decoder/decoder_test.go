package decoder

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

// Relation IDs used by the hand-built tests.
const (
	relOutbox = 16400 + iota
	relOther
	relBlob
	relMsgOnly
)

var (
	commitTime = time.Date(2026, 11, 21, 5, 40, 1, 123456000, time.UTC)
	walBase    = pglogrepl.LSN(0x16B3748)
)

// outboxCols is the default outbox table (migrations/001_outbox.sql).
var outboxCols = []rc{
	{"id", oidUUID}, {"aggregate_type", oidText}, {"aggregate_id", oidText}, {"event_type", oidText},
	{"payload", oidJSONB}, {"headers", oidJSONB}, {"created_at", oidTimestamptz},
}

// blobCols has a bytea payload and a bytea aggregate id, and no headers.
var blobCols = []rc{
	{"id", oidText}, {"kind", oidVarchar}, {"key", oidBytea}, {"type", oidVarchar}, {"body", oidBytea},
}

func testConfig() Config {
	oc := DefaultColumns()
	oc.Timestamp = "created_at"
	return Config{
		Tables: []Table{
			{Name: "outbox", Columns: oc},
			{Schema: "app", Name: "blob", Columns: Columns{ID: "id", AggregateType: "kind", AggregateID: "key", EventType: "type", Payload: "body"}},
		},
		MessagePrefix: "walrelay.outbox",
	}
}

// newTestDecoder returns a decoder that has seen the test relations and,
// when inTxn, a Begin of xid 700.
func newTestDecoder(t testing.TB, inTxn bool) *Decoder {
	t.Helper()
	d, err := New(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	var out Output
	for _, m := range [][]byte{
		encRelation(relOutbox, "public", "outbox", outboxCols...),
		encRelation(relOther, "public", "other", rc{"k", 23}, rc{"v", oidText}),
		encRelation(relBlob, "app", "blob", blobCols...),
	} {
		mustDecode(t, d, 0, m, &out)
	}
	if inTxn {
		mustDecode(t, d, walBase, encBegin(walBase+0x1000, commitTime, 700), &out)
	}
	return d
}

func mustDecode(t testing.TB, d *Decoder, lsn pglogrepl.LSN, msg []byte, out *Output) {
	t.Helper()
	if err := d.Decode(lsn, msg, out); err != nil {
		t.Fatalf("decode %q: %v", msg, err)
	}
}

// outboxRow returns the 7 tuple values of an outbox insert.
func outboxRow(id, aggType, aggID, evType, payload, headers, created tv) []tv {
	return []tv{id, aggType, aggID, evType, payload, headers, created}
}

func goodRow() []tv {
	return outboxRow(txt("00000000-0000-4000-8000-000000000001"), txt("order"), txt("order-1"),
		txt("OrderCreated"), txt(`{"id": 1}`), txt("{}"), txt("2026-11-21 05:40:01.123456+00"))
}

// eventDiff lists the differences between two events (Poison by errors.Is
// against want.Poison).
func eventDiff(got, want Event) string {
	var d []string
	add := func(f string, g, w any) { d = append(d, fmt.Sprintf("%s = %#v, want %#v", f, g, w)) }
	if got.Table != want.Table {
		add("Table", got.Table, want.Table)
	}
	if got.TableName != want.TableName {
		add("TableName", got.TableName, want.TableName)
	}
	if got.ID != want.ID {
		add("ID", got.ID, want.ID)
	}
	if got.AggregateType != want.AggregateType {
		add("AggregateType", got.AggregateType, want.AggregateType)
	}
	if !bytesEqualNil(got.AggregateID, want.AggregateID) {
		add("AggregateID", got.AggregateID, want.AggregateID)
	}
	if got.AggregateIDNull != want.AggregateIDNull {
		add("AggregateIDNull", got.AggregateIDNull, want.AggregateIDNull)
	}
	if got.EventType != want.EventType {
		add("EventType", got.EventType, want.EventType)
	}
	if !bytesEqualNil(got.Payload, want.Payload) {
		add("Payload", got.Payload, want.Payload)
	}
	if len(got.Headers) != len(want.Headers) || (got.Headers == nil) != (want.Headers == nil) {
		add("Headers", got.Headers, want.Headers)
	} else {
		for i := range got.Headers {
			if got.Headers[i].Key != want.Headers[i].Key || !bytes.Equal(got.Headers[i].Value, want.Headers[i].Value) {
				add("Headers", got.Headers, want.Headers)
				break
			}
		}
	}
	if !got.Timestamp.Equal(want.Timestamp) {
		add("Timestamp", got.Timestamp, want.Timestamp)
	}
	if got.Partition != want.Partition || got.HasPartition != want.HasPartition {
		add("Partition", fmt.Sprint(got.Partition, got.HasPartition), fmt.Sprint(want.Partition, want.HasPartition))
	}
	if !got.CommitTime.Equal(want.CommitTime) {
		add("CommitTime", got.CommitTime, want.CommitTime)
	}
	if got.LSN != want.LSN {
		add("LSN", got.LSN, want.LSN)
	}
	if got.XID != want.XID {
		add("XID", got.XID, want.XID)
	}
	switch {
	case want.Poison == nil && got.Poison != nil:
		add("Poison", got.Poison.Error(), nil)
	case want.Poison != nil && !errors.Is(got.Poison, want.Poison):
		add("Poison", fmt.Sprint(got.Poison), want.Poison.Error())
	}
	return strings.Join(d, "\n")
}

// bytesEqualNil is bytes.Equal that also tells nil from empty.
func bytesEqualNil(a, b []byte) bool {
	return (a == nil) == (b == nil) && bytes.Equal(a, b)
}

func hdrs(kv ...string) []Header {
	var h []Header
	for i := 0; i+1 < len(kv); i += 2 {
		h = append(h, Header{Key: kv[i], Value: []byte(kv[i+1])})
	}
	return h
}

// outboxEvent is the event goodRow produces at walBase+0x10.
func outboxEvent() Event {
	return Event{
		Table: "public.outbox", TableName: "outbox",
		ID: "00000000-0000-4000-8000-000000000001", AggregateType: "order", AggregateID: []byte("order-1"),
		EventType: "OrderCreated", Payload: []byte(`{"id": 1}`),
		Timestamp:  time.Date(2026, 11, 21, 5, 40, 1, 123456000, time.UTC),
		CommitTime: commitTime, LSN: walBase + 0x10, XID: 700,
	}
}

func TestDecodeInsert(t *testing.T) {
	with := func(f func(r []tv)) []tv { r := goodRow(); f(r); return r }
	event := func(f func(e *Event)) Event { e := outboxEvent(); f(&e); return e }
	tests := []struct {
		name string
		row  []tv
		want Event
	}{
		{"jsonb payload, empty headers", goodRow(), outboxEvent()},
		{"NULL payload is a tombstone",
			with(func(r []tv) { r[4] = null() }),
			event(func(e *Event) { e.Payload = nil })},
		{"empty payload is not NULL",
			with(func(r []tv) { r[4] = txt("") }),
			event(func(e *Event) { e.Payload = []byte{} })},
		{"string headers in order, others skipped",
			with(func(r []tv) {
				r[5] = txt(`{"n": 1, "tenant": "acme", "nested": {"x": "y"}, "traceparent": "00-abc-01", "arr": ["z"], "t": true, "nil": null}`)
			}),
			event(func(e *Event) { e.Headers = hdrs("tenant", "acme", "traceparent", "00-abc-01") })},
		{"escaped header keys and values",
			with(func(r []tv) { r[5] = txt(`{"k\u00e9y": "v\u00e9 \"q\" \\ \n \ud83d\ude00 \ud800", "a/b": "\/"}`) }),
			event(func(e *Event) { e.Headers = hdrs("kéy", "vé \"q\" \\ \n 😀 \uFFFD", "a/b", "/") })},
		{"empty header key and value",
			with(func(r []tv) { r[5] = txt(`{"": ""}`) }),
			event(func(e *Event) { e.Headers = hdrs("", "") })},
		{"headers with spaces around an empty object",
			with(func(r []tv) { r[5] = txt(" { } ") }),
			outboxEvent()},
		{"NULL headers", with(func(r []tv) { r[5] = null() }), outboxEvent()},
		{"JSON null headers", with(func(r []tv) { r[5] = txt("null") }), outboxEvent()},
		{"headers array poisons",
			with(func(r []tv) { r[5] = txt(`["a", "b"]`) }),
			event(func(e *Event) { e.Poison = ErrBadHeaders })},
		{"headers string poisons",
			with(func(r []tv) { r[5] = txt(`"a"`) }),
			event(func(e *Event) { e.Poison = ErrBadHeaders })},
		{"malformed headers poison",
			with(func(r []tv) { r[5] = txt(`{"a": "b",}`) }),
			event(func(e *Event) { e.Poison = ErrBadHeaders })},
		{"headers with trailing garbage poison",
			with(func(r []tv) { r[5] = txt(`{"a": "b"} x`) }),
			event(func(e *Event) { e.Poison = ErrBadHeaders })},
		{"NULL aggregate id",
			with(func(r []tv) { r[2] = null() }),
			event(func(e *Event) { e.AggregateID, e.AggregateIDNull, e.Poison = nil, true, ErrNullAggregateID })},
		{"empty aggregate id is a valid key",
			with(func(r []tv) { r[2] = txt("") }),
			event(func(e *Event) { e.AggregateID = []byte{} })},
		{"NULL id",
			with(func(r []tv) { r[0] = null() }),
			event(func(e *Event) { e.ID, e.Poison = "", ErrNullField })},
		{"NULL aggregate type",
			with(func(r []tv) { r[1] = null() }),
			event(func(e *Event) { e.AggregateType, e.Poison = "", ErrNullField })},
		{"NULL event type",
			with(func(r []tv) { r[3] = null() }),
			event(func(e *Event) { e.EventType, e.Poison = "", ErrNullField })},
		{"all strings NULL",
			with(func(r []tv) { r[0], r[1], r[3] = null(), null(), null() }),
			event(func(e *Event) { e.ID, e.AggregateType, e.EventType, e.Poison = "", "", "", ErrNullField })},
		{"unchanged TOAST payload poisons",
			with(func(r []tv) { r[4] = unchanged() }),
			event(func(e *Event) { e.Payload, e.Poison = nil, ErrUnsupportedValue })},
		{"binary payload poisons",
			with(func(r []tv) { r[4] = binv("\x01{}") }),
			event(func(e *Event) { e.Payload, e.Poison = nil, ErrUnsupportedValue })},
		{"unchanged aggregate id poisons",
			with(func(r []tv) { r[2] = unchanged() }),
			event(func(e *Event) { e.AggregateID, e.Poison = nil, ErrUnsupportedValue })},
		{"unchanged headers poison",
			with(func(r []tv) { r[5] = unchanged() }),
			event(func(e *Event) { e.Poison = ErrUnsupportedValue })},
		{"NULL timestamp",
			with(func(r []tv) { r[6] = null() }),
			event(func(e *Event) { e.Timestamp = time.Time{} })},
		{"timestamp with offset",
			with(func(r []tv) { r[6] = txt("2026-11-21 11:10:01.5+05:30") }),
			event(func(e *Event) { e.Timestamp = time.Date(2026, 11, 21, 5, 40, 1, 500000000, time.UTC) })},
		{"bad timestamp poisons",
			with(func(r []tv) { r[6] = txt("infinity") }),
			event(func(e *Event) { e.Timestamp, e.Poison = time.Time{}, ErrBadTimestamp })},
		{"first poison wins",
			with(func(r []tv) { r[0], r[2] = null(), null() }),
			event(func(e *Event) { e.ID, e.AggregateID, e.AggregateIDNull, e.Poison = "", nil, true, ErrNullField })},
		{"unicode strings",
			with(func(r []tv) { r[1], r[2], r[3] = txt("ördér"), txt("ключ-1"), txt("事件") }),
			event(func(e *Event) {
				e.AggregateType, e.AggregateID, e.EventType = "ördér", []byte("ключ-1"), "事件"
			})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newTestDecoder(t, true)
			var out Output
			mustDecode(t, d, walBase+0x10, encInsert(relOutbox, tt.row...), &out)
			if out.Kind != KindEvent {
				t.Fatalf("kind = %s, want event", out.Kind)
			}
			if diff := eventDiff(out.Event, tt.want); diff != "" {
				t.Error(diff)
			}
		})
	}
}

// TestDecodePayloadTypes decodes the payload of each accepted column type.
func TestDecodePayloadTypes(t *testing.T) {
	tests := []struct {
		name string
		typ  uint32
		text string
		want []byte
	}{
		{"jsonb", oidJSONB, `{"a": 1, "b": [true, null]}`, []byte(`{"a": 1, "b": [true, null]}`)},
		{"json keeps its text", oidJSON, `{ "b":1,"a" : 2 }`, []byte(`{ "b":1,"a" : 2 }`)},
		{"text", oidText, "line1\nline2 \"q\" \\ ü", []byte("line1\nline2 \"q\" \\ ü")},
		{"varchar", oidVarchar, "hello", []byte("hello")},
		{"bytea hex non-UTF-8", oidBytea, `\x00fffe80c328ff0a5c22`, []byte{0x00, 0xff, 0xfe, 0x80, 0xc3, 0x28, 0xff, 0x0a, 0x5c, 0x22}},
		{"bytea hex uppercase", oidBytea, `\xDEADBEEF`, []byte{0xde, 0xad, 0xbe, 0xef}},
		{"bytea empty", oidBytea, `\x`, []byte{}},
		{"bytea escape format", oidBytea, `a\\b\000\377\012z`, []byte{'a', '\\', 'b', 0, 0xff, '\n', 'z'}},
		{"bytea escape format empty", oidBytea, ``, []byte{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newTestDecoder(t, true)
			cols := append([]rc(nil), outboxCols...)
			cols[4].typ = tt.typ
			var out Output
			mustDecode(t, d, 0, encRelation(relOutbox, "public", "outbox", cols...), &out)
			row := goodRow()
			row[4] = txt(tt.text)
			mustDecode(t, d, walBase+0x10, encInsert(relOutbox, row...), &out)
			want := outboxEvent()
			want.Payload = tt.want
			if diff := eventDiff(out.Event, want); diff != "" {
				t.Error(diff)
			}
		})
	}
}

func TestDecodeBytea(t *testing.T) {
	tests := []struct {
		name        string
		key, body   tv
		wantKey     []byte
		wantPayload []byte
		poison      error
	}{
		{"hex key and body", txt(`\x6b31`), txt(`\x00ff`), []byte("k1"), []byte{0, 0xff}, nil},
		{"NULL body", txt(`\x6b31`), null(), []byte("k1"), nil, nil},
		{"odd hex", txt(`\x6b31`), txt(`\x0`), []byte("k1"), nil, ErrBadPayload},
		{"bad hex digit", txt(`\x6b31`), txt(`\x0g`), []byte("k1"), nil, ErrBadPayload},
		{"bad escape", txt(`\x6b31`), txt(`\9`), []byte("k1"), nil, ErrBadPayload},
		{"short octal", txt(`\x6b31`), txt(`\12`), []byte("k1"), nil, ErrBadPayload},
		{"octal out of range", txt(`\x6b31`), txt(`\400`), []byte("k1"), nil, ErrBadPayload},
		{"lone backslash", txt(`\x6b31`), txt(`\`), []byte("k1"), nil, ErrBadPayload},
		{"bad key", txt(`\xz`), txt(`\x00`), nil, []byte{0}, ErrBadPayload},
		{"NULL key", null(), txt(`\x00`), nil, []byte{0}, ErrNullAggregateID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newTestDecoder(t, true)
			var out Output
			mustDecode(t, d, walBase+0x10, encInsert(relBlob, txt("e1"), txt("blob"), tt.key, txt("Stored"), tt.body), &out)
			want := Event{
				Table: "app.blob", TableName: "blob", ID: "e1", AggregateType: "blob", EventType: "Stored",
				AggregateID: tt.wantKey, AggregateIDNull: tt.key.kind == 'n', Payload: tt.wantPayload,
				CommitTime: commitTime, LSN: walBase + 0x10, XID: 700, Poison: tt.poison,
			}
			if diff := eventDiff(out.Event, want); diff != "" {
				t.Error(diff)
			}
		})
	}
}

func TestDecodeMessageTypes(t *testing.T) {
	type step struct {
		msg     []byte
		want    Output
		wantErr error
	}
	begin := encBegin(walBase+0x1000, commitTime, 700)
	commit := encCommit(walBase+0x1000, walBase+0x1030, commitTime.Add(time.Millisecond))
	beginOut := Output{Kind: KindBegin, XID: 700, CommitLSN: walBase + 0x1000, CommitTime: commitTime}
	commitOut := Output{Kind: KindCommit, XID: 700, CommitLSN: walBase + 0x1000, EndLSN: walBase + 0x1030, CommitTime: commitTime.Add(time.Millisecond)}
	row := goodRow()
	otherRow := []tv{txt("1"), txt("x")}
	tests := []struct {
		name  string
		steps []step
	}{
		{"begin commit", []step{{msg: begin, want: beginOut}, {msg: commit, want: commitOut}}},
		{"origin and type", []step{
			{msg: begin, want: beginOut},
			{msg: encOrigin(0x1000, "upstream"), want: Output{}},
			{msg: encType(16500, "public", "mood"), want: Output{}},
			{msg: commit, want: commitOut},
		}},
		{"relation", []step{{msg: encRelation(99, "", "pg_thing", rc{"a", 23}), want: Output{}}}},
		{"insert into unmapped table", []step{
			{msg: begin, want: beginOut},
			{msg: encInsert(relOther, otherRow...), want: Output{Kind: KindIgnored, Reason: ReasonUnmappedTable, Table: "public.other"}},
		}},
		{"update without old tuple", []step{
			{msg: begin, want: beginOut},
			{msg: encUpdate(relOutbox, 0, nil, row...), want: Output{Kind: KindIgnored, Reason: ReasonUpdate, Table: "public.outbox"}},
		}},
		{"update with key", []step{
			{msg: begin, want: beginOut},
			{msg: encUpdate(relOutbox, 'K', []tv{txt("id1"), null(), null(), null(), null(), null(), null()}, row...),
				want: Output{Kind: KindIgnored, Reason: ReasonUpdate, Table: "public.outbox"}},
		}},
		{"update with old row, unchanged toast", []step{
			{msg: begin, want: beginOut},
			{msg: encUpdate(relOutbox, 'O', row, append(row[:4:4], unchanged(), unchanged(), txt("x"))...),
				want: Output{Kind: KindIgnored, Reason: ReasonUpdate, Table: "public.outbox"}},
		}},
		{"update of unmapped table", []step{
			{msg: begin, want: beginOut},
			{msg: encUpdate(relOther, 0, nil, otherRow...), want: Output{Kind: KindIgnored, Reason: ReasonUnmappedTable, Table: "public.other"}},
		}},
		{"delete by key", []step{
			{msg: begin, want: beginOut},
			{msg: encDelete(relOutbox, 'K', txt("id1"), null(), null(), null(), null(), null(), null()),
				want: Output{Kind: KindIgnored, Reason: ReasonDelete, Table: "public.outbox"}},
		}},
		{"delete with old row", []step{
			{msg: begin, want: beginOut},
			{msg: encDelete(relBlob, 'O', txt("e"), txt("k"), txt(`\x00`), txt("t"), null()),
				want: Output{Kind: KindIgnored, Reason: ReasonDelete, Table: "app.blob"}},
		}},
		{"truncate reports the first mapped table", []step{
			{msg: begin, want: beginOut},
			{msg: encTruncate(0, relOther, relBlob, relOutbox), want: Output{Kind: KindIgnored, Reason: ReasonTruncate, Table: "app.blob"}},
		}},
		{"truncate of unmapped tables only", []step{
			{msg: begin, want: beginOut},
			{msg: encTruncate(1, relOther), want: Output{Kind: KindIgnored, Reason: ReasonUnmappedTable, Table: "public.other"}},
		}},
		{"transactional heartbeat", []step{
			{msg: begin, want: beginOut},
			{msg: encMessage(true, walBase, "walrelay.heartbeat", []byte("hb")), want: Output{Kind: KindHeartbeat, Content: []byte("hb")}},
			{msg: commit, want: commitOut},
		}},
		{"non-transactional heartbeat", []step{
			{msg: encMessage(false, walBase, "walrelay.heartbeat", []byte("2026-11-21T05:40:01Z")),
				want: Output{Kind: KindHeartbeat, Content: []byte("2026-11-21T05:40:01Z")}},
		}},
		{"non-transactional outbox message", []step{
			{msg: encMessage(false, walBase, "walrelay.outbox", []byte(`{}`)), want: Output{Kind: KindIgnored, Reason: ReasonNonTransactional}},
		}},
		{"foreign messages", []step{
			{msg: encMessage(false, walBase, "other", []byte(`x`)), want: Output{Kind: KindIgnored, Reason: ReasonForeignMessage}},
			{msg: begin, want: beginOut},
			{msg: encMessage(true, walBase, "walrelay.outbox.v2", nil), want: Output{Kind: KindIgnored, Reason: ReasonForeignMessage}},
			{msg: encMessage(true, walBase, "", nil), want: Output{Kind: KindIgnored, Reason: ReasonForeignMessage}},
		}},
		{"unknown message types", []step{
			{msg: []byte{'S', 0, 0, 0, 1, 1}, wantErr: ErrUnknownMessage}, // stream start
			{msg: []byte{'A'}, wantErr: ErrUnknownMessage},
			{msg: []byte{'w'}, wantErr: ErrUnknownMessage},
			{msg: []byte{0}, wantErr: ErrUnknownMessage},
			{msg: nil, wantErr: ErrTruncated},
		}},
		{"state errors", []step{
			{msg: commit, wantErr: ErrProtocol},
			{msg: encInsert(relOutbox, row...), wantErr: ErrProtocol},
			{msg: encUpdate(relOutbox, 0, nil, row...), wantErr: ErrProtocol},
			{msg: encDelete(relOutbox, 'K', row...), wantErr: ErrProtocol},
			{msg: encTruncate(0, relOutbox), wantErr: ErrProtocol},
			{msg: encMessage(true, walBase, "walrelay.heartbeat", nil), wantErr: ErrProtocol},
			{msg: encMessage(true, walBase, "walrelay.outbox", nil), wantErr: ErrProtocol},
			{msg: begin, want: beginOut},
			{msg: encBegin(walBase+0x2000, commitTime, 701), wantErr: ErrProtocol},
			{msg: commit, want: commitOut},
			{msg: commit, wantErr: ErrProtocol},
		}},
		{"unknown relations", []step{
			{msg: begin, want: beginOut},
			{msg: encInsert(4242, txt("x")), wantErr: ErrUnknownRelation},
			{msg: encUpdate(4242, 0, nil, txt("x")), wantErr: ErrUnknownRelation},
			{msg: encDelete(4242, 'K', txt("x")), wantErr: ErrUnknownRelation},
			{msg: encTruncate(0, relOutbox, 4242), wantErr: ErrUnknownRelation},
		}},
		{"malformed messages", []step{
			{msg: begin, want: beginOut},
			{msg: append(encInsert(relOutbox, row...), 0), wantErr: ErrProtocol},                   // trailing byte
			{msg: encInsert(relOutbox, row[:6]...), wantErr: ErrProtocol},                          // column count
			{msg: encInsert(relOutbox, append(row, txt("extra"))...), wantErr: ErrProtocol},        // column count
			{msg: encInsert(relOutbox, append(row[:6:6], tv{kind: 'x'})...), wantErr: ErrProtocol}, // column kind
			{msg: newMsg('I').u32(relOutbox).u8('K').tuple(row...).bytes(), wantErr: ErrProtocol},  // tag
			{msg: newMsg('I').u32(relOutbox).u8('N').u16(0xffff).bytes(), wantErr: ErrProtocol},    // negative count
			{msg: newMsg('I').u32(relOutbox).u8('N').u16(1).u8('t').u32(0xffffffff).bytes(), wantErr: ErrProtocol},
			{msg: newMsg('U').u32(relOutbox).u8('X').tuple(row...).bytes(), wantErr: ErrProtocol},
			{msg: newMsg('U').u32(relOutbox).u8('K').tuple(row...).u8('K').tuple(row...).bytes(), wantErr: ErrProtocol},
			{msg: newMsg('D').u32(relOutbox).u8('N').tuple(row...).bytes(), wantErr: ErrProtocol},
			{msg: newMsg('T').u32(0xffffffff).u8(0).bytes(), wantErr: ErrProtocol},
			{msg: newMsg('R').u32(1).str("public").str("x").u8('d').u16(0x8000).bytes(), wantErr: ErrProtocol},
			{msg: newMsg('M').u8(1).u64(0).str("walrelay.heartbeat").u32(0x80000000).bytes(), wantErr: ErrProtocol},
			{msg: append(begin, 0), wantErr: ErrProtocol},
			{msg: append(commit, 0), wantErr: ErrProtocol},
			{msg: append(encOrigin(1, "o"), 0), wantErr: ErrProtocol},
			{msg: append(encType(1, "a", "b"), 0), wantErr: ErrProtocol},
			{msg: append(encRelation(1, "a", "b"), 0), wantErr: ErrProtocol},
			{msg: append(encMessage(true, 0, "p", nil), 0), wantErr: ErrProtocol},
			{msg: append(encTruncate(0, relOutbox), 0), wantErr: ErrProtocol},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newTestDecoder(t, false)
			var out Output
			for i, s := range tt.steps {
				inTxn := d.InTxn()
				err := d.Decode(walBase, s.msg, &out)
				if s.wantErr != nil {
					var de *DecodeError
					if !errors.As(err, &de) || !errors.Is(err, s.wantErr) {
						t.Fatalf("step %d: err = %v, want a *DecodeError wrapping %v", i, err, s.wantErr)
					}
					if len(s.msg) > 0 && de.Type != s.msg[0] || de.LSN != walBase || de.Offset < 0 || de.Offset > len(s.msg) {
						t.Errorf("step %d: DecodeError %+v", i, de)
					}
					if out.Kind != KindNone || d.InTxn() != inTxn {
						t.Errorf("step %d: after error kind = %s, in txn %v (was %v)", i, out.Kind, d.InTxn(), inTxn)
					}
					continue
				}
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if diff := outputDiff(out, s.want); diff != "" {
					t.Errorf("step %d (%c): %s", i, s.msg[0], diff)
				}
			}
		})
	}
}

// outputDiff compares the non-event fields of two outputs.
func outputDiff(got, want Output) string {
	var d []string
	if got.Kind != want.Kind || got.XID != want.XID || got.CommitLSN != want.CommitLSN || got.EndLSN != want.EndLSN ||
		!got.CommitTime.Equal(want.CommitTime) || got.Reason != want.Reason || got.Table != want.Table {
		d = append(d, fmt.Sprintf("got %s xid=%d commit=%s end=%s time=%s reason=%q table=%q, want %s xid=%d commit=%s end=%s time=%s reason=%q table=%q",
			got.Kind, got.XID, got.CommitLSN, got.EndLSN, got.CommitTime, got.Reason, got.Table,
			want.Kind, want.XID, want.CommitLSN, want.EndLSN, want.CommitTime, want.Reason, want.Table))
	}
	if !bytes.Equal(got.Content, want.Content) {
		d = append(d, fmt.Sprintf("content %q, want %q", got.Content, want.Content))
	}
	return strings.Join(d, "; ")
}

func TestDecodeMessageEvent(t *testing.T) {
	base := Event{CommitTime: commitTime, LSN: walBase + 0x20, XID: 700}
	ev := func(f func(e *Event)) Event { e := base; f(&e); return e }
	full := func(e *Event) {
		e.ID, e.AggregateType, e.AggregateID, e.EventType = "e-1", "user", []byte("user-7"), "UserSignedUp"
	}
	tests := []struct {
		name    string
		content string
		want    Event
	}{
		{"object payload and headers",
			`{"id": "e-1", "aggregate_type": "user", "aggregate_id": "user-7", "event_type": "UserSignedUp", "payload": {"email": "a@example.com", "n": [1, 2]}, "headers": {"traceparent": "t-1", "n": 1}}`,
			ev(func(e *Event) {
				full(e)
				e.Payload = []byte(`{"email": "a@example.com", "n": [1, 2]}`)
				e.Headers = hdrs("traceparent", "t-1")
			})},
		{"string payload is its JSON text, like jsonb's payload::text",
			`{"id":"e-1","aggregate_type":"user","aggregate_id":"user-7","event_type":"UserSignedUp","payload":"plain \"text\" \u00e9"}`,
			ev(func(e *Event) { full(e); e.Payload = []byte(`"plain \"text\" \u00e9"`) })},
		{"number, array, bool payloads are raw JSON",
			`{"id":"e-1","aggregate_type":"user","aggregate_id":"user-7","event_type":"UserSignedUp","payload":[1, {"a": -2.5e3}]}`,
			ev(func(e *Event) { full(e); e.Payload = []byte(`[1, {"a": -2.5e3}]`) })},
		{"number payload",
			`{"id":"e-1","aggregate_type":"user","aggregate_id":"user-7","event_type":"UserSignedUp","payload":-0.5}`,
			ev(func(e *Event) { full(e); e.Payload = []byte(`-0.5`) })},
		{"null payload is a tombstone",
			`{"id":"e-1","aggregate_type":"user","aggregate_id":"user-7","event_type":"UserSignedUp","payload":null,"headers":null}`,
			ev(full)},
		{"absent payload is a tombstone",
			`{"id":"e-1","aggregate_type":"user","aggregate_id":"user-7","event_type":"UserSignedUp"}`,
			ev(full)},
		{"empty string payload",
			`{"id":"e-1","aggregate_type":"user","aggregate_id":"user-7","event_type":"UserSignedUp","payload":""}`,
			ev(func(e *Event) { full(e); e.Payload = []byte(`""`) })},
		{"numeric id and aggregate id, escaped keys, unknown fields, duplicates",
			` {"\u0069d": 42, "aggregate_type": "x", "aggregate_type": "user", "aggregate_id": 7, "extra": {"id": "no"}, "event_type": "UserSignedUp"} `,
			ev(func(e *Event) { full(e); e.ID, e.AggregateID = "42", []byte("7") })},
		{"escaped aggregate id",
			`{"id":"e-1","aggregate_type":"user","aggregate_id":"us\u00e9r\n","event_type":"UserSignedUp"}`,
			ev(func(e *Event) { full(e); e.AggregateID = []byte("usér\n") })},
		{"missing aggregate id",
			`{"id":"e-1","aggregate_type":"user","event_type":"UserSignedUp","payload":{}}`,
			ev(func(e *Event) {
				full(e)
				e.AggregateID, e.AggregateIDNull, e.Payload, e.Poison = nil, true, []byte("{}"), ErrNullAggregateID
			})},
		{"null aggregate id",
			`{"id":"e-1","aggregate_type":"user","aggregate_id":null,"event_type":"UserSignedUp","payload":"p"}`,
			ev(func(e *Event) {
				full(e)
				e.AggregateID, e.AggregateIDNull, e.Payload, e.Poison = nil, true, []byte(`"p"`), ErrNullAggregateID
			})},
		{"missing event type",
			`{"id":"e-1","aggregate_type":"user","aggregate_id":"user-7"}`,
			ev(func(e *Event) { full(e); e.EventType, e.Poison = "", ErrNullField })},
		{"object event type",
			`{"id":"e-1","aggregate_type":"user","aggregate_id":"user-7","event_type":{}}`,
			ev(func(e *Event) { full(e); e.EventType, e.Poison = "", ErrBadMessage })},
		{"numeric aggregate type",
			`{"id":"e-1","aggregate_type":1,"aggregate_id":"user-7","event_type":"UserSignedUp"}`,
			ev(func(e *Event) { full(e); e.AggregateType, e.Poison = "", ErrBadMessage })},
		{"bool aggregate id",
			`{"id":"e-1","aggregate_type":"user","aggregate_id":true,"event_type":"UserSignedUp"}`,
			ev(func(e *Event) { full(e); e.AggregateID, e.Poison = nil, ErrBadMessage })},
		{"headers array",
			`{"id":"e-1","aggregate_type":"user","aggregate_id":"user-7","event_type":"UserSignedUp","headers":["a"]}`,
			ev(func(e *Event) { full(e); e.Poison = ErrBadHeaders })},
		{"not JSON keeps the content as payload",
			`not json`,
			ev(func(e *Event) { e.Payload, e.Poison = []byte("not json"), ErrBadMessage })},
		{"empty content",
			``,
			ev(func(e *Event) { e.Payload, e.Poison = []byte{}, ErrBadMessage })},
		{"array content",
			`[{"id":"e-1"}]`,
			ev(func(e *Event) { e.Payload, e.Poison = []byte(`[{"id":"e-1"}]`), ErrBadMessage })},
		{"truncated object",
			`{"id":"e-1","aggregate_type":"user"`,
			ev(func(e *Event) { e.Payload, e.Poison = []byte(`{"id":"e-1","aggregate_type":"user"`), ErrBadMessage })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newTestDecoder(t, true)
			var out Output
			mustDecode(t, d, walBase+0x20, encMessage(true, walBase+0x20, "walrelay.outbox", []byte(tt.content)), &out)
			if out.Kind != KindEvent {
				t.Fatalf("kind = %s, want event", out.Kind)
			}
			if diff := eventDiff(out.Event, tt.want); diff != "" {
				t.Error(diff)
			}
		})
	}
}

// TestTruncatedEverywhere cuts valid messages at every offset: each prefix
// must fail with ErrTruncated and change nothing.
func TestTruncatedEverywhere(t *testing.T) {
	row := goodRow()
	row[5] = txt(`{"traceparent": "t", "k": "v"}`)
	msgs := map[string][]byte{
		"begin":      encBegin(walBase, commitTime, 701),
		"commit":     encCommit(walBase, walBase+8, commitTime),
		"origin":     encOrigin(walBase, "origin"),
		"type":       encType(16500, "public", "mood"),
		"relation":   encRelation(relOutbox, "public", "outbox", outboxCols...),
		"insert":     encInsert(relOutbox, row...),
		"insert nul": encInsert(relOutbox, null(), null(), null(), null(), unchanged(), null(), binv("x")),
		"update":     encUpdate(relOutbox, 'O', row, row...),
		"update key": encUpdate(relOutbox, 'K', row[:1], row...),
		"delete":     encDelete(relOutbox, 'K', row...),
		"truncate":   encTruncate(0, relOther, relOutbox),
		"message":    encMessage(true, walBase, "walrelay.outbox", []byte(`{"id":"e","aggregate_type":"a","aggregate_id":"k","event_type":"t"}`)),
		"heartbeat":  encMessage(true, walBase, "walrelay.heartbeat", []byte("hb")),
	}
	for name, msg := range msgs {
		t.Run(name, func(t *testing.T) {
			// Begin and Commit need the opposite state.
			inTxn := name != "begin"
			d := newTestDecoder(t, inTxn)
			var out Output
			for n := range len(msg) {
				out.Kind = KindEvent // must be reset
				err := d.Decode(walBase, msg[:n], &out)
				if !errors.Is(err, ErrTruncated) {
					t.Fatalf("prefix %d/%d: err = %v, want ErrTruncated", n, len(msg), err)
				}
				if out.Kind != KindNone || d.InTxn() != inTxn {
					t.Fatalf("prefix %d: kind %s, in txn %v", n, out.Kind, d.InTxn())
				}
			}
			if err := d.Decode(walBase, msg, &out); err != nil {
				t.Fatalf("whole message: %v", err)
			}
		})
	}
}

func TestRelationReplaced(t *testing.T) {
	d := newTestDecoder(t, true)
	var out Output
	// ADD COLUMN: the new column comes last.
	cols := append(append([]rc(nil), outboxCols...), rc{"source", oidText})
	mustDecode(t, d, 0, encRelation(relOutbox, "public", "outbox", cols...), &out)
	if err := d.Decode(walBase+0x10, encInsert(relOutbox, goodRow()...), &out); !errors.Is(err, ErrProtocol) {
		t.Fatalf("insert with the old layout: err = %v, want ErrProtocol", err)
	}
	mustDecode(t, d, walBase+0x10, encInsert(relOutbox, append(goodRow(), txt("api"))...), &out)
	if diff := eventDiff(out.Event, outboxEvent()); diff != "" {
		t.Fatal(diff)
	}

	// A dropped leading column and reordered columns: indexes move.
	cols = []rc{{"payload", oidBytea}, {"event_type", oidText}, {"aggregate_id", oidText}, {"headers", oidJSON},
		{"aggregate_type", oidText}, {"created_at", oidTimestamp}, {"id", oidUUID}}
	mustDecode(t, d, 0, encRelation(relOutbox, "public", "outbox", cols...), &out)
	mustDecode(t, d, walBase+0x10, encInsert(relOutbox,
		txt(`\x0102`), txt("Moved"), txt("k-2"), txt(`{"h": "v"}`), txt("agg"), txt("2026-11-21 05:40:01.123456"), txt("id-2")), &out)
	want := Event{
		Table: "public.outbox", TableName: "outbox", ID: "id-2", AggregateType: "agg", AggregateID: []byte("k-2"),
		EventType: "Moved", Payload: []byte{1, 2}, Headers: hdrs("h", "v"),
		Timestamp:  time.Date(2026, 11, 21, 5, 40, 1, 123456000, time.UTC),
		CommitTime: commitTime, LSN: walBase + 0x10, XID: 700,
	}
	if diff := eventDiff(out.Event, want); diff != "" {
		t.Fatal(diff)
	}

	// The same ID under another name is the outbox renamed: its inserts
	// are not another table's (TestRenamedOutboxTableStops).
	mustDecode(t, d, 0, encRelation(relOutbox, "public", "renamed", rc{"a", oidText}), &out)
	if err := d.Decode(walBase+0x10, encInsert(relOutbox, txt("x")), &out); !errors.Is(err, ErrTableRenamed) {
		t.Fatalf("insert after a rename: err = %v, want ErrTableRenamed", err)
	}
}

func TestMissingColumn(t *testing.T) {
	drop := func(name string) []rc {
		var cols []rc
		for _, c := range outboxCols {
			if c.name != name {
				cols = append(cols, c)
			}
		}
		return cols
	}
	tests := []struct {
		column, field string
	}{
		{"id", "ID"}, {"aggregate_type", "AggregateType"}, {"aggregate_id", "AggregateID"},
		{"event_type", "EventType"}, {"payload", "Payload"}, {"headers", "Headers"}, {"created_at", "Timestamp"},
	}
	for _, tt := range tests {
		t.Run(tt.column, func(t *testing.T) {
			d := newTestDecoder(t, true)
			var out Output
			err := d.Decode(0, encRelation(relOutbox, "public", "outbox", drop(tt.column)...), &out)
			var mc *MissingColumnError
			if !errors.Is(err, ErrMissingColumn) || !errors.As(err, &mc) {
				t.Fatalf("err = %v, want a *MissingColumnError", err)
			}
			if mc.Table != "public.outbox" || mc.Column != tt.column || mc.Field != tt.field {
				t.Errorf("got %+v", mc)
			}
			if !strings.Contains(err.Error(), `"`+tt.column+`"`) || !strings.Contains(err.Error(), "public.outbox") {
				t.Errorf("message %q does not name the table and column", err)
			}
			// The stale layout is gone: inserts cannot use it.
			if err := d.Decode(walBase, encInsert(relOutbox, goodRow()...), &out); !errors.Is(err, ErrUnknownRelation) {
				t.Errorf("insert after: err = %v, want ErrUnknownRelation", err)
			}
		})
	}
	t.Run("unmapped optional columns may be absent", func(t *testing.T) {
		d, err := New(Config{Tables: []Table{{Name: "outbox", Columns: DebeziumColumns()}}})
		if err != nil {
			t.Fatal(err)
		}
		var out Output
		mustDecode(t, d, 0, encRelation(1, "public", "outbox",
			rc{"id", oidUUID}, rc{"aggregatetype", oidVarchar}, rc{"aggregateid", oidVarchar}, rc{"type", oidVarchar}, rc{"payload", oidJSONB}), &out)
	})
}

func TestByteaHeaders(t *testing.T) {
	d := newTestDecoder(t, true)
	cols := append([]rc(nil), outboxCols...)
	cols[5].typ = oidBytea
	var out Output
	mustDecode(t, d, 0, encRelation(relOutbox, "public", "outbox", cols...), &out)
	for _, tt := range []struct {
		text   string
		want   []Header
		poison error
	}{
		{`\x7b2261223a202262227d`, hdrs("a", "b"), nil}, // {"a": "b"}
		{`\x7b7d`, nil, nil},
		{`\x7b`, nil, ErrBadHeaders},
		{`\x7`, nil, ErrBadHeaders},
	} {
		row := goodRow()
		row[5] = txt(tt.text)
		mustDecode(t, d, walBase+0x10, encInsert(relOutbox, row...), &out)
		want := outboxEvent()
		want.Headers, want.Poison = tt.want, tt.poison
		if diff := eventDiff(out.Event, want); diff != "" {
			t.Errorf("%s: %s", tt.text, diff)
		}
	}
}

func TestSchemaMatching(t *testing.T) {
	d := newTestDecoder(t, true)
	var out Output
	// Same name, other schema: not an outbox table.
	mustDecode(t, d, 0, encRelation(500, "other", "outbox", outboxCols...), &out)
	mustDecode(t, d, walBase, encInsert(500, goodRow()...), &out)
	if out.Kind != KindIgnored || out.Table != "other.outbox" {
		t.Fatalf("got %s %q", out.Kind, out.Table)
	}
	// Names are case-sensitive, as in the catalog.
	mustDecode(t, d, 0, encRelation(501, "public", "Outbox", outboxCols...), &out)
	mustDecode(t, d, walBase, encInsert(501, goodRow()...), &out)
	if out.Kind != KindIgnored {
		t.Fatalf("got %s", out.Kind)
	}
	// pg_catalog is sent as "".
	mustDecode(t, d, 0, encRelation(502, "", "thing", rc{"a", oidText}), &out)
	mustDecode(t, d, walBase, encInsert(502, txt("x")), &out)
	if out.Table != "pg_catalog.thing" {
		t.Fatalf("got %q", out.Table)
	}
}

func TestMessageOnlyConfig(t *testing.T) {
	d, err := New(Config{MessagePrefix: "app.events", HeartbeatPrefix: "app.hb"})
	if err != nil {
		t.Fatal(err)
	}
	var out Output
	mustDecode(t, d, 1, encBegin(10, commitTime, 9), &out)
	mustDecode(t, d, 2, encMessage(true, 2, "app.hb", nil), &out)
	if out.Kind != KindHeartbeat || out.Content == nil && len(out.Content) != 0 {
		t.Fatalf("got %s", out.Kind)
	}
	mustDecode(t, d, 3, encMessage(true, 3, "walrelay.heartbeat", nil), &out)
	if out.Kind != KindIgnored || out.Reason != ReasonForeignMessage {
		t.Fatalf("default prefix with a custom one: got %s %s", out.Kind, out.Reason)
	}
	mustDecode(t, d, 4, encMessage(true, 4, "app.events", []byte(`{"id":"1","aggregate_type":"a","aggregate_id":"k","event_type":"t","payload":{}}`)), &out)
	if out.Kind != KindEvent || out.Event.ID != "1" || out.Event.XID != 9 || out.Event.LSN != 4 || out.Event.Poison != nil {
		t.Fatalf("got %s %+v", out.Kind, out.Event)
	}
	mustDecode(t, d, 0, encRelation(1, "public", "outbox", outboxCols...), &out)
	mustDecode(t, d, 5, encInsert(1, goodRow()...), &out)
	if out.Kind != KindIgnored || out.Reason != ReasonUnmappedTable {
		t.Fatalf("got %s %s", out.Kind, out.Reason)
	}
}

// TestOwnership checks that events never alias the input, the decoder's
// scratch space or each other.
func TestOwnership(t *testing.T) {
	d := newTestDecoder(t, true)
	var out Output
	row := goodRow()
	row[5] = txt(`{"traceparent": "tp-1", "k": "v\u00e9"}`)
	in := encInsert(relOutbox, row...)
	mustDecode(t, d, walBase+0x10, in, &out)
	first := out.Event
	want := outboxEvent()
	want.Headers = hdrs("traceparent", "tp-1", "k", "vé")
	for i := range in {
		in[i] = 0xAA // the caller's buffer is reused
	}
	row2 := goodRow()
	row2[0], row2[2], row2[4], row2[5] = txt("zzzzzzzz-zzzz"), txt("other-key"), txt(`{"other": "payload"}`), txt(`{"x": "yyyyyyyyyy", "k": "w"}`)
	mustDecode(t, d, walBase+0x20, encInsert(relOutbox, row2...), &out)
	mustDecode(t, d, walBase+0x30, encMessage(true, 0, "walrelay.outbox", []byte(`{"id":"m","aggregate_type":"a","aggregate_id":"kkkkkkkkkkkkkk","event_type":"t","payload":"pppppppppppppppppppp","headers":{"a":"bbbbbbbbbbbbbbbbbbbbbbbb"}}`)), &out)
	if diff := eventDiff(first, want); diff != "" {
		t.Fatalf("first event changed by later decodes:\n%s", diff)
	}
	// AggregateID and Payload share one allocation but are capped: appending
	// to one never writes into the other.
	_ = append(first.AggregateID, "XXXXXXXXXXXXXXXXXXXXXXXXX"...)
	if string(first.Payload) != `{"id": 1}` {
		t.Fatalf("payload clobbered: %q", first.Payload)
	}
	_ = append(first.Payload, "XXXXXXXXXXXXXXXXXXXXXXXXX"...)
	if string(first.Headers[0].Value) != "tp-1" {
		t.Fatalf("header clobbered: %q", first.Headers[0].Value)
	}

	// Heartbeat content is copied too.
	hb := encMessage(true, 0, "walrelay.heartbeat", []byte("beat"))
	mustDecode(t, d, walBase, hb, &out)
	copy(hb[len(hb)-4:], "XXXX")
	if string(out.Content) != "beat" {
		t.Fatalf("content aliases input: %q", out.Content)
	}
	// ... and the Output is reset between messages.
	mustDecode(t, d, walBase, encOrigin(1, "o"), &out)
	if out.Kind != KindNone || len(out.Content) != 0 || out.Event.ID != "" {
		t.Fatalf("output not reset: %+v", out)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"default table", Config{Tables: []Table{{Name: "outbox"}}}, true},
		{"messages only", Config{MessagePrefix: "walrelay.outbox"}, true},
		{"two schemas", Config{Tables: []Table{{Name: "outbox"}, {Schema: "app", Name: "outbox"}}}, true},
		{"same column for two fields", Config{Tables: []Table{{Name: "o", Columns: Columns{ID: "id", AggregateType: "t", AggregateID: "id", EventType: "t", Payload: "p"}}}}, true},
		{"nothing", Config{}, false},
		{"empty name", Config{Tables: []Table{{Schema: "public"}}}, false},
		{"duplicate", Config{Tables: []Table{{Name: "outbox"}, {Schema: "public", Name: "outbox"}}}, false},
		{"missing payload", Config{Tables: []Table{{Name: "o", Columns: Columns{ID: "id", AggregateType: "t", AggregateID: "k", EventType: "e"}}}}, false},
		{"missing id", Config{Tables: []Table{{Name: "o", Columns: Columns{AggregateType: "t", AggregateID: "k", EventType: "e", Payload: "p"}}}}, false},
		{"prefix clash", Config{MessagePrefix: "walrelay.heartbeat"}, false},
		{"prefix clash custom", Config{MessagePrefix: "x", HeartbeatPrefix: "x"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok %v", err, tt.ok)
			}
			_, nerr := New(tt.cfg)
			if (nerr == nil) != tt.ok {
				t.Fatalf("New() = %v, want ok %v", nerr, tt.ok)
			}
		})
	}
}

func TestPresets(t *testing.T) {
	want := Columns{ID: "id", AggregateType: "aggregate_type", AggregateID: "aggregate_id", EventType: "event_type",
		Payload: "payload", Headers: "headers"}
	if got := DefaultColumns(); !reflect.DeepEqual(got, want) {
		t.Errorf("DefaultColumns() = %+v", got)
	}
	want = Columns{ID: "id", AggregateType: "aggregatetype", AggregateID: "aggregateid", EventType: "type", Payload: "payload"}
	if got := DebeziumColumns(); !reflect.DeepEqual(got, want) {
		t.Errorf("DebeziumColumns() = %+v", got)
	}
	// The zero value means the default table, whatever kind of empty slice.
	for _, c := range []Columns{{}, {HeaderColumns: []string{}}} {
		if !c.isZero() {
			t.Errorf("%+v is not zero", c)
		}
	}
	for _, c := range []Columns{{Partition: "p"}, {HeaderColumns: []string{"h"}}, {Timestamp: "t"}} {
		if c.isZero() {
			t.Errorf("%+v is zero", c)
		}
	}
}

func TestDecodeErrorMessage(t *testing.T) {
	d := newTestDecoder(t, true)
	var out Output
	err := d.Decode(walBase, encInsert(relOutbox, goodRow()...)[:12], &out)
	if got, want := err.Error(), "decode pgoutput 'I' at 0/16B3748 offset 8: truncated message"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	err = d.Decode(walBase, []byte{0x01}, &out)
	if got, want := err.Error(), "decode pgoutput 0x01 at 0/16B3748 offset 0: unknown message type"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	err = d.Decode(walBase, nil, &out)
	if got, want := err.Error(), "decode pgoutput empty at 0/16B3748 offset 0: truncated message"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if err := d.Decode(walBase, []byte{'B'}, nil); err == nil {
		t.Error("nil output: no error")
	}
}

func TestKindString(t *testing.T) {
	for k, s := range map[Kind]string{KindNone: "none", KindBegin: "begin", KindEvent: "event", KindCommit: "commit",
		KindHeartbeat: "heartbeat", KindIgnored: "ignored", Kind(99): "unknown"} {
		if k.String() != s {
			t.Errorf("%d: %q, want %q", k, k.String(), s)
		}
	}
}
