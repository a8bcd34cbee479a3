package schema

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/hamba/avro/v2"
)

// The fast path of the JSON to Avro conversion: it writes Avro binary while
// it reads the payload's JSON, with no generic values in between. It is an
// optimization of avroCodec.encode's general path (decodeJSON, toAvro,
// hamba/avro's Marshal), never a second set of rules: it handles the common
// shapes itself (records, arrays, enums, null, boolean, int, long,
// float, double, plain strings, timestamps, bytes decimals, a union's null or its first
// other branch), converts any other value (maps, bytes, fixed, decimals,
// other logical types, union wrappers) through the general path, and gives up on
// anything else: JSON it is unsure of (escapes, invalid UTF-8, a number that
// is no plain integer for an int, a duplicate or unknown field), a missing
// field without default, any mismatch. The caller then runs the general
// path, which decides and words the error. TestAvroFastPath checks that what
// the fast path writes is byte for byte what the general path writes.

// avroKind is what the fast path does with a schema node.
type avroKind uint8

const (
	kindGeneral avroKind = iota // convert through the general path
	kindNull
	kindBoolean
	kindInt
	kindLong
	kindTimestamp // long timestamp-millis, -micros, local-timestamp-millis, -micros
	kindFloat
	kindDouble
	kindString
	kindDecimal // bytes decimal
	kindEnum
	kindRecord
	kindArray
	kindUnion
)

// avroNode is a schema node made ready for the fast path.
type avroNode struct {
	kind    avroKind
	schema  avro.Schema                // for the general path
	maps    bool                       // schema has a map (hasMap)
	logical avro.LogicalType           // kindTimestamp
	decimal *avro.DecimalLogicalSchema // kindDecimal
	fields  []avroField                // kindRecord, in the schema's order
	byName  map[string]int             // kindRecord: field index by name
	items   *avroNode                  // kindArray
	symbols map[string]int             // kindEnum
	// kindUnion: the index of the null branch (-1: none), and the first
	// other branch with its index.
	nullIndex, firstIndex int
	first                 *avroNode
}

// avroField is a record field; def is its default's Avro binary (nil: no
// default, or one the fast path does not write).
type avroField struct {
	name string
	node *avroNode
	def  []byte
}

// compileFast makes s ready for the fast path; seen holds the records met so
// far (recursive schemas refer to themselves).
func compileFast(s avro.Schema, seen map[*avro.RecordSchema]*avroNode) *avroNode {
	if r, ok := s.(*avro.RefSchema); ok {
		s = r.Schema()
	}
	n := &avroNode{schema: s, maps: hasMap(s, map[avro.Schema]bool{})}
	switch s := s.(type) {
	case *avro.NullSchema:
		n.kind = kindNull
	case *avro.PrimitiveSchema:
		n.kind = primitiveKind(s)
		switch n.kind {
		case kindTimestamp:
			n.logical = s.Logical().Type()
		case kindDecimal:
			n.decimal = s.Logical().(*avro.DecimalLogicalSchema)
		}
	case *avro.EnumSchema:
		n.kind = kindEnum
		n.symbols = make(map[string]int, len(s.Symbols()))
		for i, sym := range s.Symbols() {
			n.symbols[sym] = i
		}
	case *avro.RecordSchema:
		if done := seen[s]; done != nil {
			return done
		}
		seen[s] = n
		n.kind = kindRecord
		n.byName = make(map[string]int, len(s.Fields()))
		for i, f := range s.Fields() {
			af := avroField{name: f.Name(), node: compileFast(f.Type(), seen)}
			if f.HasDefault() {
				if native, err := toAvro(f.Type(), defaultToJSON(f.Default()), f.Name(), true); err == nil {
					if b, err := marshalAvro(nil, f.Type(), hasMap(f.Type(), map[avro.Schema]bool{}), native); err == nil {
						af.def = b
					}
				}
			}
			n.fields = append(n.fields, af)
			n.byName[f.Name()] = i
		}
	case *avro.ArraySchema:
		n.kind = kindArray
		n.items = compileFast(s.Items(), seen)
	case *avro.UnionSchema:
		n.kind = kindUnion
		n.nullIndex, n.firstIndex = -1, -1
		for i, b := range s.Types() {
			switch {
			case b.Type() == avro.Null:
				if n.nullIndex < 0 {
					n.nullIndex = i
				}
			case n.first == nil:
				n.first, n.firstIndex = compileFast(b, seen), i
			}
		}
	}
	return n
}

