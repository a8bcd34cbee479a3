package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hamba/avro/v2"
)

// avroAPI encodes with hamba/avro's defaults; its own instance, so that its
// caches are walrelay's alone.
var avroAPI = avro.Config{}.Freeze()

// avroCodec converts JSON to Avro binary for one schema (rules in
// docs/schema-registry.md, "JSON to Avro"). Safe for concurrent use.
type avroCodec struct {
	schema avro.Schema
	fast   *avroNode // the fast path (avrofast.go)
	maps   bool      // the schema has a map: written by appendAvro
}

// parseAvro parses text after the schemas it references (deps, each after
// its own references), all in one namespace of names.
func parseAvro(text string, deps []namedSchema) (*avroCodec, error) {
	names := &avro.SchemaCache{}
	for _, d := range deps {
		if formatOf(d.Type) != FormatAvro {
			return nil, fmt.Errorf("%w: reference %q is %v, not Avro", ErrInvalidSchema, d.name, d.Type)
		}
		if _, err := avro.ParseWithCache(d.Schema.Schema, "", names); err != nil {
			return nil, fmt.Errorf("%w: Avro reference %q: %w", ErrInvalidSchema, d.name, err)
		}
	}
	s, err := avro.ParseWithCache(text, "", names)
	if err != nil {
		return nil, fmt.Errorf("%w: Avro: %w", ErrInvalidSchema, err)
	}
	return &avroCodec{schema: s, fast: compileFast(s, map[*avro.RecordSchema]*avroNode{}), maps: hasMap(s, map[avro.Schema]bool{})}, nil
}

func (c *avroCodec) encode(dst, data []byte) ([]byte, error) {
	if out, ok := c.fast.encodeFast(dst, data); ok {
		return out, nil
	}
	return c.encodeGeneral(dst, data)
}

// encodeGeneral is the general path: every rule, every error message.
func (c *avroCodec) encodeGeneral(dst, data []byte) ([]byte, error) {
	v, err := decodeJSON(data)
	if err != nil {
		return nil, err
	}
	native, err := toAvro(c.schema, v, "", false)
	if err != nil {
		return nil, mismatch("%v", err)
	}
	out, err := marshalAvro(dst, c.schema, c.maps, native)
	if err != nil {
		return nil, mismatch("avro: %v", err)
	}
	return out, nil
}

// marshalAvro appends the Avro binary of v (as toAvro returns it) for s;
// maps tells whether s has a map (hasMap), whose entries appendAvro writes
// in key order.
func marshalAvro(dst []byte, s avro.Schema, maps bool, v any) ([]byte, error) {
	if maps {
		return appendAvro(dst, s, v)
	}
	b, err := avroAPI.Marshal(s, v)
	if err != nil {
		return nil, err
	}
	return append(dst, b...), nil
}

// hasMap reports whether s has a map anywhere; seen holds the schemas
// already visited (a named type may refer to itself).
func hasMap(s avro.Schema, seen map[avro.Schema]bool) bool {
	if r, ok := s.(*avro.RefSchema); ok {
		s = r.Schema()
	}
	if seen[s] {
		return false
	}
	seen[s] = true
	switch s := s.(type) {
	case *avro.MapSchema:
		return true
	case *avro.ArraySchema:
		return hasMap(s.Items(), seen)
	case *avro.RecordSchema:
		for _, f := range s.Fields() {
			if hasMap(f.Type(), seen) {
				return true
			}
		}
	case *avro.UnionSchema:
		for _, b := range s.Types() {
			if hasMap(b, seen) {
				return true
			}
		}
	}
	return false
}

