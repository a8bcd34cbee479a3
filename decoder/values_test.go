package decoder

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

func TestParseTimestamp(t *testing.T) {
	utc := func(y int, mo time.Month, d, h, mi, s, ns int) time.Time {
		return time.Date(y, mo, d, h, mi, s, ns, time.UTC)
	}
	tests := []struct {
		in   string
		want time.Time
		ok   bool
	}{
		{"2026-11-21 05:40:01.123456+00", utc(2026, 11, 21, 5, 40, 1, 123456000), true},
		{"2026-11-21 05:40:01+00", utc(2026, 11, 21, 5, 40, 1, 0), true},
		{"2026-11-21 05:40:01.1+00", utc(2026, 11, 21, 5, 40, 1, 100000000), true},
		{"2026-11-21 11:10:01.5+05:30", utc(2026, 11, 21, 5, 40, 1, 500000000), true},
		{"2026-11-21 01:40:01-04", utc(2026, 11, 21, 5, 40, 1, 0), true},
		{"2026-11-21 02:10:01-03:30", utc(2026, 11, 21, 5, 40, 1, 0), true},
		{"1900-01-01 05:21:10+05:21:10", utc(1900, 1, 1, 0, 0, 0, 0), true},
		{"2026-11-21 05:40:01.123456", utc(2026, 11, 21, 5, 40, 1, 123456000), true}, // timestamp without time zone
		{"2026-11-21T05:40:01.123456789Z", utc(2026, 11, 21, 5, 40, 1, 123456789), true},
		{"2024-02-29 00:00:00+00", utc(2024, 2, 29, 0, 0, 0, 0), true},
		{"0001-01-01 00:00:00", utc(1, 1, 1, 0, 0, 0, 0), true},
		{"9999-12-31 23:59:59.999999+00", utc(9999, 12, 31, 23, 59, 59, 999999000), true},
		{"2026-11-21 00:00:00+14", utc(2026, 11, 20, 10, 0, 0, 0), true},
		{"2023-02-29 00:00:00+00", time.Time{}, false},
		{"2026-13-01 00:00:00", time.Time{}, false},
		{"2026-00-01 00:00:00", time.Time{}, false},
		{"2026-11-31 00:00:00", time.Time{}, false},
		{"2026-11-21 24:00:00", time.Time{}, false},
		{"2026-11-21 05:60:00", time.Time{}, false},
		{"2026-11-21 05:40:60", time.Time{}, false},
		{"0000-01-01 00:00:00", time.Time{}, false},
		{"infinity", time.Time{}, false},
		{"-infinity", time.Time{}, false},
		{"2026-11-21 05:40:01 BC", time.Time{}, false},
		{"12026-11-21 05:40:01", time.Time{}, false},
		{"2026-11-21 05:40:01.+00", time.Time{}, false},
		{"2026-11-21 05:40:01.1234567890+00", time.Time{}, false},
		{"2026-11-21 05:40:01+5", time.Time{}, false},
		{"2026-11-21 05:40:01+05:", time.Time{}, false},
		{"2026-11-21 05:40:01+05:30:00:00", time.Time{}, false},
		{"2026-11-21 05:40:01+16", time.Time{}, false},
		{"2026-11-21 05:40:01+05:60", time.Time{}, false},
		{"2026-11-21 05:40:01 ", time.Time{}, false},
		{"2026-11-21", time.Time{}, false},
		{"11/21/2026 05:40:01 UTC", time.Time{}, false}, // SQL DateStyle
		{"Sat Nov 21 05:40:01 2026 UTC", time.Time{}, false},
		{"", time.Time{}, false},
	}
	for _, tt := range tests {
		got, ok := parseTimestamp([]byte(tt.in))
		if ok != tt.ok || !got.Equal(tt.want) {
			t.Errorf("parseTimestamp(%q) = %s, %v; want %s, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestBytea(t *testing.T) {
	tests := []struct {
		in   string
		want []byte
		ok   bool
	}{
		{`\x`, []byte{}, true},
		{`\x00ff10`, []byte{0, 0xff, 0x10}, true},
		{`\xAbCd`, []byte{0xab, 0xcd}, true},
		{``, []byte{}, true},
		{`plain`, []byte("plain"), true},
		{`a\\b`, []byte(`a\b`), true},
		{`\000\001\377\177`, []byte{0, 1, 0xff, 0x7f}, true},
		{"\xff\x80", []byte{0xff, 0x80}, true}, // escape format passes high bytes through
		{`\x0`, nil, false},
		{`\xgg`, nil, false},
		{`\x0 `, nil, false},
		{`\`, nil, false},
		{`\4`, nil, false},
		{`\400`, nil, false},
		{`\08`, nil, false},
		{`\018`, nil, false},
		{`a\`, nil, false},
	}
	for _, tt := range tests {
		n, ok := byteaLen([]byte(tt.in))
		if ok != tt.ok {
			t.Errorf("byteaLen(%q) ok = %v, want %v", tt.in, ok, tt.ok)
			continue
		}
		if !ok {
			continue
		}
		got := decodeBytea([]byte{}, []byte(tt.in))
		if n != len(tt.want) || !bytes.Equal(got, tt.want) {
			t.Errorf("bytea %q = %q (len %d), want %q", tt.in, got, n, tt.want)
		}
	}
}

func TestJSONScanner(t *testing.T) {
	docs := []string{
		`{}`, `[]`, `""`, `0`, `-0`, `1.5e-3`, `true`, `false`, `null`, ` {"a" : [ 1 , {"b":null} ] } `,
		`{"a":"\"\\\/\b\f\n\r\t\u00e9"}`, `[1,2,]`, `{"a":1,}`, `{,}`, `[,1]`, `01`, `1.`, `.5`, `-`, `1e`, `1e+`,
		`+1`, `tru`, `nul`, `"abc`, `"\x"`, `"\u12"`, `"\`, `"\u12`, `"\ud800\u12"`, `[1`, `{"a":1`, `{"a"`, `{"a":`, `{"a":1,`, "\"\x1f\"", "\"\x7f\"", `{"a" 1}`, `{1:2}`, `[1 2]`,
		"\t\n\r [ ] \t", "\v[]", `[]]`, `{}}`, ``, ` `,
	}
	for _, doc := range docs {
		i := skipJSONSpace([]byte(doc), 0)
		end, ok := scanJSONValue([]byte(doc), i, 0)
		got := ok && skipJSONSpace([]byte(doc), end) == len(doc)
		if want := json.Valid([]byte(doc)); got != want {
			t.Errorf("valid(%q) = %v, encoding/json says %v", doc, got, want)
		}
	}
	deep := func(n int) []byte {
		return append(bytes.Repeat([]byte("["), n), bytes.Repeat([]byte("]"), n)...)
	}
	deepObject := func(n int) []byte {
		return append(bytes.Repeat([]byte(`{"a":`), n-1), append([]byte("{}"), bytes.Repeat([]byte("}"), n-1)...)...)
	}
	for _, n := range []int{maxJSONDepth, maxJSONDepth + 1} {
		for _, doc := range [][]byte{deep(n), deepObject(n)} {
			_, ok := scanJSONValue(doc, 0, 0)
			if want := json.Valid(doc); ok != want {
				t.Errorf("depth %d %.2s: valid = %v, encoding/json says %v", n, doc, ok, want)
			}
			var d Decoder
			if _, ok := d.parseHeaders(nil, doc); ok != json.Valid(doc) && doc[0] == '{' {
				t.Errorf("depth %d: parseHeaders ok = %v", n, ok)
			}
		}
	}
}

func TestUnescape(t *testing.T) {
	tests := map[string]string{
		`plain`:                 "plain",
		`a\"b\\c\/d`:            `a"b\c/d`,
		`\b\f\n\r\t`:            "\b\f\n\r\t",
		`\u00e9\u20AC`:          "é€",
		`\ud83d\ude00`:          "😀",
		`\ud83d`:                "\uFFFD",
		`\ud83dx`:               "\uFFFDx",
		`\ude00\ud83d`:          "\uFFFD\uFFFD",
		`\ud83d\u0041`:          "\uFFFDA",
		`\ud83d\ud83d\ude00`:    "\uFFFD😀",
		`\u0000`:                "\x00",
		"raw \xff bytes \u00e9": "raw \xff bytes é",
	}
	for in, want := range tests {
		if got := string(appendJSONUnescaped(nil, []byte(in))); got != want {
			t.Errorf("unescape(%q) = %q, want %q", in, got, want)
		}
	}
}