func primitiveKind(s *avro.PrimitiveSchema) avroKind {
	var logical avro.LogicalType
	if l := s.Logical(); l != nil {
		logical = l.Type()
	}
	switch {
	case s.Type() == avro.Long && (logical == avro.TimestampMillis || logical == avro.TimestampMicros ||
		logical == avro.LocalTimestampMillis || logical == avro.LocalTimestampMicros):
		return kindTimestamp
	case s.Type() == avro.Bytes && logical == avro.Decimal:
		return kindDecimal
	case logical != "":
		return kindGeneral
	}
	switch s.Type() {
	case avro.Boolean:
		return kindBoolean
	case avro.Int:
		return kindInt
	case avro.Long:
		return kindLong
	case avro.Float:
		return kindFloat
	case avro.Double:
		return kindDouble
	case avro.String:
		return kindString
	}
	return kindGeneral
}

// encodeFast appends data's Avro binary to dst; ok is false when the fast
// path gave up (dst's contents past its length are then undefined).
func (n *avroNode) encodeFast(dst, data []byte) ([]byte, bool) {
	dst, i, ok := n.value(dst, data, skipSpace(data, 0), 0)
	return dst, ok && skipSpace(data, i) == len(data)
}

// value appends the Avro binary of the JSON value at data[i:] and returns
// the index after it.
func (n *avroNode) value(dst, data []byte, i, depth int) ([]byte, int, bool) {
	if i >= len(data) || depth > maxDepth {
		return dst, i, false
	}
	c := data[i]
	switch n.kind {
	case kindNull:
		end, ok := literal(data, i, "null")
		return dst, end, ok
	case kindBoolean:
		if end, ok := literal(data, i, "true"); ok {
			return append(dst, 1), end, true
		}
		end, ok := literal(data, i, "false")
		return append(dst, 0), end, ok
	case kindInt, kindLong:
		text, end, ok := integerText(data, i)
		if !ok {
			return dst, end, false
		}
		lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
		if n.kind == kindInt {
			lo, hi = math.MinInt32, math.MaxInt32
		}
		v, ok := parseInteger(text)
		return appendLong(dst, v), end, ok && v >= lo && v <= hi
	case kindTimestamp:
		if c != '"' {
			text, end, ok := integerText(data, i)
			if !ok {
				return dst, end, false
			}
			v, ok := parseInteger(text)
			return appendLong(dst, v), end, ok
		}
		s, end, ok := plainString(data, i)
		if !ok {
			return dst, end, false
		}
		v, err := timestamp(string(s), n.logical, func() string { return "" })
		return appendLong(dst, v), end, err == nil
	case kindFloat, kindDouble:
		end, ok := number(data, i)
		if !ok {
			return dst, end, false
		}
		if n.kind == kindFloat {
			f, err := strconv.ParseFloat(string(data[i:end]), 32)
			return binary.LittleEndian.AppendUint32(dst, math.Float32bits(float32(f))), end, err == nil
		}
		f, err := strconv.ParseFloat(string(data[i:end]), 64)
		return binary.LittleEndian.AppendUint64(dst, math.Float64bits(f)), end, err == nil
	case kindString:
		s, end, ok := plainString(data, i)
		if !ok {
			return dst, end, false
		}
		return append(appendLong(dst, int64(len(s))), s...), end, true
	case kindDecimal:
		if out, end, ok := n.decimalValue(dst, data, i); ok {
			return out, end, true
		}
	case kindEnum:
		s, end, ok := plainString(data, i)
		idx, found := n.symbols[string(s)]
		return appendLong(dst, int64(idx)), end, ok && found
	case kindRecord:
		return n.record(dst, data, i, depth)
	case kindArray:
		return n.array(dst, data, i, depth)
	case kindUnion:
		if end, ok := literal(data, i, "null"); ok {
			if n.nullIndex < 0 {
				return dst, end, false
			}
			return appendLong(dst, int64(n.nullIndex)), end, true
		}
		if n.first != nil && c != '{' { // an object may be the wrapper {"<branch>": value}
			start := len(dst)
			out, end, ok := n.first.value(appendLong(dst, int64(n.firstIndex)), data, i, depth+1)
			if ok {
				return out, end, true
			}
			dst = out[:start]
		}
	}
	return n.general(dst, data, i)
}