// appendAvro appends the Avro binary of v (as toAvro returns it) for a
// schema with maps: the entries of a map in key order, so that a payload
// always encodes to the same bytes (hamba/avro writes them in Go's map
// iteration order, different each time). Records, arrays, maps and unions
// are written here as hamba/avro writes them (blocks of blockLength items
// with their size); every other value by hamba/avro.
func appendAvro(dst []byte, s avro.Schema, v any) ([]byte, error) {
	var err error
	switch s := s.(type) {
	case *avro.RefSchema:
		return appendAvro(dst, s.Schema(), v)
	case *avro.RecordSchema:
		obj, _ := v.(map[string]any)
		for _, f := range s.Fields() {
			if dst, err = appendAvro(dst, f.Type(), obj[f.Name()]); err != nil {
				return nil, err
			}
		}
		return dst, nil
	case *avro.ArraySchema:
		arr, ok := v.([]any)
		if !ok {
			return nil, fmt.Errorf("array: got %T", v)
		}
		return appendBlocks(dst, len(arr), func(dst []byte, i int) ([]byte, error) {
			return appendAvro(dst, s.Items(), arr[i])
		})
	case *avro.MapSchema:
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("map: got %T", v)
		}
		keys := slices.Sorted(maps.Keys(obj))
		return appendBlocks(dst, len(keys), func(dst []byte, i int) ([]byte, error) {
			dst = appendLong(dst, int64(len(keys[i])))
			return appendAvro(append(dst, keys[i]...), s.Values(), obj[keys[i]])
		})
	case *avro.UnionSchema:
		name, inner := "null", any(nil)
		for k, e := range v.(map[string]any) { // toAvro's union form: nil or one entry
			name, inner = k, e
		}
		b, i := s.Types().Get(name)
		if i < 0 {
			return nil, fmt.Errorf("union: no branch %q", name)
		}
		return appendAvro(appendLong(dst, int64(i)), b, inner)
	}
	b, err := avroAPI.Marshal(s, v)
	if err != nil {
		return nil, err
	}
	return append(dst, b...), nil
}

// appendBlocks appends n items written by item in blocks of up to
// blockLength, then the 0 that ends them, as hamba/avro does.
func appendBlocks(dst []byte, n int, item func(dst []byte, i int) ([]byte, error)) ([]byte, error) {
	var err error
	for start := 0; start < n; start += blockLength {
		block := len(dst)
		end := min(start+blockLength, n)
		for i := start; i < end; i++ {
			if dst, err = item(dst, i); err != nil {
				return nil, err
			}
		}
		dst = blockHeader(dst, block, end-start)
	}
	return append(dst, 0), nil
}

// decodeJSON decodes one JSON value, numbers as json.Number (no float
// rounding of 64-bit integers or decimals).
func decodeJSON(data []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, mismatch("not JSON: %v", err)
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, mismatch("not JSON: data after the first value")
	}
	return v, nil
}

// rawBytes is a bytes or fixed value taken from a schema's default (already
// decoded by hamba/avro).
type rawBytes []byte

// toAvro converts the JSON value v (as decodeJSON returns it) to the Go value
// hamba/avro encodes as schema s. path names the value in errors ("" is the
// top). A default (the schema's, for a missing field) takes the first branch
// of a union, as the Avro specification says.
func toAvro(s avro.Schema, v any, path string, isDefault bool) (any, error) {
	at := func() string {
		if path == "" {
			return "the value"
		}
		return path
	}
	wrong := func(want string) error {
		return fmt.Errorf("%s: got %s, want %s", at(), jsonKind(v), want)
	}
	switch s := s.(type) {
	case *avro.RefSchema:
		return toAvro(s.Schema(), v, path, isDefault)
	case *avro.NullSchema:
		if v != nil {
			return nil, wrong("null")
		}
		return nil, nil
	case *avro.PrimitiveSchema:
		return primitiveToAvro(s, v, at, wrong)
	case *avro.EnumSchema:
		str, ok := v.(string)
		if !ok {
			return nil, wrong("a string (enum " + s.FullName() + ")")
		}
		for _, sym := range s.Symbols() {
			if sym == str {
				return str, nil
			}
		}
		return nil, fmt.Errorf("%s: %q is not a symbol of enum %s %v", at(), str, s.FullName(), s.Symbols())
	case *avro.FixedSchema:
		return fixedToAvro(s, v, at, wrong)
	case *avro.ArraySchema:
		arr, ok := v.([]any)
		if !ok {
			return nil, wrong("an array")
		}
		out := make([]any, len(arr))
		for i, e := range arr {
			c, err := toAvro(s.Items(), e, path+"["+strconv.Itoa(i)+"]", isDefault)
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	case *avro.MapSchema:
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, wrong("an object (map)")
		}
		out := make(map[string]any, len(obj))
		for k, e := range obj {
			c, err := toAvro(s.Values(), e, joinPath(path, k), isDefault)
			if err != nil {
				return nil, err
			}
			out[k] = c
		}
		return out, nil
	case *avro.RecordSchema:
		return recordToAvro(s, v, path, isDefault, wrong)
	case *avro.UnionSchema:
		return unionToAvro(s, v, path, isDefault, at)
	}
	return nil, fmt.Errorf("%s: Avro type %s is not supported", at(), s.Type())
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func recordToAvro(s *avro.RecordSchema, v any, path string, isDefault bool, wrong func(string) error) (any, error) {
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, wrong("an object (record " + s.FullName() + ")")
	}
	out := make(map[string]any, len(s.Fields()))
	for _, f := range s.Fields() {
		fv, present := obj[f.Name()]
		fdef := isDefault
		if !present {
			if !f.HasDefault() {
				return nil, fmt.Errorf("%s: missing field %q (required: it has no default)", joinPath(path, f.Name()), f.Name())
			}
			fv, fdef = defaultToJSON(f.Default()), true
		}
		c, err := toAvro(f.Type(), fv, joinPath(path, f.Name()), fdef)
		if err != nil {
			return nil, err
		}
		out[f.Name()] = c
	}
	for k := range obj { // out has every field of the record
		if _, ok := out[k]; !ok {
			return nil, fmt.Errorf("%s: record %s has no field %q", joinPath(path, k), s.FullName(), k)
		}
	}
	return out, nil
}

