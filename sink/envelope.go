package sink

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walrelay/walrelay/decoder"
)

// JSONValue makes a table's record values what Debezium's outbox router
// (io.debezium.transforms.outbox.EventRouter, 3.7) writes through Kafka
// Connect's JsonConverter with value.converter.schemas.enable=false:
//
//   - with envelope columns (decoder.Columns.Envelope, the router's
//     table.fields.additional.placement=column:envelope:alias), the value is
//     {"payload":<payload>,"<alias>":<value>,...} in the configured order;
//   - without, it is the payload alone (only with ExpandPayload: a table
//     with neither keeps walrelay's value, the payload as stored).
//
// The payload is its text as a JSON string (a jsonb payload becomes
// "{\"a\": 1}"), or with ExpandPayload (the router's
// table.expand.json.payload=true) the JSON it holds, written as Debezium
// writes it (expandJSON); bytea is base64, SQL NULL null. An envelope with
// a NULL payload is {"payload":null,...}, as the router's default
// route.tombstone.on.empty.payload=false writes it; without an envelope a
// NULL payload stays a tombstone.
type JSONValue struct {
	ExpandPayload bool
}

// ErrEnvelopeValue reports an event whose envelope (or JSON payload) holds
// a value walrelay cannot write as Debezium would (an infinite timestamp, a
// BC date, a payload of a type the envelope does not carry, ...). The relay
// dead-letters the event (reason unsupported_value) or stops.
var ErrEnvelopeValue = errors.New("value the JSON envelope cannot carry")

// encodeJSONValue replaces rec's value by ev's JSON value when its table has
// one (Config.JSONValues). Without JSONValues it costs a length test.
func (s *Sink) encodeJSONValue(ev *decoder.Event, rec *kgo.Record) error {
	if len(s.cfg.JSONValues) == 0 {
		return nil
	}
	jv, ok := s.cfg.JSONValues[ev.Table]
	if !ok {
		return nil
	}
	v, err := jsonRecordValue(ev, jv)
	if err != nil {
		return err
	}
	rec.Value = v
	return nil
}

// jsonRecordValue builds ev's record value for the table's JSONValue jv.
func jsonRecordValue(ev *decoder.Event, jv JSONValue) ([]byte, error) {
	if len(ev.Envelope) == 0 && ev.Payload == nil {
		return nil, nil // a tombstone, as without JSONValue
	}
	n := len(ev.Payload) + 16
	for _, f := range ev.Envelope {
		n += len(f.Name) + len(f.Value) + 8
	}
	dst := make([]byte, 0, n+n/8)
	if len(ev.Envelope) > 0 {
		dst = append(dst, `{"payload":`...)
	}
	dst, err := appendPayload(dst, ev, jv.ExpandPayload)
	if err != nil {
		return nil, err
	}
	if len(ev.Envelope) == 0 {
		return dst, nil
	}
	for _, f := range ev.Envelope {
		dst = append(dst, ',')
		dst = appendJacksonString(dst, []byte(f.Name))
		dst = append(dst, ':')
		if f.Null {
			dst = append(dst, "null"...)
			continue
		}
		if dst, err = appendConnect(dst, f.Type, f.TypeMod, f.Value); err != nil {
			return nil, fmt.Errorf("envelope field %q: %w", f.Name, err)
		}
	}
	return append(dst, '}'), nil
}

// appendPayload appends ev's payload: null, the expanded JSON, or its value
// as its column type's Connect value.
func appendPayload(dst []byte, ev *decoder.Event, expand bool) ([]byte, error) {
	if ev.Payload == nil {
		return append(dst, "null"...), nil
	}
	typ := ev.PayloadType
	if typ == 0 {
		typ = oidJSONB // a tableless event's payload is JSON text
	}
	if expand && connectString(typ) {
		if out, ok := expandJSON(dst, ev.Payload); ok {
			return out, nil
		}
	}
	out, err := appendConnect(dst, typ, -1, ev.Payload)
	if err != nil {
		return nil, fmt.Errorf("payload: %w", err)
	}
	return out, nil
}