// decimalValue writes a decimal given as a JSON number, or a string holding
// one, as the general path does: decimalToAvro's checks, then hamba/avro's
// bytes (the unscaled value in big-endian two's complement).
func (n *avroNode) decimalValue(dst, data []byte, i int) ([]byte, int, bool) {
	text, end := data[i:], i
	if data[i] == '"' {
		s, e, ok := plainString(data, i)
		if !ok {
			return dst, e, false
		}
		text, end = s, e
	}
	numEnd, ok := number(text, 0)
	if !ok || data[i] == '"' && numEnd != len(text) {
		return dst, numEnd, false
	}
	if data[i] != '"' {
		text, end = text[:numEnd], i+numEnd
	}
	v, err := decimalToAvro(n.decimal, json.Number(text), func() string { return "" }, func(string) error { return errGiveUp })
	if err != nil {
		return dst, end, false
	}
	r := v.(*big.Rat)
	u := new(big.Int).Mul(r.Num(), new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(n.decimal.Scale())), nil))
	u.Quo(u, r.Denom())
	var b []byte
	switch u.Sign() {
	case 0:
		b = []byte{0}
	case 1:
		if b = u.Bytes(); b[0]&0x80 != 0 {
			b = append([]byte{0}, b...)
		}
	default:
		b = u.Add(u, new(big.Int).Lsh(big.NewInt(1), uint(u.BitLen()/8+1)*8)).Bytes()
	}
	return append(appendLong(dst, int64(len(b))), b...), end, true
}

// errGiveUp stands for a mismatch whose message the fast path does not need.
var errGiveUp = errors.New("give up")

// general converts the JSON value at data[i:] through the general path.
func (n *avroNode) general(dst, data []byte, i int) ([]byte, int, bool) {
	end, ok := skipValue(data, i)
	if !ok {
		return dst, end, false
	}
	v, err := decodeJSON(data[i:end])
	if err != nil {
		return dst, end, false
	}
	native, err := toAvro(n.schema, v, "", false)
	if err != nil {
		return dst, end, false
	}
	out, err := marshalAvro(dst, n.schema, n.maps, native)
	if err != nil {
		return dst, end, false
	}
	return out, end, true
}

