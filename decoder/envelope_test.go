package decoder

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// Tests of Columns.Envelope and Columns.HeaderNames.

// encRelationMods is encRelation with each column's type modifier.
func encRelationMods(id uint32, ns, name string, cols []rc, mods []int32) []byte {
	p := newMsg('R').u32(id).str(ns).str(name).u8('d').u16(uint16(len(cols)))
	for i, c := range cols {
		p.u8(0).str(c.name).u32(c.typ).u32(uint32(mods[i]))
	}
	return p.bytes()
}

const oidInterval = 1186

// envelopeCols are the default outbox columns and n int4, ts timestamptz(3), b bytea
// and kind (a user-defined enum).
var envelopeCols = append(append([]rc(nil), outboxCols...), rc{"n", oidInt4}, rc{"ts", oidTimestamptz}, rc{"b", oidBytea}, rc{"kind", 16501})

func envelopeColumns() Columns {
	c := DefaultColumns()
	c.Envelope = []EnvelopeColumn{{Column: "event_type", Name: "eventType"}, {Column: "n"}, {Column: "ts", Name: "at"},
		{Column: "b", Name: "bin"}, {Column: "kind"}}
	c.HeaderColumns, c.HeaderNames = []string{"n", "kind"}, []string{"count"}
	return c
}

func newEnvelopeDecoder(t *testing.T, cols []rc) (*Decoder, error) {
	t.Helper()
	d, err := New(Config{Tables: []Table{{Name: "outbox", Columns: envelopeColumns()}}})
	if err != nil {
		t.Fatal(err)
	}
	mods := make([]int32, len(cols))
	for i, c := range cols {
		mods[i] = -1
		if c.name == "ts" {
			mods[i] = 3
		}
	}
	var out Output
	if err := d.Decode(0, encRelationMods(relOutbox, "public", "outbox", cols, mods), &out); err != nil {
		return nil, err
	}
	mustDecode(t, d, walBase, encBegin(walBase+0x1000, commitTime, 700), &out)
	return d, nil
}

func TestEnvelopeColumns(t *testing.T) {
	d, err := newEnvelopeDecoder(t, envelopeCols)
	if err != nil {
		t.Fatal(err)
	}
	var out Output
	row := append(goodRow(), txt("42"), txt("2024-05-01 10:00:00.123+02"), txt(`\x00ff`), txt("gold"))
	mustDecode(t, d, walBase+0x10, encInsert(relOutbox, row...), &out)
	ev := out.Event
	want := []EnvelopeField{
		{Name: "eventType", Type: oidText, TypeMod: -1, Value: []byte(outboxEvent().EventType)},
		{Name: "n", Type: oidInt4, TypeMod: -1, Value: []byte("42")},
		{Name: "at", Type: oidTimestamptz, TypeMod: 3, Value: []byte("2024-05-01 10:00:00.123+02")},
		{Name: "bin", Type: oidBytea, TypeMod: -1, Value: []byte{0, 0xff}},
		{Name: "kind", Type: 16501, TypeMod: -1, Value: []byte("gold")},
	}
	if !envelopeEqual(ev.Envelope, want) {
		t.Errorf("envelope %+v\nwant %+v", ev.Envelope, want)
	}
	if ev.PayloadType != oidJSONB || ev.Poison != nil || string(ev.Payload) != string(outboxEvent().Payload) {
		t.Errorf("payload %q type %d poison %v", ev.Payload, ev.PayloadType, ev.Poison)
	}
	if h := ev.Headers; len(h) != 2 || h[0].Key != "count" || string(h[0].Value) != "42" || h[1].Key != "kind" {
		t.Errorf("header columns by name: %+v", h)
	}

	// NULL is a NULL field; a bytea that is not one poisons the event.
	row[8], row[9] = null(), txt(`\x0`)
	mustDecode(t, d, walBase+0x20, encInsert(relOutbox, row...), &out)
	if f := out.Event.Envelope; !f[2].Null || f[2].Value != nil || !f[3].Null || !errors.Is(out.Event.Poison, ErrBadPayload) {
		t.Errorf("NULL and bad bytea: %+v, poison %v", f, out.Event.Poison)
	}
}

func TestEnvelopeColumnsInTheRelation(t *testing.T) {
	// Mapped: a missing envelope column stops the stream, like a missing payload column.
	_, err := newEnvelopeDecoder(t, slices.Delete(slices.Clone(envelopeCols), 8, 9))
	var mc *MissingColumnError
	if !errors.As(err, &mc) || mc.Column != "ts" || mc.Field != "Envelope" {
		t.Errorf("missing envelope column: %v", err)
	}
	// A type the envelope cannot carry stops it too, naming the column.
	cols := slices.Clone(envelopeCols)
	cols[7].typ = oidInterval
	_, err = newEnvelopeDecoder(t, cols)
	var te *EnvelopeTypeError
	if !errors.As(err, &te) || te.Column != "n" || te.Type != oidInterval || !errors.Is(err, ErrEnvelopeType) {
		t.Errorf("interval envelope column: %v", err)
	}
	if got := envelopeColumns().Mapped(); !slices.Equal(got, []string{"id", "aggregate_type", "aggregate_id", "event_type", "payload", "headers", "n", "ts", "b", "kind"}) {
		t.Errorf("Mapped() = %v", got)
	}
	for _, oid := range EnvelopeTypes() {
		if !EnvelopeType(oid) {
			t.Errorf("EnvelopeType(%d) = false", oid)
		}
	}
}

func TestEnvelopeConfig(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(c *Columns)
		want string
	}{
		{"payload taken", func(c *Columns) { c.Envelope[1].Name = "payload" }, `envelope field "payload" is the payload's`},
		{"named twice", func(c *Columns) { c.Envelope[2].Name = "n" }, `envelope field "n" named twice`},
		{"no column", func(c *Columns) { c.Envelope[0].Column = "" }, "envelope column 0: empty name"},
		{"header named twice", func(c *Columns) { c.HeaderNames = []string{"kind"} }, `header "kind" named twice`},
		{"more names than headers", func(c *Columns) { c.HeaderNames = []string{"a", "b", "c"} }, "3 header names for 2 header columns"},
	} {
		cols := envelopeColumns()
		c.edit(&cols)
		err := Config{Tables: []Table{{Name: "outbox", Columns: cols}}}.Validate()
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

func envelopeEqual(a, b []EnvelopeField) bool {
	return slices.EqualFunc(a, b, func(x, y EnvelopeField) bool {
		return x.Name == y.Name && x.Type == y.Type && x.TypeMod == y.TypeMod && x.Null == y.Null && string(x.Value) == string(y.Value)
	})
}