// unionToAvro picks the union's branch: the JSON encoding's wrapper
// {"<branch name>": value} when v is an object with one key naming a branch,
// else the first branch (in the schema's order) that accepts the plain
// value. The result is hamba/avro's union form: {branch name: value}.
func unionToAvro(s *avro.UnionSchema, v any, path string, isDefault bool, at func() string) (any, error) {
	types := s.Types()
	if isDefault {
		c, err := toAvro(types[0], v, path, true)
		if err != nil {
			return nil, err
		}
		return map[string]any{branchName(types[0]): c}, nil
	}
	if v == nil {
		if _, i := types.Get("null"); i >= 0 {
			return map[string]any(nil), nil
		}
	}
	if obj, ok := v.(map[string]any); ok && len(obj) == 1 {
		for name, inner := range obj {
			if b, i := types.Get(name); i >= 0 {
				c, err := toAvro(b, inner, path, false)
				if err != nil {
					return nil, err
				}
				return map[string]any{name: c}, nil
			}
		}
	}
	var errs []string
	for _, b := range types {
		if b.Type() == avro.Null {
			continue
		}
		c, err := toAvro(b, v, path, false)
		if err == nil {
			return map[string]any{branchName(b): c}, nil
		}
		errs = append(errs, branchName(b)+": "+err.Error())
	}
	names := make([]string, len(types))
	for i, b := range types {
		names[i] = branchName(b)
	}
	return nil, fmt.Errorf("%s: %s fits no branch of the union %v (%s)", at(), jsonKind(v), names, strings.Join(errs, "; "))
}

// branchName names a union branch as hamba/avro does: the full name of a
// named type, else the type, with ".<logical type>" for a logical one.
func branchName(s avro.Schema) string {
	if r, ok := s.(*avro.RefSchema); ok {
		s = r.Schema()
	}
	if n, ok := s.(avro.NamedSchema); ok {
		return n.FullName()
	}
	name := string(s.Type())
	if l, ok := s.(avro.LogicalTypeSchema); ok && l.Logical() != nil {
		name += "." + string(l.Logical().Type())
	}
	return name
}

