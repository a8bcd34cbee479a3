package sink

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Kafka Connect's JSON, as Debezium's outbox router with the JsonConverter
// (schemas.enable=false) writes it: Jackson's output of Connect values. This
// file holds the two pieces the envelope (envelope.go) needs:
//
//   - appendJacksonString, a string as Jackson writes it (escapes and all);
//   - expandJSON, table.expand.json.payload: the payload's JSON text parsed
//     as Jackson parses it, turned into a Connect value as Debezium's
//     JsonSchemaData does (null fields and empty arrays left out, numbers as
//     int32, int64 or float64), and written back compactly.

// hexUpper is Jackson's hex alphabet for \u escapes.
const hexUpper = "0123456789ABCDEF"

// appendJacksonString appends s as a JSON string as Jackson (2.21, as Kafka
// Connect 4.3 ships it) writes it: '"' and '\\' escaped, \b \t \n \f \r by
// their short forms, other control characters (below U+0020) as \u00XX in
// upper case, a character outside the Basic Multilingual Plane as the
// escapes of its UTF-16 surrogates (\uD83D\uDE00), everything else (DEL,
// other non-ASCII, '/') as it is, in UTF-8. Invalid UTF-8 is written as
// U+FFFD, as a Java string holds no invalid sequences.
func appendJacksonString(dst []byte, s []byte) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, n := utf8.DecodeRune(s[i:])
			switch {
			case r == utf8.RuneError && n == 1:
				dst = append(dst, "\uFFFD"...)
			case r >= 0x10000:
				hi, lo := utf16.EncodeRune(r)
				dst = appendUEscape(appendUEscape(dst, hi), lo)
			default:
				dst = append(dst, s[i:i+n]...)
			}
			i += n
			continue
		}
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\r':
			dst = append(dst, '\\', 'r')
		default:
			if c < 0x20 {
				dst = appendUEscape(dst, rune(c))
			} else {
				dst = append(dst, c)
			}
		}
		i++
	}
	return append(dst, '"')
}

// appendUEscape appends \uXXXX, upper case, for the UTF-16 unit r.
func appendUEscape(dst []byte, r rune) []byte {
	return append(dst, '\\', 'u', hexUpper[r>>12&0xF], hexUpper[r>>8&0xF], hexUpper[r>>4&0xF], hexUpper[r&0xF])
}

// appendJavaDouble appends f as Java's Double.toString (which Jackson writes
// for a double) does: "1.0", "99.9", "0.001", "1.0E7", "1.0E-4", "-0.0";
// NaN and the infinities as the strings Jackson writes for them. bits is 32
// for a float (Float.toString). Java 17 gives the shortest digits that read
// back as f, at least two, except for a few doubles that need 16 or 17
// digits, where it may write one more; these are the only values written
// differently.
func appendJavaDouble(dst []byte, f float64, bits int) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(dst, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(dst, `"-Infinity"`...)
	case f == 0:
		if math.Signbit(f) {
			return append(dst, "-0.0"...)
		}
		return append(dst, "0.0"...)
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	// Shortest digits d.ddd and the exponent of the first one. In computerized
	// notation Java writes at least two, the two closest to f when one would
	// do (4.9E-324, not 5.0E-324).
	plain := f >= 1e-3 && f < 1e7
	e := strconv.AppendFloat(nil, f, 'e', -1, bits)
	if !plain && len(e) > 1 && e[1] != '.' {
		e = strconv.AppendFloat(e[:0], f, 'e', 1, bits)
	}
	mant, exp := e, 0
	for i, c := range e {
		if c == 'e' {
			mant = e[:i]
			exp, _ = strconv.Atoi(string(e[i+1:]))
			break
		}
	}
	digits := make([]byte, 0, len(mant))
	for _, c := range mant {
		if c != '.' {
			digits = append(digits, c)
		}
	}
	if plain {
		if exp < 0 {
			dst = append(dst, '0', '.')
			for range -exp - 1 {
				dst = append(dst, '0')
			}
			return append(dst, digits...)
		}
		for i := 0; i <= exp; i++ {
			if i < len(digits) {
				dst = append(dst, digits[i])
			} else {
				dst = append(dst, '0')
			}
		}
		dst = append(dst, '.')
		if exp+1 >= len(digits) {
			return append(dst, '0')
		}
		return append(dst, digits[exp+1:]...)
	}
	dst = append(dst, digits[0], '.')
	if len(digits) == 1 {
		dst = append(dst, '0')
	} else {
		dst = append(dst, digits[1:]...)
	}
	dst = append(dst, 'E')
	return strconv.AppendInt(dst, int64(exp), 10)
}

