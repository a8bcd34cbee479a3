package decoder

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// Tests of Columns.HeaderColumns and Columns.Partition.

// relRouted is public.routed: the default outbox columns, a partition
// column and header columns of several types.
const relRouted = 16450

const (
	oidInt2 = 21
	oidInt4 = 23
	oidInt8 = 20
)

// routedCols is public.routed's full layout: outboxCols (0-6), then part,
// trace_id, tenant_id and sig (7-10).
var routedCols = append(append([]rc(nil), outboxCols...),
	rc{"part", oidInt2}, rc{"trace_id", oidText}, rc{"tenant_id", oidInt8}, rc{"sig", oidBytea})

// routedColumns maps public.routed. The header columns are configured in
// another order than the table's, and "absent" is never in the table.
func routedColumns() Columns {
	c := DefaultColumns()
	c.Timestamp = "created_at"
	c.Partition = "part"
	c.HeaderColumns = []string{"sig", "absent", "trace_id", "tenant_id"}
	return c
}

// newRoutedDecoder returns a decoder inside a transaction (xid 700) that has
// seen public.routed's Relation with cols.
func newRoutedDecoder(t testing.TB, cols ...rc) *Decoder {
	t.Helper()
	d, err := New(Config{Tables: []Table{{Name: "routed", Columns: routedColumns()}}, MessagePrefix: "walrelay.outbox"})
	if err != nil {
		t.Fatal(err)
	}
	var out Output
	mustDecode(t, d, 0, encRelation(relRouted, "public", "routed", cols...), &out)
	mustDecode(t, d, walBase, encBegin(walBase+0x1000, commitTime, 700), &out)
	return d
}

// routedRow is goodRow with part 3, trace_id "tr-1", tenant_id 42 and sig
// \x0001ff.
func routedRow() []tv {
	return append(goodRow(), txt("3"), txt("tr-1"), txt("42"), txt(`\x0001ff`))
}

// routedEvent is the event routedRow produces at walBase+0x10.
func routedEvent() Event {
	e := outboxEvent()
	e.Table, e.TableName = "public.routed", "routed"
	e.Partition, e.HasPartition = 3, true
	e.Headers = []Header{{"sig", []byte{0, 1, 0xff}}, {"trace_id", []byte("tr-1")}, {"tenant_id", []byte("42")}}
	return e
}

func TestHeaderColumns(t *testing.T) {
	with := func(f func(r []tv)) []tv { r := routedRow(); f(r); return r }
	event := func(f func(e *Event)) Event { e := routedEvent(); f(&e); return e }
	tests := []struct {
		name string
		row  []tv
		want Event
	}{
		{"all present, in configured order", routedRow(), routedEvent()},
		{"after the headers column's entries",
			with(func(r []tv) { r[5] = txt(`{"trace_id": "from-json", "a": "b"}`) }),
			event(func(e *Event) {
				e.Headers = append(hdrs("trace_id", "from-json", "a", "b"), e.Headers...)
			})},
		{"NULL adds no header",
			with(func(r []tv) { r[8] = null() }),
			event(func(e *Event) { e.Headers = slices.Delete(e.Headers, 1, 2) })},
		{"all NULL: no headers",
			with(func(r []tv) { r[8], r[9], r[10] = null(), null(), null() }),
			event(func(e *Event) { e.Headers = nil })},
		{"empty text is a header with an empty value",
			with(func(r []tv) { r[8] = txt("") }),
			event(func(e *Event) { e.Headers[1].Value = []byte{} })},
		{"bytea escape format",
			with(func(r []tv) { r[10] = txt(`a\\b\000`) }),
			event(func(e *Event) { e.Headers[0].Value = []byte{'a', '\\', 'b', 0} })},
		{"empty bytea",
			with(func(r []tv) { r[10] = txt(`\x`) }),
			event(func(e *Event) { e.Headers[0].Value = []byte{} })},
		{"invalid bytea poisons and adds no header",
			with(func(r []tv) { r[10] = txt(`\x0`) }),
			event(func(e *Event) { e.Headers, e.Poison = e.Headers[1:], ErrBadPayload })},
		{"unchanged TOAST poisons",
			with(func(r []tv) { r[8] = unchanged() }),
			event(func(e *Event) { e.Headers, e.Poison = slices.Delete(e.Headers, 1, 2), ErrUnsupportedValue })},
		{"binary format poisons",
			with(func(r []tv) { r[9] = binv("\x00\x00\x00\x2a") }),
			event(func(e *Event) { e.Headers, e.Poison = e.Headers[:2], ErrUnsupportedValue })},
		{"bad headers column keeps the header columns",
			with(func(r []tv) { r[5] = txt(`["a"]`) }),
			event(func(e *Event) { e.Poison = ErrBadHeaders })},
		{"NULL headers column",
			with(func(r []tv) { r[5] = null() }),
			routedEvent()},
		{"escapes are kept as text",
			with(func(r []tv) { r[8] = txt(`a "b" \n ü`) }),
			event(func(e *Event) { e.Headers[1].Value = []byte(`a "b" \n ü`) })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newRoutedDecoder(t, routedCols...)
			var out Output
			mustDecode(t, d, walBase+0x10, encInsert(relRouted, tt.row...), &out)
			if out.Kind != KindEvent {
				t.Fatalf("kind = %s, want event", out.Kind)
			}
			if diff := eventDiff(out.Event, tt.want); diff != "" {
				t.Error(diff)
			}
		})
	}
}