func primitiveToAvro(s *avro.PrimitiveSchema, v any, at func() string, wrong func(string) error) (any, error) {
	var logical avro.LogicalType
	if l := s.Logical(); l != nil {
		logical = l.Type()
	}
	switch s.Type() {
	case avro.Boolean:
		b, ok := v.(bool)
		if !ok {
			return nil, wrong("a boolean")
		}
		return b, nil
	case avro.String:
		str, ok := v.(string)
		if !ok {
			return nil, wrong("a string")
		}
		if logical == avro.UUID && !isUUID(str) {
			return nil, fmt.Errorf("%s: %q is not a UUID", at(), str)
		}
		return str, nil
	case avro.Bytes:
		if logical == avro.Decimal {
			return decimalToAvro(s.Logical().(*avro.DecimalLogicalSchema), v, at, wrong)
		}
		return bytesOf(v, at, wrong)
	case avro.Float, avro.Double:
		bits := 64
		if s.Type() == avro.Float {
			bits = 32
		}
		n, ok := v.(json.Number)
		if !ok {
			return nil, wrong("a number")
		}
		f, err := strconv.ParseFloat(n.String(), bits)
		if err != nil {
			return nil, fmt.Errorf("%s: %s is out of range for %s", at(), n, s.Type())
		}
		if bits == 32 {
			return float32(f), nil
		}
		return f, nil
	case avro.Int:
		switch logical {
		case avro.Date:
			if str, ok := v.(string); ok {
				t, err := time.Parse(time.DateOnly, str)
				if err != nil {
					return nil, fmt.Errorf("%s: %q is not a date (YYYY-MM-DD)", at(), str)
				}
				return int32(t.Unix() / 86400), nil
			}
		case avro.TimeMillis:
			if str, ok := v.(string); ok {
				d, err := timeOfDay(str)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", at(), err)
				}
				return int32(d / time.Millisecond), nil
			}
		}
		i, err := integer(v, math.MinInt32, math.MaxInt32, at, wrong)
		return int32(i), err
	case avro.Long:
		switch logical {
		case avro.TimestampMillis, avro.TimestampMicros, avro.LocalTimestampMillis, avro.LocalTimestampMicros:
			if str, ok := v.(string); ok {
				return timestamp(str, logical, at)
			}
		case avro.TimeMicros:
			if str, ok := v.(string); ok {
				d, err := timeOfDay(str)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", at(), err)
				}
				return d.Truncate(time.Microsecond), nil
			}
			i, err := integer(v, math.MinInt64, math.MaxInt64, at, wrong)
			return time.Duration(i) * time.Microsecond, err // hamba takes time-micros as a Duration
		}
		return integer(v, math.MinInt64, math.MaxInt64, at, wrong)
	}
	return nil, fmt.Errorf("%s: Avro type %s is not supported", at(), s.Type())
}

// integer reads a JSON integer, or a string holding one (as the proto3 JSON
// mapping allows for 64-bit integers), within [lo, hi].
func integer(v any, lo, hi int64, at func() string, wrong func(string) error) (int64, error) {
	text, ok := numberText(v)
	if !ok {
		return 0, wrong("an integer")
	}
	i, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		// 3.0 or 1e3 are integers too; 3.5 is not.
		r, ok := new(big.Rat).SetString(text)
		if !ok || !r.IsInt() || !r.Num().IsInt64() {
			if ok && r.IsInt() {
				return 0, fmt.Errorf("%s: %s is out of range", at(), text)
			}
			return 0, fmt.Errorf("%s: %s is not an integer", at(), shown(v, text))
		}
		i = r.Num().Int64()
	}
	if i < lo || i > hi {
		return 0, fmt.Errorf("%s: %d is out of range [%d, %d]", at(), i, lo, hi)
	}
	return i, nil
}

// numberText is the text of a JSON number, or of a string (which may hold
// one).
func numberText(v any) (string, bool) {
	switch x := v.(type) {
	case json.Number:
		return x.String(), true
	case string:
		return x, true
	}
	return "", false
}

// timestamp reads an RFC 3339 time as the epoch count of the logical type's
// unit, rounded down (as Java's Instant.toEpochMilli does). A local
// timestamp also takes a time without offset, and counts its wall clock.
func timestamp(str string, logical avro.LogicalType, at func() string) (int64, error) {
	local := logical == avro.LocalTimestampMillis || logical == avro.LocalTimestampMicros
	t, err := time.Parse(time.RFC3339Nano, str)
	if err != nil && local {
		t, err = time.Parse("2006-01-02T15:04:05.999999999", str)
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not an RFC 3339 timestamp", at(), str)
	}
	if local { // the wall clock, as if it were UTC
		y, mo, d := t.Date()
		h, mi, s := t.Clock()
		t = time.Date(y, mo, d, h, mi, s, t.Nanosecond(), time.UTC)
	}
	if logical == avro.TimestampMillis || logical == avro.LocalTimestampMillis {
		return t.UnixMilli(), nil
	}
	return t.UnixMicro(), nil
}

// timeOfDay reads "HH:MM:SS[.fraction]".
func timeOfDay(str string) (time.Duration, error) {
	t, err := time.Parse("15:04:05.999999999", str)
	if err != nil {
		return 0, fmt.Errorf("%q is not a time of day (HH:MM:SS[.fraction])", str)
	}
	h, m, s := t.Clock()
	return time.Duration(h)*time.Hour + time.Duration(m)*time.Minute + time.Duration(s)*time.Second + time.Duration(t.Nanosecond()), nil
}