// jsonKind is the kind of a parsed JSON value.
type jsonKind uint8

const (
	jsonNull jsonKind = iota
	jsonBool
	jsonInt32  // an integer that fits in 32 bits (Jackson's IntNode)
	jsonInt64  // one that fits in 64 bits (LongNode)
	jsonBigInt // a larger integer (BigIntegerNode)
	jsonDouble // a number with a fraction or an exponent (DoubleNode)
	jsonString
	jsonArray
	jsonObject
)

// jsonValue is a parsed JSON value, as Jackson's tree holds it.
type jsonValue struct {
	kind   jsonKind
	b      bool
	i      int64
	f      float64
	s      []byte      // the decoded string
	elems  []jsonValue // array elements
	fields []jsonField // object members, in order; a repeated key keeps its first place and its last value
}

type jsonField struct {
	name  []byte
	value jsonValue
}

// errNotExpandable is a payload Debezium leaves unexpanded (a string).
var errNotExpandable = errors.New("not expandable")

// parseJSON parses the first JSON value of b (Jackson's readTree ignores
// what follows it; a JSON text from Postgres has nothing after it).
func parseJSON(b []byte) (jsonValue, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return parseValue(dec)
}

// parseValue reads the next value of dec's tokens.
func parseValue(dec *json.Decoder) (jsonValue, error) {
	tok, err := dec.Token()
	if err != nil {
		return jsonValue{}, err
	}
	switch t := tok.(type) {
	case nil:
		return jsonValue{kind: jsonNull}, nil
	case bool:
		return jsonValue{kind: jsonBool, b: t}, nil
	case string:
		return jsonValue{kind: jsonString, s: []byte(t)}, nil
	case json.Number:
		return number(string(t))
	case json.Delim:
		if t == '[' {
			v := jsonValue{kind: jsonArray}
			for dec.More() {
				e, err := parseValue(dec)
				if err != nil {
					return jsonValue{}, err
				}
				v.elems = append(v.elems, e)
			}
			_, err := dec.Token() // ]
			return v, err
		}
		v := jsonValue{kind: jsonObject}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return jsonValue{}, err
			}
			name := []byte(k.(string))
			fv, err := parseValue(dec)
			if err != nil {
				return jsonValue{}, err
			}
			if i := slices.IndexFunc(v.fields, func(f jsonField) bool { return string(f.name) == string(name) }); i >= 0 {
				v.fields[i].value = fv // Jackson: the last value, in the first place
				continue
			}
			v.fields = append(v.fields, jsonField{name: name, value: fv})
		}
		_, err := dec.Token() // }
		return v, err
	}
	return jsonValue{}, errNotExpandable
}

// number reads a JSON number as Jackson does: an integer literal is an int,
// a long or a big integer by its value, anything with a fraction or an
// exponent a double.
func number(text string) (jsonValue, error) {
	if strings.ContainsAny(text, ".eE") {
		f, err := strconv.ParseFloat(text, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return jsonValue{}, err
		}
		return jsonValue{kind: jsonDouble, f: f}, nil
	}
	i, err := strconv.ParseInt(text, 10, 64)
	switch {
	case err != nil:
		return jsonValue{kind: jsonBigInt}, nil
	case i >= math.MinInt32 && i <= math.MaxInt32:
		return jsonValue{kind: jsonInt32, i: i}, nil
	}
	return jsonValue{kind: jsonInt64, i: i}, nil
}