// TestHeaderColumnAdded: a header column the table lacks is no error; it
// appears with the Relation message that follows ALTER TABLE ... ADD COLUMN,
// and goes again with one that follows DROP COLUMN.
func TestHeaderColumnAdded(t *testing.T) {
	base := routedCols[:8] // outbox columns and part
	d := newRoutedDecoder(t, base...)
	var out Output
	row := append(goodRow(), txt("3"))
	want := routedEvent()
	want.Headers = nil
	mustDecode(t, d, walBase+0x10, encInsert(relRouted, row...), &out)
	if diff := eventDiff(out.Event, want); diff != "" {
		t.Fatalf("before ADD COLUMN: %s", diff)
	}

	// ALTER TABLE routed ADD COLUMN trace_id text, mid-transaction.
	mustDecode(t, d, 0, encRelation(relRouted, "public", "routed", append(base, rc{"trace_id", oidText})...), &out)
	mustDecode(t, d, walBase+0x10, encInsert(relRouted, append(row, txt("tr-9"))...), &out)
	want.Headers = hdrs("trace_id", "tr-9")
	if diff := eventDiff(out.Event, want); diff != "" {
		t.Fatalf("after ADD COLUMN: %s", diff)
	}
	// The previous layout is gone.
	if err := d.Decode(walBase+0x10, encInsert(relRouted, row...), &out); !errors.Is(err, ErrProtocol) {
		t.Fatalf("insert with the old layout: err = %v, want ErrProtocol", err)
	}

	// Two more, in front of trace_id (a new table layout, e.g. after a
	// rewrite): the configured order still holds.
	cols := append([]rc{{"sig", oidBytea}, {"tenant_id", oidInt4}}, append(base, rc{"trace_id", oidText})...)
	mustDecode(t, d, 0, encRelation(relRouted, "public", "routed", cols...), &out)
	mustDecode(t, d, walBase+0x10, encInsert(relRouted, append(append([]tv{txt(`\x6869`), txt("-5")}, row...), txt("tr-10"))...), &out)
	want.Headers = hdrs("sig", "hi", "trace_id", "tr-10", "tenant_id", "-5")
	if diff := eventDiff(out.Event, want); diff != "" {
		t.Fatalf("reordered: %s", diff)
	}

	// DROP COLUMN trace_id: no error either.
	mustDecode(t, d, 0, encRelation(relRouted, "public", "routed", base...), &out)
	mustDecode(t, d, walBase+0x10, encInsert(relRouted, row...), &out)
	want.Headers = nil
	if diff := eventDiff(out.Event, want); diff != "" {
		t.Fatalf("after DROP COLUMN: %s", diff)
	}
}

