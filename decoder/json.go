package decoder

import (
	"unicode/utf16"
	"unicode/utf8"
)

// A small, allocation-free JSON scanner: just enough to validate a document
// (RFC 8259 grammar, as encoding/json.Valid accepts it), walk the members of a
// top-level object and unescape strings. It never builds a tree.

// maxJSONDepth matches encoding/json's nesting limit.
const maxJSONDepth = 10000

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipJSONSpace(b []byte, i int) int {
	for i < len(b) && isJSONSpace(b[i]) {
		i++
	}
	return i
}

// scanJSONValue validates the value starting at b[i] (no leading space) and
// returns the index just past it.
func scanJSONValue(b []byte, i, depth int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch c := b[i]; {
	case c == '"':
		end, _, ok := scanJSONString(b, i)
		return end, ok
	case c == '{':
		return scanJSONObject(b, i, depth+1)
	case c == '[':
		return scanJSONArray(b, i, depth+1)
	case c == 't':
		return scanJSONLiteral(b, i, "true")
	case c == 'f':
		return scanJSONLiteral(b, i, "false")
	case c == 'n':
		return scanJSONLiteral(b, i, "null")
	case c == '-' || (c >= '0' && c <= '9'):
		return scanJSONNumber(b, i)
	}
	return 0, false
}

func scanJSONLiteral(b []byte, i int, lit string) (int, bool) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return 0, false
	}
	return i + len(lit), true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func scanJSONNumber(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return 0, false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return 0, false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	return i, true
}

// scanJSONString validates the string whose opening quote is at b[i] and
// returns the index just past the closing quote and whether it contains
// escapes.
func scanJSONString(b []byte, i int) (end int, escaped, ok bool) {
	i++
	for i < len(b) {
		c := b[i]
		if jsonPlain[c] {
			i++
			continue
		}
		switch {
		case c == '"':
			return i + 1, escaped, true
		case c == '\\':
			escaped = true
			if i+1 >= len(b) {
				return 0, false, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if len(b)-i < 6 || unhex(b[i+2])|unhex(b[i+3])|unhex(b[i+4])|unhex(b[i+5]) > 15 {
					return 0, false, false
				}
				i += 6
			default:
				return 0, false, false
			}
		default: // control character
			return 0, false, false
		}
	}
	return 0, false, false
}

func scanJSONObject(b []byte, i, depth int) (int, bool) {
	if depth > maxJSONDepth {
		return 0, false
	}
	i++
	for first := true; ; first = false {
		_, next, done, ok := nextJSONMember(b, i, first, depth)
		if !ok {
			return 0, false
		}
		if done {
			return next, true
		}
		i = next
	}
}

func scanJSONArray(b []byte, i, depth int) (int, bool) {
	if depth > maxJSONDepth {
		return 0, false
	}
	i = skipJSONSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, true
	}
	for {
		end, ok := scanJSONValue(b, i, depth)
		if !ok {
			return 0, false
		}
		i = skipJSONSpace(b, end)
		if i >= len(b) {
			return 0, false
		}
		switch b[i] {
		case ']':
			return i + 1, true
		case ',':
			i = skipJSONSpace(b, i+1)
		default:
			return 0, false
		}
	}
}

// jsonPlain marks the bytes that stand for themselves inside a JSON string.
var jsonPlain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// jsonMember is one member of an object: the key's raw bytes between the
// quotes and the value's raw bytes, both aliasing the document.
type jsonMember struct {
	key        []byte
	keyEscaped bool
	value      []byte
	// valueEscaped reports a string value with escapes.
	valueEscaped bool
}