// connectSchema is the part of a Connect schema that decides how a value is
// written: its type, an array's element schema, a struct's fields in order.
type connectSchema struct {
	kind   jsonKind // jsonBool, jsonInt32, jsonInt64, jsonDouble, jsonString, jsonArray or jsonObject
	elem   *connectSchema
	fields []schemaField
}

type schemaField struct {
	name   string
	schema *connectSchema
}

func (s *connectSchema) field(name string) *connectSchema {
	for _, f := range s.fields {
		if f.name == name {
			return f.schema
		}
	}
	return nil
}

// equal reports whether two schemas are the same (Connect's equals).
func (s *connectSchema) equal(o *connectSchema) bool {
	if s == nil || o == nil {
		return s == o
	}
	if s.kind != o.kind || len(s.fields) != len(o.fields) || !s.elem.equal(o.elem) {
		return false
	}
	for i := range s.fields {
		if s.fields[i].name != o.fields[i].name || !s.fields[i].schema.equal(o.fields[i].schema) {
			return false
		}
	}
	return true
}

// schemaOf infers v's schema as Debezium's JsonSchemaData.toConnectSchema
// does with its defaults (table.json.payload.null.behavior=ignore,
// table.json.payload.empty.array.behavior=ignore): nil for null and for an
// empty array (the field is left out), an error where Debezium throws (an
// array whose elements differ in type).
func schemaOf(v *jsonValue) (*connectSchema, error) {
	switch v.kind {
	case jsonNull:
		return nil, nil
	case jsonBool, jsonInt32, jsonInt64, jsonString:
		return &connectSchema{kind: v.kind}, nil
	case jsonBigInt, jsonDouble:
		return &connectSchema{kind: jsonDouble}, nil
	case jsonArray:
		if len(v.elems) == 0 {
			return nil, nil
		}
		elem, err := elemSchema(v.elems)
		if err != nil {
			return nil, err
		}
		return &connectSchema{kind: jsonArray, elem: elem}, nil
	}
	s := &connectSchema{kind: jsonObject}
	for i := range v.fields {
		f := &v.fields[i]
		fs, err := schemaOf(&f.value)
		if err != nil {
			return nil, err
		}
		if fs != nil && s.field(string(f.name)) == nil {
			s.fields = append(s.fields, schemaField{name: string(f.name), schema: fs})
		}
	}
	return s, nil
}

// elemSchema is the element schema of a non-empty array: that of its first
// non-null element, every other non-null one being of the same JSON type
// (and numbers of the same schema). For objects it is their schemas merged:
// the fields of each, a field keeping the schema it first had. Debezium
// merges the distinct schemas in the order of a Java HashSet, which is not
// the same from one JVM to the next; walrelay merges them in the order
// they come, so objects of different shapes in one array may have their
// fields in another order than Debezium's.
func elemSchema(elems []jsonValue) (*connectSchema, error) {
	var ref *jsonValue
	var refSchema *connectSchema
	for i := range elems {
		e := &elems[i]
		if e.kind == jsonNull {
			continue
		}
		if ref == nil {
			ref = e
		}
		if jsonType(e.kind) != jsonType(ref.kind) {
			return nil, errNotExpandable
		}
		if isNumber(ref.kind) {
			if refSchema == nil {
				refSchema, _ = schemaOf(ref)
			}
			if es, _ := schemaOf(e); es.kind != refSchema.kind {
				return nil, errNotExpandable
			}
		}
	}
	if ref == nil {
		return nil, errNotExpandable // only nulls
	}
	if ref.kind != jsonObject {
		s, err := schemaOf(ref)
		if err == nil && s == nil {
			err = errNotExpandable // an array of empty arrays
		}
		return s, err
	}
	var merged *connectSchema
	for i := range elems {
		if elems[i].kind != jsonObject {
			continue
		}
		s, err := schemaOf(&elems[i])
		if err != nil {
			return nil, err
		}
		if merged == nil {
			merged = s
			continue
		}
		if merged.equal(s) {
			continue
		}
		m := &connectSchema{kind: jsonObject, fields: slices.Clone(merged.fields)}
		for _, f := range s.fields {
			if m.field(f.name) == nil {
				m.fields = append(m.fields, f)
			}
		}
		merged = m
	}
	return merged, nil
}