// Type OIDs the envelope writes other than as strings.
const (
	oidBool        = 16
	oidBytea       = 17
	oidInt8        = 20
	oidInt2        = 21
	oidInt4        = 23
	oidOID         = 26
	oidFloat4      = 700
	oidFloat8      = 701
	oidDate        = 1082
	oidTime        = 1083
	oidTimestamp   = 1114
	oidTimestamptz = 1184
	oidNumeric     = 1700
	oidJSONB       = 3802
)

// connectString reports whether Debezium's Postgres connector reads a
// column of type oid as a Connect string (text, varchar, char, uuid, json,
// jsonb, xml, inet, cidr, macaddr, user-defined types such as enums).
func connectString(oid uint32) bool {
	switch oid {
	case oidBool, oidBytea, oidInt8, oidInt2, oidInt4, oidOID, oidFloat4, oidFloat8,
		oidDate, oidTime, oidTimestamp, oidTimestamptz, oidNumeric:
		return false
	}
	return decoder.EnvelopeType(oid)
}

// appendConnect appends text, the Postgres text of a value of type oid
// (bytea: the raw bytes) with type modifier mod, as the JsonConverter
// writes the Connect value Debezium's Postgres connector makes of it with
// its defaults (decimal.handling.mode=precise, time.precision.mode=adaptive,
// binary.handling.mode=bytes):
//
//	bool                  true / false
//	int2, int4, int8, oid the number
//	float4, float8        Java's Float/Double.toString ("1.5", "1.0E-5")
//	numeric(p,s)          base64 of the unscaled value's two's complement
//	numeric               {"scale":s,"value":<that base64>}
//	date                  days since 1970-01-01
//	time(p)               since midnight: milliseconds for p <= 3, else microseconds
//	timestamp(p)          since the epoch, as if UTC: milliseconds for p <= 3, else microseconds
//	timestamptz(p)        "2024-05-01T08:00:00.120000Z": UTC, p fraction digits (6 when unset)
//	bytea                 base64
//	anything else         the text as a JSON string
func appendConnect(dst []byte, oid uint32, mod int32, text []byte) ([]byte, error) {
	bad := func(what string) error { return fmt.Errorf("%w: %s %.40q", ErrEnvelopeValue, what, text) }
	switch oid {
	case oidBool:
		switch string(text) {
		case "t":
			return append(dst, "true"...), nil
		case "f":
			return append(dst, "false"...), nil
		}
		return nil, bad("boolean")
	case oidInt2, oidInt4, oidInt8, oidOID:
		if _, err := strconv.ParseInt(string(text), 10, 64); err != nil && oid != oidOID {
			return nil, bad("integer")
		}
		return append(dst, text...), nil
	case oidFloat4, oidFloat8:
		bits := 64
		if oid == oidFloat4 {
			bits = 32
		}
		f, err := strconv.ParseFloat(string(text), bits)
		if err != nil {
			return nil, bad("float")
		}
		return appendJavaDouble(dst, f, bits), nil
	case oidNumeric:
		return appendDecimal(dst, text, mod, bad)
	case oidDate:
		t, err := time.Parse(time.DateOnly, string(text))
		if err != nil {
			return nil, bad("date")
		}
		return strconv.AppendInt(dst, t.Unix()/86400, 10), nil
	case oidTime:
		us, ok := timeMicros(text)
		if !ok {
			return nil, bad("time")
		}
		if mod >= 0 && mod <= 3 {
			return strconv.AppendInt(dst, us/1000, 10), nil
		}
		return strconv.AppendInt(dst, us, 10), nil
	case oidTimestamp, oidTimestamptz:
		t, ok := decoder.ParseTimestamp(text)
		if !ok || t.Year() > 9999 {
			return nil, bad("timestamp")
		}
		if oid == oidTimestamptz {
			return appendZonedTimestamp(dst, t, mod), nil
		}
		us := t.UnixMicro()
		if mod >= 0 && mod <= 3 {
			return strconv.AppendInt(dst, us/1000, 10), nil
		}
		return strconv.AppendInt(dst, us, 10), nil
	case oidBytea:
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, text)
		return append(dst, '"'), nil
	}
	if !decoder.EnvelopeType(oid) {
		return nil, fmt.Errorf("%w: a value of type OID %d", ErrEnvelopeValue, oid)
	}
	return appendJacksonString(dst, text), nil
}

