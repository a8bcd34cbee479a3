package decoder

import (
	"math"
	"time"
)

// Type OIDs of the built-in types the decoder treats specially.
const (
	oidBytea       = 17
	oidText        = 25
	oidJSON        = 114
	oidVarchar     = 1043
	oidTimestamp   = 1114
	oidTimestamptz = 1184
	oidUUID        = 2950
	oidJSONB       = 3802
)

// byteaLen validates Postgres bytea text output (hex "\x..." or the legacy
// escape format) and returns the decoded length.
func byteaLen(s []byte) (int, bool) {
	if len(s) >= 2 && s[0] == '\\' && s[1] == 'x' {
		h := s[2:]
		if len(h)%2 != 0 {
			return 0, false
		}
		for _, c := range h {
			if unhex(c) > 15 {
				return 0, false
			}
		}
		return len(h) / 2, true
	}
	n := 0
	for i := 0; i < len(s); {
		if s[i] != '\\' {
			i++
			n++
			continue
		}
		if i+1 < len(s) && s[i+1] == '\\' {
			i += 2
			n++
			continue
		}
		if i+3 < len(s) && isOct03(s[i+1]) && isOct(s[i+2]) && isOct(s[i+3]) {
			i += 4
			n++
			continue
		}
		return 0, false
	}
	return n, true
}

// decodeBytea appends the bytes of s, which byteaLen accepted, to dst.
func decodeBytea(dst, s []byte) []byte {
	if len(s) >= 2 && s[0] == '\\' && s[1] == 'x' {
		h := s[2:]
		for i := 0; i+1 < len(h); i += 2 {
			dst = append(dst, unhex(h[i])<<4|unhex(h[i+1]))
		}
		return dst
	}
	for i := 0; i < len(s); {
		switch {
		case s[i] != '\\':
			dst = append(dst, s[i])
			i++
		case i+1 < len(s) && s[i+1] == '\\':
			dst = append(dst, '\\')
			i += 2
		case i+3 < len(s):
			dst = append(dst, (s[i+1]-'0')<<6|(s[i+2]-'0')<<3|(s[i+3]-'0'))
			i += 4
		default:
			i++ // not reached for input byteaLen accepted
		}
	}
	return dst
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10
	}
	return 255
}

func isOct(c byte) bool   { return c >= '0' && c <= '7' }
func isOct03(c byte) bool { return c >= '0' && c <= '3' }

// parseTimestamp parses Postgres ISO DateStyle output of timestamptz
// ("2026-11-21 05:40:01.123456+00", offsets like +05:30 or -03:00:00) and of
// timestamp without time zone (no offset: taken as UTC). A 'T' separator and
// a 'Z' suffix (RFC 3339 text) are accepted too. The result is in UTC.
func parseTimestamp(s []byte) (time.Time, bool) {
	// YYYY-MM-DD HH:MM:SS is 19 bytes.
	if len(s) < 19 || s[4] != '-' || s[7] != '-' || (s[10] != ' ' && s[10] != 'T') || s[13] != ':' || s[16] != ':' {
		return time.Time{}, false
	}
	year, ok1 := digits(s[0:4])
	month, ok2 := digits(s[5:7])
	day, ok3 := digits(s[8:10])
	hour, ok4 := digits(s[11:13])
	minute, ok5 := digits(s[14:16])
	sec, ok6 := digits(s[17:19])
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) || year < 1 || month < 1 || month > 12 ||
		day < 1 || day > daysIn(month, year) || hour > 23 || minute > 59 || sec > 59 {
		// Postgres prints 24:00:00 only for time, never for timestamps, and
		// has no leap seconds in output.
		return time.Time{}, false
	}
	i := 19
	nsec := 0
	if i < len(s) && s[i] == '.' {
		i++
		start := i
		scale := 100_000_000
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			if i-start >= 9 {
				return time.Time{}, false
			}
			nsec += int(s[i]-'0') * scale
			scale /= 10
			i++
		}
		if i == start {
			return time.Time{}, false
		}
	}
	offset := 0
	if i < len(s) {
		switch s[i] {
		case 'Z':
			i++
		case '+', '-':
			sign := 1
			if s[i] == '-' {
				sign = -1
			}
			i++
			// ±HH, ±HH:MM or ±HH:MM:SS
			var parts [3]int
			n := 0
			for n < 3 {
				if len(s)-i < 2 {
					return time.Time{}, false
				}
				v, ok := digits(s[i : i+2])
				if !ok {
					return time.Time{}, false
				}
				parts[n] = v
				n++
				i += 2
				if i < len(s) && s[i] == ':' && n < 3 {
					i++
					continue
				}
				break
			}
			if parts[0] > 15 || parts[1] > 59 || parts[2] > 59 {
				return time.Time{}, false
			}
			offset = sign * (parts[0]*3600 + parts[1]*60 + parts[2])
		default:
			return time.Time{}, false
		}
	}
	if i != len(s) {
		return time.Time{}, false
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC)
	if offset != 0 {
		t = t.Add(-time.Duration(offset) * time.Second)
	}
	return t, true
}

func digits(s []byte) (int, bool) {
	v := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}

func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// parsePartition parses a partition number: an integer between 0 and
// math.MaxInt32 written as Postgres prints integer types and JSON writes
// integers (an optional '-', then decimal digits; no '+', spaces, fraction
// or exponent).
func parsePartition(s []byte) (int32, bool) {
	neg := len(s) > 0 && s[0] == '-'
	if neg {
		s = s[1:]
	}
	if len(s) == 0 {
		return 0, false
	}
	v := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
		if v > math.MaxInt32 {
			return 0, false
		}
	}
	if neg && v != 0 {
		return 0, false
	}
	return int32(v), true
}