// nextJSONMember reads the next member of the object being walked; i is just
// past the '{' (first) or just past the previous member's value. done
// reports the closing brace, next is then just past it.
func nextJSONMember(b []byte, i int, first bool, depth int) (m jsonMember, next int, done, ok bool) {
	i = skipJSONSpace(b, i)
	if i >= len(b) {
		return m, 0, false, false
	}
	if b[i] == '}' {
		return m, i + 1, true, true
	}
	if !first {
		if b[i] != ',' {
			return m, 0, false, false
		}
		i = skipJSONSpace(b, i+1)
		if i >= len(b) {
			return m, 0, false, false
		}
	}
	if b[i] != '"' {
		return m, 0, false, false
	}
	kend, esc, ok := scanJSONString(b, i)
	if !ok {
		return m, 0, false, false
	}
	m.key, m.keyEscaped = b[i+1:kend-1], esc
	i = skipJSONSpace(b, kend)
	if i >= len(b) || b[i] != ':' {
		return m, 0, false, false
	}
	i = skipJSONSpace(b, i+1)
	var vend int
	if i < len(b) && b[i] == '"' {
		vend, m.valueEscaped, ok = scanJSONString(b, i)
	} else {
		vend, ok = scanJSONValue(b, i, depth)
	}
	if !ok {
		return m, 0, false, false
	}
	m.value = b[i:vend]
	return m, vend, false, true
}

// jsonObject iterates over the members of a JSON document that must be an
// object (surrounding space allowed). Use: it := newJSONObject(b); for
// it.next() { ... it.m ... }; then it.ok reports whether the whole document
// was a valid object.
type jsonObject struct {
	b     []byte
	i     int
	first bool
	m     jsonMember
	ok    bool
	done  bool
}

func newJSONObject(b []byte) jsonObject {
	i := skipJSONSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return jsonObject{done: true}
	}
	return jsonObject{b: b, i: i + 1, first: true}
}

func (o *jsonObject) next() bool {
	if o.done {
		return false
	}
	m, next, done, ok := nextJSONMember(o.b, o.i, o.first, 1)
	o.first = false
	if !ok {
		o.done = true
		return false
	}
	o.i = next
	if done {
		o.done = true
		o.ok = skipJSONSpace(o.b, next) == len(o.b)
		return false
	}
	o.m = m
	return true
}

// isJSONNull reports whether the document is the literal null.
func isJSONNull(b []byte) bool {
	i := skipJSONSpace(b, 0)
	end, ok := scanJSONLiteral(b, i, "null")
	return ok && skipJSONSpace(b, end) == len(b)
}

// appendJSONUnescaped appends the unescaped form of s, the validated bytes
// between the quotes of a JSON string, to dst. Like encoding/json, it
// replaces unpaired surrogate escapes with U+FFFD; unlike it, it keeps
// invalid UTF-8 bytes as they are.
func appendJSONUnescaped(dst, s []byte) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		if c != '\\' {
			// copy the run up to the next escape at once
			j := i + 1
			for j < len(s) && s[j] != '\\' {
				j++
			}
			dst = append(dst, s[i:j]...)
			i = j
			continue
		}
		if i+1 >= len(s) {
			return dst // not reached for validated input
		}
		switch s[i+1] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := hex4(s[i+2:])
			if !ok {
				return dst
			}
			i += 6
			if utf16.IsSurrogate(r) {
				if len(s)-i >= 6 && s[i] == '\\' && s[i+1] == 'u' {
					if r2, ok := hex4(s[i+2:]); ok {
						if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
							dst = utf8.AppendRune(dst, dec)
							i += 6
							continue
						}
					}
				}
				r = utf8.RuneError
			}
			dst = utf8.AppendRune(dst, r)
			continue
		default: // '"', '\\', '/'
			dst = append(dst, s[i+1])
		}
		i += 2
	}
	return dst
}

func hex4(s []byte) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range s[:4] {
		v := unhex(c)
		if v > 15 {
			return 0, false
		}
		r = r<<4 | rune(v)
	}
	return r, true
}

// appendJSONString appends the value of a JSON string token (with quotes),
// unescaped, to dst.
func appendJSONString(dst, tok []byte, escaped bool) []byte {
	inner := tok[1 : len(tok)-1]
	if !escaped {
		return append(dst, inner...)
	}
	return appendJSONUnescaped(dst, inner)
}