// record writes a JSON object's fields: each as it comes, then, when they
// came in another order than the schema's or some are missing, the written
// fields moved into the schema's order with the defaults of the missing
// ones.
func (n *avroNode) record(dst, data []byte, i, depth int) ([]byte, int, bool) {
	if data[i] != '{' {
		return dst, i, false
	}
	type span struct {
		start, end int // in dst, from base
		set        bool
	}
	var small [16]span
	spans := small[:0]
	if len(n.fields) > len(small) {
		spans = make([]span, 0, len(n.fields))
	}
	spans = spans[:len(n.fields)]
	clear(spans)
	base, inOrder, next := len(dst), true, 0
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		i++
	} else {
		for {
			key, end, ok := plainString(data, i)
			if !ok {
				return dst, end, false
			}
			f, known := n.byName[string(key)]
			if !known || spans[f].set { // unknown or given twice
				return dst, end, false
			}
			if i = skipSpace(data, end); i >= len(data) || data[i] != ':' {
				return dst, i, false
			}
			start := len(dst)
			if dst, i, ok = n.fields[f].node.value(dst, data, skipSpace(data, i+1), depth+1); !ok {
				return dst, i, false
			}
			spans[f] = span{start - base, len(dst) - base, true}
			inOrder, next = inOrder && f == next, f+1
			if i = skipSpace(data, i); i >= len(data) {
				return dst, i, false
			}
			if data[i] == '}' {
				i++
				break
			}
			if data[i] != ',' {
				return dst, i, false
			}
			i = skipSpace(data, i+1)
		}
	}
	if inOrder && next == len(n.fields) {
		return dst, i, true
	}
	// Rewrite in the schema's order (on the stack when small), then put it
	// in place.
	var scratch [512]byte
	ordered := scratch[:0]
	for k, f := range n.fields {
		sp := spans[k]
		switch {
		case sp.set:
			ordered = append(ordered, dst[base+sp.start:base+sp.end]...)
		case f.def != nil:
			ordered = append(ordered, f.def...)
		default:
			return dst, i, false
		}
	}
	return append(dst[:base], ordered...), i, true
}

// blockLength is hamba/avro's default number of items per array or map
// block.
const blockLength = 100