// bytesOf reads bytes as the Avro JSON encoding writes them: a string whose
// code points 0-255 are the bytes.
func bytesOf(v any, at func() string, wrong func(string) error) ([]byte, error) {
	switch x := v.(type) {
	case rawBytes:
		return x, nil
	case string:
		b := make([]byte, 0, len(x))
		for _, r := range x {
			if r > 255 || r == utf8.RuneError {
				return nil, fmt.Errorf("%s: code point U+%04X is not a byte (bytes are strings of code points 0-255)", at(), r)
			}
			b = append(b, byte(r))
		}
		return b, nil
	}
	return nil, wrong("a string of bytes")
}

func fixedToAvro(s *avro.FixedSchema, v any, at func() string, wrong func(string) error) (any, error) {
	if l := s.Logical(); l != nil && l.Type() == avro.Decimal {
		return decimalToAvro(l.(*avro.DecimalLogicalSchema), v, at, wrong)
	}
	b, err := bytesOf(v, at, wrong)
	if err != nil {
		return nil, err
	}
	if len(b) != s.Size() {
		return nil, fmt.Errorf("%s: %d bytes for fixed %s of size %d", at(), len(b), s.FullName(), s.Size())
	}
	arr := reflect.New(reflect.ArrayOf(s.Size(), reflect.TypeFor[byte]())).Elem()
	reflect.Copy(arr, reflect.ValueOf(b))
	return arr.Interface(), nil
}

// decimalToAvro reads a decimal from a JSON number or a string holding one,
// exactly: more fraction digits than the scale, or more digits than the
// precision, do not fit (no rounding).
func decimalToAvro(d *avro.DecimalLogicalSchema, v any, at func() string, wrong func(string) error) (any, error) {
	if b, ok := v.(rawBytes); ok { // a default: the unscaled two's-complement bytes
		return decimalFromBytes(b, d.Scale()), nil
	}
	text, ok := numberText(v)
	if !ok {
		return nil, wrong("a decimal number or a string holding one")
	}
	r, ok := new(big.Rat).SetString(strings.TrimSpace(text))
	if !ok {
		return nil, fmt.Errorf("%s: %s is not a decimal number", at(), shown(v, text))
	}
	scale := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(d.Scale())), nil)
	unscaled := new(big.Rat).Mul(r, new(big.Rat).SetInt(scale))
	if !unscaled.IsInt() {
		return nil, fmt.Errorf("%s: %s has more than %d fraction digits (decimal(%d,%d))", at(), text, d.Scale(), d.Precision(), d.Scale())
	}
	digits := len(new(big.Int).Abs(unscaled.Num()).String())
	if unscaled.Num().Sign() != 0 && digits > d.Precision() {
		return nil, fmt.Errorf("%s: %s has more than %d digits (decimal(%d,%d))", at(), text, d.Precision(), d.Precision(), d.Scale())
	}
	return r, nil
}

func decimalFromBytes(b []byte, scale int) *big.Rat {
	n := new(big.Int).SetBytes(b)
	if len(b) > 0 && b[0]&0x80 != 0 { // negative: two's complement
		n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(len(b)*8)))
	}
	return new(big.Rat).SetFrac(n, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale)), nil))
}

// defaultToJSON turns a field default as hamba/avro holds it (already
// converted for its type) back into decodeJSON's forms, bytes kept as
// rawBytes.
func defaultToJSON(v any) any {
	switch x := v.(type) {
	case nil, bool, string:
		return x
	case int, int8, int16, int32, int64, float32:
		return json.Number(fmt.Sprint(x))
	case float64:
		return json.Number(strconv.FormatFloat(x, 'g', -1, 64))
	case []byte:
		return rawBytes(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = defaultToJSON(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = defaultToJSON(e)
		}
		return out
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Array && rv.Type().Elem().Kind() == reflect.Uint8 { // fixed
		b := make([]byte, rv.Len())
		reflect.Copy(reflect.ValueOf(b), rv)
		return rawBytes(b)
	}
	if m, ok := v.(json.Marshaler); ok { // hamba's marker of a null default
		if b, err := m.MarshalJSON(); err == nil && string(b) == "null" {
			return nil
		}
	}
	return v
}

// jsonKind names a decoded JSON value's type for messages.
// shown is text, the number or string v holds, as the JSON had it: a
// number bare (1.5), a string quoted ("1.5").
func shown(v any, text string) string {
	if _, ok := v.(json.Number); ok {
		return text
	}
	return strconv.Quote(text)
}

func jsonKind(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case json.Number:
		return "the number " + x.String()
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range []byte(s) {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return false
			}
		}
	}
	return true
}