// TestHeaderColumnMapped: a header column may also be a mapped column.
func TestHeaderColumnMapped(t *testing.T) {
	c := DefaultColumns()
	c.HeaderColumns = []string{"aggregate_type", "id"}
	d, err := New(Config{Tables: []Table{{Name: "outbox", Columns: c}}})
	if err != nil {
		t.Fatal(err)
	}
	var out Output
	mustDecode(t, d, 0, encRelation(relOutbox, "public", "outbox", outboxCols...), &out)
	mustDecode(t, d, walBase, encBegin(walBase+0x1000, commitTime, 700), &out)
	row := goodRow()
	row[5] = txt(`{"k": "v"}`)
	mustDecode(t, d, walBase+0x10, encInsert(relOutbox, row...), &out)
	want := outboxEvent()
	want.Timestamp = time.Time{} // not mapped here
	want.Headers = hdrs("k", "v", "aggregate_type", "order", "id", "00000000-0000-4000-8000-000000000001")
	if diff := eventDiff(out.Event, want); diff != "" {
		t.Fatal(diff)
	}
}

func TestPartitionColumn(t *testing.T) {
	tests := []struct {
		name   string
		val    tv
		want   int32
		has    bool
		poison error
	}{
		{"smallint", txt("3"), 3, true, nil},
		{"zero", txt("0"), 0, true, nil},
		{"largest", txt("2147483647"), 2147483647, true, nil},
		{"minus zero", txt("-0"), 0, true, nil},
		{"leading zeros", txt("007"), 7, true, nil},
		{"NULL: key hash", null(), 0, false, nil},
		{"negative", txt("-1"), 0, false, ErrBadPartition},
		{"too big", txt("2147483648"), 0, false, ErrBadPartition},
		{"bigint max", txt("9223372036854775807"), 0, false, ErrBadPartition},
		{"huge", txt("99999999999999999999999999999999"), 0, false, ErrBadPartition},
		{"not a number", txt("three"), 0, false, ErrBadPartition},
		{"empty", txt(""), 0, false, ErrBadPartition},
		{"minus only", txt("-"), 0, false, ErrBadPartition},
		{"fraction", txt("1.0"), 0, false, ErrBadPartition},
		{"plus sign", txt("+1"), 0, false, ErrBadPartition},
		{"space", txt(" 1"), 0, false, ErrBadPartition},
		{"unchanged TOAST", unchanged(), 0, false, ErrUnsupportedValue},
		{"binary", binv("\x00\x03"), 0, false, ErrUnsupportedValue},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newRoutedDecoder(t, routedCols...)
			row := routedRow()
			row[7] = tt.val
			var out Output
			mustDecode(t, d, walBase+0x10, encInsert(relRouted, row...), &out)
			want := routedEvent()
			want.Partition, want.HasPartition, want.Poison = tt.want, tt.has, tt.poison
			if diff := eventDiff(out.Event, want); diff != "" {
				t.Error(diff)
			}
			if tt.poison != nil && out.Event.Poison != nil {
				if msg := out.Event.Poison.Error(); !strings.Contains(msg, `"part"`) {
					t.Errorf("poison %q does not name the column", msg)
				}
			}
		})
	}
}

// TestPartitionColumnMissing: unlike header columns, a configured partition
// column is required in the relation.
func TestPartitionColumnMissing(t *testing.T) {
	d, err := New(Config{Tables: []Table{{Name: "routed", Columns: routedColumns()}}})
	if err != nil {
		t.Fatal(err)
	}
	cols := slices.DeleteFunc(slices.Clone(routedCols), func(c rc) bool { return c.name == "part" })
	var out Output
	err = d.Decode(0, encRelation(relRouted, "public", "routed", cols...), &out)
	var mc *MissingColumnError
	if !errors.Is(err, ErrMissingColumn) || !errors.As(err, &mc) {
		t.Fatalf("err = %v, want a *MissingColumnError", err)
	}
	if mc.Table != "public.routed" || mc.Column != "part" || mc.Field != "Partition" {
		t.Errorf("got %+v", mc)
	}
	// Header columns absent, partition present: fine.
	mustDecode(t, d, 0, encRelation(relRouted, "public", "routed", routedCols[:8]...), &out)
}