func isNumber(k jsonKind) bool {
	return k == jsonInt32 || k == jsonInt64 || k == jsonBigInt || k == jsonDouble
}

// jsonType is Jackson's JsonNodeType of a kind: the number kinds are one.
func jsonType(k jsonKind) jsonKind {
	if isNumber(k) {
		return jsonDouble
	}
	return k
}

// appendConnectValue writes v, whose schema is s, as Connect's JsonConverter
// writes the Connect value Debezium builds from it: a struct's fields in its
// schema's order (a field v lacks, or holds null, as null), an array's
// elements, numbers by their schema. It fails where Connect refuses the value
// (a big integer, or a long where the schema says int).
func appendConnectValue(dst []byte, v *jsonValue, s *connectSchema) ([]byte, error) {
	if v == nil || v.kind == jsonNull {
		return append(dst, "null"...), nil
	}
	switch s.kind {
	case jsonObject:
		if v.kind != jsonObject {
			return nil, errNotExpandable
		}
		dst = append(dst, '{')
		for i, f := range s.fields {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJacksonString(dst, []byte(f.name))
			dst = append(dst, ':')
			var fv *jsonValue
			for j := range v.fields {
				if string(v.fields[j].name) == f.name {
					fv = &v.fields[j].value
					break
				}
			}
			var err error
			if dst, err = appendConnectValue(dst, fv, f.schema); err != nil {
				return nil, err
			}
		}
		return append(dst, '}'), nil
	case jsonArray:
		if v.kind != jsonArray {
			return nil, errNotExpandable
		}
		dst = append(dst, '[')
		for i := range v.elems {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendConnectValue(dst, &v.elems[i], s.elem); err != nil {
				return nil, err
			}
		}
		return append(dst, ']'), nil
	case jsonString:
		if v.kind != jsonString {
			return nil, errNotExpandable
		}
		return appendJacksonString(dst, v.s), nil
	case jsonBool:
		if v.kind != jsonBool {
			return nil, errNotExpandable
		}
		return strconv.AppendBool(dst, v.b), nil
	case jsonInt32:
		if v.kind != jsonInt32 {
			return nil, errNotExpandable
		}
		return strconv.AppendInt(dst, v.i, 10), nil
	case jsonInt64:
		if v.kind != jsonInt32 && v.kind != jsonInt64 {
			return nil, errNotExpandable
		}
		return strconv.AppendInt(dst, v.i, 10), nil
	case jsonDouble:
		switch v.kind {
		case jsonDouble:
			return appendJavaDouble(dst, v.f, 64), nil
		}
	}
	return nil, errNotExpandable
}

// expandJSON appends payload, a JSON text, as Debezium's outbox router with
// table.expand.json.payload=true and the JsonConverter writes it, and
// reports false (appending nothing) when Debezium keeps it as a string: text
// that does not start with '{' or '[' (a JSON string, number, boolean or
// null; leading white space included), text Jackson cannot parse, an array
// whose elements differ in type; and a JSON array or an integer beyond 64
// bits, where Debezium 3.7.0 fails the record and later versions keep the
// payload a string, as walrelay does.
func expandJSON(dst, payload []byte) ([]byte, bool) {
	if len(payload) == 0 || payload[0] != '{' {
		return dst, false
	}
	v, err := parseJSON(payload)
	if err != nil || v.kind != jsonObject {
		return dst, false
	}
	s, err := schemaOf(&v)
	if err != nil {
		return dst, false
	}
	out, err := appendConnectValue(dst, &v, s)
	if err != nil {
		return dst, false
	}
	return out, true
}
