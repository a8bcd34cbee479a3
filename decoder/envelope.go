package decoder

import (
	"fmt"
	"slices"
	"time"
)

// Envelope columns (Columns.Envelope): their values are copied into
// Event.Envelope, the names into the event's string and the values into its
// byte slice, like header columns. A table without envelope columns never
// reaches this file.

// envCol is an envelope column of the relation.
type envCol struct {
	name string // its name in the envelope
	col  string // the column
	idx  int
	typ  uint32
	mod  int32
}

// envSpan locates one envelope field of the event under construction: its
// name in the string buffer (keyStart..keyEnd), its value in d.evals
// (ending at valEnd, starting at the previous span's).
type envSpan struct {
	keyStart, keyEnd int
	valEnd           int
	typ              uint32
	mod              int32
	null             bool
}

// envelopeColumns appends the envelope columns' names to sb and their
// values (bytea decoded) to d.evals. A value that cannot be read poisons the
// event; its field is then NULL.
func (d *Decoder) envelopeColumns(sb []byte, env []envCol, msg []byte, setPoison func(error)) []byte {
	for _, e := range env {
		v := d.vals[e.idx]
		null := v.kind != colText
		if p := valuePoison(e.col, v, nil); p != nil {
			setPoison(p)
		} else if !null {
			data := v.in(msg)
			if e.typ == oidBytea {
				if _, ok := byteaLen(data); ok {
					d.evals = decodeBytea(d.evals, data)
				} else {
					setPoison(fmt.Errorf("column %q: %w", e.col, ErrBadPayload))
					null = true
				}
			} else {
				d.evals = append(d.evals, data...)
			}
		}
		ks := len(sb)
		sb = append(sb, e.name...)
		d.espans = append(d.espans, envSpan{keyStart: ks, keyEnd: len(sb), valEnd: len(d.evals), typ: e.typ, mod: e.mod, null: null})
	}
	return sb
}

// envelopeNames allocates ev.Envelope and sets each field's name, type and
// NULL flag (s is the event's string).
func (d *Decoder) envelopeNames(ev *Event, s string) {
	ev.Envelope = make([]EnvelopeField, len(d.espans))
	for i, sp := range d.espans {
		ev.Envelope[i] = EnvelopeField{Name: s[sp.keyStart:sp.keyEnd], Type: sp.typ, TypeMod: sp.mod, Null: sp.null}
	}
}

// envelopeValues copies d.evals into buf (the event's byte slice, from the
// envelope's start) and points each non-NULL field's value at its part.
func (d *Decoder) envelopeValues(ev *Event, buf []byte) {
	copy(buf, d.evals)
	start := 0
	for i, sp := range d.espans {
		if !sp.null {
			ev.Envelope[i].Value = buf[start:sp.valEnd:sp.valEnd]
		}
		start = sp.valEnd
	}
}

// Type OIDs an envelope column may have besides a user-defined type: the
// built-in types whose Debezium (Kafka Connect) representation walrelay
// writes. See EnvelopeType.
var envelopeTypes = []uint32{
	16,   // bool
	17,   // bytea
	20,   // int8
	21,   // int2
	23,   // int4
	25,   // text
	26,   // oid
	114,  // json
	142,  // xml
	650,  // cidr
	700,  // float4
	701,  // float8
	829,  // macaddr
	869,  // inet
	1042, // bpchar
	1043, // varchar
	1082, // date
	1083, // time
	1114, // timestamp
	1184, // timestamptz
	1700, // numeric
	2950, // uuid
	3802, // jsonb
}

// firstUserOID is Postgres' FirstNormalObjectId: types with an OID from
// here on are user-defined (enums, domains, extension types such as
// citext), sent as text.
const firstUserOID = 16384

// EnvelopeType reports whether an envelope column may have the type oid: one
// of EnvelopeTypes, or a user-defined type (its text is written as a string,
// as Debezium writes an enum or a citext).
func EnvelopeType(oid uint32) bool {
	return oid >= firstUserOID || slices.Contains(envelopeTypes, oid)
}

// EnvelopeTypes returns the built-in type OIDs an envelope column may have,
// in ascending order.
func EnvelopeTypes() []uint32 { return slices.Clone(envelopeTypes) }

// EnvelopeTypeError names an envelope column whose type the envelope cannot
// carry. It wraps ErrEnvelopeType.
type EnvelopeTypeError struct {
	// Table is "schema.table".
	Table string
	// Column is the envelope column.
	Column string
	// Type is its type OID.
	Type uint32
}

func (e *EnvelopeTypeError) Error() string {
	return fmt.Sprintf("%v: table %s column %q has type OID %d (envelope columns may be text, varchar, char, uuid, json, jsonb, "+
		"xml, inet, cidr, macaddr, bool, int2, int4, int8, oid, float4, float8, numeric, date, time, timestamp, timestamptz, "+
		"bytea, or an enum or other user-defined type)", ErrEnvelopeType, e.Table, e.Column, e.Type)
}

// Unwrap returns ErrEnvelopeType.
func (e *EnvelopeTypeError) Unwrap() error { return ErrEnvelopeType }

// ParseTimestamp parses Postgres' ISO text of a timestamp or timestamptz
// (DateStyle ISO, as pgoutput sends it): "2024-05-01 10:00:00.123456+02", the
// offset optional (then UTC). It reports false for other text (infinity, BC
// dates, other styles).
func ParseTimestamp(text []byte) (time.Time, bool) { return parseTimestamp(text) }