func TestMessagePartition(t *testing.T) {
	const fields = `{"id":"e-1","aggregate_type":"user","aggregate_id":"user-7","event_type":"UserSignedUp"`
	tests := []struct {
		name    string
		content string
		want    int32
		has     bool
		poison  error
	}{
		{"integer", fields + `,"partition":5}`, 5, true, nil},
		{"zero", fields + `,"partition":0}`, 0, true, nil},
		{"largest", fields + `,"partition":2147483647}`, 2147483647, true, nil},
		{"before the other fields", `{"partition": 12, ` + fields[1:] + `}`, 12, true, nil},
		{"last duplicate wins", fields + `,"partition":1,"partition":2}`, 2, true, nil},
		{"absent", fields + `}`, 0, false, nil},
		{"null", fields + `,"partition":null}`, 0, false, nil},
		{"negative", fields + `,"partition":-1}`, 0, false, ErrBadPartition},
		{"too big", fields + `,"partition":2147483648}`, 0, false, ErrBadPartition},
		{"fraction", fields + `,"partition":1.0}`, 0, false, ErrBadPartition},
		{"exponent", fields + `,"partition":1e2}`, 0, false, ErrBadPartition},
		{"string", fields + `,"partition":"3"}`, 0, false, ErrBadMessage},
		{"bool", fields + `,"partition":true}`, 0, false, ErrBadMessage},
		{"object", fields + `,"partition":{}}`, 0, false, ErrBadMessage},
		{"array", fields + `,"partition":[1]}`, 0, false, ErrBadMessage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newTestDecoder(t, true)
			var out Output
			mustDecode(t, d, walBase+0x20, encMessage(true, walBase+0x20, "walrelay.outbox", []byte(tt.content)), &out)
			want := Event{ID: "e-1", AggregateType: "user", AggregateID: []byte("user-7"), EventType: "UserSignedUp",
				Partition: tt.want, HasPartition: tt.has, Poison: tt.poison,
				CommitTime: commitTime, LSN: walBase + 0x20, XID: 700}
			if diff := eventDiff(out.Event, want); diff != "" {
				t.Error(diff)
			}
		})
	}
}

func TestHeaderColumnsConfig(t *testing.T) {
	cols := func(f func(c *Columns)) Columns { c := DefaultColumns(); f(&c); return c }
	tests := []struct {
		name string
		c    Columns
		ok   bool
	}{
		{"header and partition columns", routedColumns(), true},
		{"partition only", cols(func(c *Columns) { c.Partition = "p" }), true},
		{"empty list", cols(func(c *Columns) { c.HeaderColumns = []string{} }), true},
		{"empty header column", cols(func(c *Columns) { c.HeaderColumns = []string{"a", ""} }), false},
		{"header column twice", cols(func(c *Columns) { c.HeaderColumns = []string{"a", "b", "a"} }), false},
		{"header columns alone are not the default table", Columns{HeaderColumns: []string{"a"}}, false},
		{"partition alone is not the default table", Columns{Partition: "p"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Config{Tables: []Table{{Name: "o", Columns: tt.c}}}.Validate()
			if (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok %v", err, tt.ok)
			}
		})
	}

	// New keeps its own copy of the list.
	c := routedColumns()
	d, err := New(Config{Tables: []Table{{Name: "routed", Columns: c}}})
	if err != nil {
		t.Fatal(err)
	}
	c.HeaderColumns[0] = "id"
	var out Output
	mustDecode(t, d, 0, encRelation(relRouted, "public", "routed", routedCols...), &out)
	mustDecode(t, d, walBase, encBegin(walBase+0x1000, commitTime, 700), &out)
	mustDecode(t, d, walBase+0x10, encInsert(relRouted, routedRow()...), &out)
	if diff := eventDiff(out.Event, routedEvent()); diff != "" {
		t.Fatal(diff)
	}
}