// array writes a JSON array in blocks of up to blockLength items, each with
// its count (negated) and byte size, then the 0 that ends them, as
// hamba/avro does.
func (n *avroNode) array(dst, data []byte, i, depth int) ([]byte, int, bool) {
	if data[i] != '[' {
		return dst, i, false
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == ']' {
		return append(dst, 0), i + 1, true
	}
	block, count := len(dst), 0
	for {
		var ok bool
		if dst, i, ok = n.items.value(dst, data, i, depth+1); !ok {
			return dst, i, false
		}
		if count++; count == blockLength {
			dst = blockHeader(dst, block, count)
			block, count = len(dst), 0
		}
		i = skipSpace(data, i)
		if i >= len(data) {
			return dst, i, false
		}
		if data[i] == ']' {
			i++
			break
		}
		if data[i] != ',' {
			return dst, i, false
		}
		i = skipSpace(data, i+1)
	}
	if count > 0 {
		dst = blockHeader(dst, block, count)
	}
	return append(dst, 0), i, true
}

// blockHeader inserts the header of the block of count items written at
// dst[start:]: -count and the block's size, or count alone when the items
// take no bytes.
func blockHeader(dst []byte, start, count int) []byte {
	size := len(dst) - start
	var h [2 * binary.MaxVarintLen64]byte
	hdr := h[:0]
	if size > 0 {
		hdr = appendLong(appendLong(hdr, -int64(count)), int64(size))
	} else {
		hdr = appendLong(hdr, int64(count))
	}
	return slices.Insert(dst, start, hdr...)
}

// appendLong appends v as Avro writes an int or long: zigzag, then a varint.
func appendLong(dst []byte, v int64) []byte {
	return binary.AppendUvarint(dst, uint64(v<<1)^uint64(v>>63))
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

func literal(data []byte, i int, lit string) (int, bool) {
	if len(data)-i >= len(lit) && string(data[i:i+len(lit)]) == lit {
		return i + len(lit), true
	}
	return i, false
}

// plainString reads a JSON string without escapes, of valid UTF-8 (the
// fast path gives up on others: the general path decodes them); the result
// is data's own bytes.
func plainString(data []byte, i int) ([]byte, int, bool) {
	if i >= len(data) || data[i] != '"' {
		return nil, i, false
	}
	ascii := true
	for j := i + 1; j < len(data); j++ {
		switch c := data[j]; {
		case c == '"':
			s := data[i+1 : j]
			if !ascii && !utf8.Valid(s) {
				return nil, j, false
			}
			return s, j + 1, true
		case c == '\\' || c < 0x20:
			return nil, j, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, len(data), false
}

// plainInteger reads a JSON number that is an integer without fraction or
// exponent.
func plainInteger(data []byte, i int) ([]byte, int, bool) {
	end, ok := number(data, i)
	if !ok {
		return nil, end, false
	}
	for _, c := range data[i:end] {
		if c == '.' || c == 'e' || c == 'E' {
			return nil, end, false
		}
	}
	return data[i:end], end, true
}

// parseInteger parses plainInteger's text as an int64; false when it is
// out of range.
func parseInteger(text []byte) (int64, bool) {
	if len(text) > 18 { // may not fit: let strconv decide
		v, err := strconv.ParseInt(string(text), 10, 64)
		return v, err == nil
	}
	neg := text[0] == '-'
	if neg {
		text = text[1:]
	}
	var v int64
	for _, c := range text {
		v = v*10 + int64(c-'0')
	}
	if neg {
		v = -v
	}
	return v, true
}

// integerText reads an integer: a JSON number without fraction or
// exponent, or a string holding one (as the general path takes them).
func integerText(data []byte, i int) ([]byte, int, bool) {
	if i >= len(data) || data[i] != '"' {
		return plainInteger(data, i)
	}
	s, end, ok := plainString(data, i)
	if !ok {
		return nil, end, false
	}
	text, n, ok := plainInteger(s, 0)
	return text, end, ok && n == len(s)
}

// number reads a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func number(data []byte, i int) (int, bool) {
	digits := func(j int) int {
		for j < len(data) && data[j] >= '0' && data[j] <= '9' {
			j++
		}
		return j
	}
	if i < len(data) && data[i] == '-' {
		i++
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case i < len(data) && data[i] >= '1' && data[i] <= '9':
		i = digits(i)
	default:
		return i, false
	}
	if i < len(data) && data[i] == '.' {
		j := digits(i + 1)
		if j == i+1 {
			return j, false
		}
		i = j
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		j := digits(i)
		if j == i {
			return j, false
		}
		i = j
	}
	return i, true
}

// maxDepth is encoding/json's nesting limit: deeper values are the general
// path's to refuse.
const maxDepth = 10000

// skipValue returns the index after the JSON value at data[i:], checking
// its syntax (the general path decodes it again when it is used).
func skipValue(data []byte, i int) (int, bool) { return skipNested(data, i, 0) }

func skipNested(data []byte, i, depth int) (int, bool) {
	if i >= len(data) || depth > maxDepth {
		return i, false
	}
	switch c := data[i]; {
	case c == '"':
		for j := i + 1; j < len(data); j++ {
			switch data[j] {
			case '"':
				return j + 1, true
			case '\\':
				j++
				if j >= len(data) {
					return j, false
				}
				switch data[j] {
				case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				case 'u':
					if j+4 >= len(data) {
						return j, false
					}
					for _, h := range data[j+1 : j+5] {
						if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
							return j, false
						}
					}
					j += 4
				default:
					return j, false
				}
			default:
				if data[j] < 0x20 {
					return j, false
				}
			}
		}
		return len(data), false
	case c == '{' || c == '[':
		closing := byte(']')
		if c == '{' {
			closing = '}'
		}
		i = skipSpace(data, i+1)
		if i < len(data) && data[i] == closing {
			return i + 1, true
		}
		for {
			var ok bool
			if c == '{' {
				if i >= len(data) || data[i] != '"' {
					return i, false
				}
				if i, ok = skipNested(data, i, depth+1); !ok {
					return i, false
				}
				if i = skipSpace(data, i); i >= len(data) || data[i] != ':' {
					return i, false
				}
				i = skipSpace(data, i+1)
			}
			if i, ok = skipNested(data, i, depth+1); !ok {
				return i, false
			}
			if i = skipSpace(data, i); i >= len(data) {
				return i, false
			}
			if data[i] == closing {
				return i + 1, true
			}
			if data[i] != ',' {
				return i, false
			}
			i = skipSpace(data, i+1)
		}
	case c == 't':
		return literal(data, i, "true")
	case c == 'f':
		return literal(data, i, "false")
	case c == 'n':
		return literal(data, i, "null")
	}
	return number(data, i)
}