// appendZonedTimestamp writes t as Debezium's ZonedTimestamp: ISO-8601 in
// UTC with as many fraction digits as the column's precision (6 unset).
func appendZonedTimestamp(dst []byte, t time.Time, prec int32) []byte {
	if prec < 0 || prec > 6 {
		prec = 6
	}
	t = t.UTC()
	dst = append(dst, '"')
	dst = t.AppendFormat(dst, "2006-01-02T15:04:05")
	if prec > 0 {
		frac := strconv.AppendInt(nil, int64(t.Nanosecond()/1000)+1_000_000, 10)[1:] // six digits
		dst = append(dst, '.')
		dst = append(dst, frac[:prec]...)
	}
	return append(dst, 'Z', '"')
}

// timeMicros parses Postgres' time text "HH:MM:SS[.ffffff]" (24:00:00
// included) into microseconds since midnight.
func timeMicros(text []byte) (int64, bool) {
	s := string(text)
	if len(s) < 8 || s[2] != ':' || s[5] != ':' {
		return 0, false
	}
	h, err1 := strconv.Atoi(s[0:2])
	m, err2 := strconv.Atoi(s[3:5])
	sec, err3 := strconv.Atoi(s[6:8])
	if err1 != nil || err2 != nil || err3 != nil || h > 24 || m > 59 || sec > 59 {
		return 0, false
	}
	us := int64((h*60+m)*60+sec) * 1_000_000
	if len(s) > 8 {
		if s[8] != '.' || len(s) > 15 || len(s) == 9 {
			return 0, false
		}
		f := s[9:] + "000000"[:6-(len(s)-9)]
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return 0, false
		}
		us += int64(n)
	}
	return us, true
}

// appendDecimal writes numeric text as Debezium's precise decimal: with a
// type modifier (numeric(p,s)) Connect's Decimal at scale s, the base64 of
// the unscaled value's two's complement bytes as Java's
// BigInteger.toByteArray makes them; without, Debezium's
// VariableScaleDecimal {"scale":s,"value":...} at the value's own scale.
// NaN and the infinities are null (Debezium cannot represent them either).
func appendDecimal(dst []byte, text []byte, mod int32, bad func(string) error) ([]byte, error) {
	s := string(text)
	switch s {
	case "NaN", "Infinity", "-Infinity":
		return append(dst, "null"...), nil
	}
	intPart, frac := s, ""
	for i := 0; i < len(s); i++ {
		if s[i] == '.' {
			intPart, frac = s[:i], s[i+1:]
			break
		}
	}
	scale := len(frac)
	if mod >= 4 {
		want := int((mod - 4) & 0xFFFF)
		if want < scale {
			return nil, bad("numeric")
		}
		for scale < want {
			frac += "0"
			scale++
		}
	}
	u, ok := new(big.Int).SetString(intPart+frac, 10)
	if !ok || math.MaxInt32 < scale {
		return nil, bad("numeric")
	}
	b := twosComplement(u)
	if mod >= 4 {
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, b)
		return append(dst, '"'), nil
	}
	dst = append(dst, `{"scale":`...)
	dst = strconv.AppendInt(dst, int64(scale), 10)
	dst = append(dst, `,"value":"`...)
	dst = base64.StdEncoding.AppendEncode(dst, b)
	return append(dst, `"}`...), nil
}

// twosComplement is x as Java's BigInteger.toByteArray: the shortest
// big-endian two's complement, at least one byte.
func twosComplement(x *big.Int) []byte {
	if x.Sign() >= 0 {
		b := x.Bytes()
		if len(b) == 0 || b[0]&0x80 != 0 {
			b = append([]byte{0}, b...)
		}
		return b
	}
	// -x - 1 has the bits of x inverted.
	m := new(big.Int).Neg(x)
	m.Sub(m, big.NewInt(1))
	b := m.Bytes()
	for i := range b {
		b[i] = ^b[i]
	}
	if len(b) == 0 || b[0]&0x80 == 0 {
		b = append([]byte{0xFF}, b...)
	}
	return b
}
