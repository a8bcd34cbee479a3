package sink

import (
	"errors"
	"math"
	"math/big"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walrelay/walrelay/decoder"
)

// The expected values below are what Debezium 3.7.0.Final's outbox EventRouter wrote
// through Kafka Connect 4.3.1's JsonConverter (schemas.enable=false) for the same jsonb
// payloads and column values on Postgres 15; test/debezium_parity_test.go checks the same
// against the running Debezium.

func TestExpandJSONAsDebezium(t *testing.T) {
	cases := []struct {
		name, payload string // the payload as Postgres sends a jsonb column
		want          string // the payload in Debezium's value
	}{
		{"mixed",
			`{"a": 1, "b": 99.90, "c": "x\"y\\z\u0001\u001f", "d": null, "e": [], "f": [1, 2], "g": {"h": true}, "e6": 9999999.0, "e7": 10000000.0, "f2": 1.0, "lg": 12345678.5, "big": 12345678901, "ctl": "\t\n\b\f\r", "del": "` + "\x7f" + `", "neg": 0.0, "sci": 0.00001, "uni": "café 😀", "negi": -42, "tiny": 0.001, "slash": "a/b", "u2028": "` + "\u2028" + `", "arrobj": [{"x": 1}, {"x": 2}]}`,
			`{"a":1,"b":99.9,"c":"x\"y\\z\u0001\u001F","f":[1,2],"g":{"h":true},"e6":9999999.0,"e7":1.0E7,"f2":1.0,"lg":1.23456785E7,"big":12345678901,"ctl":"\t\n\b\f\r","del":"` + "\x7f" + `","neg":0.0,"sci":1.0E-5,"uni":"café \uD83D\uDE00","negi":-42,"tiny":0.001,"slash":"a/b","u2028":"` + "\u2028" + `","arrobj":[{"x":1},{"x":2}]}`},
		{"empty object", `{}`, `{}`},
		{"string", `"just a string"`, `"\"just a string\""`},
		{"number", `42`, `"42"`},
		{"names kept", `{"1x": 3, "ä": 5, "a b": 4, "a-b": 2, "a.b": 1}`, `{"1x":3,"ä":5,"a b":4,"a-b":2,"a.b":1}`},
		{"mixed array", `{"m": [1, "a"]}`, `"{\"m\": [1, \"a\"]}"`},
		{"objects of different shapes", `{"ho": [{"x": 1}, {"y": "b"}, {"x": 3, "y": "c"}]}`, `{"ho":[{"x":1,"y":null},{"x":null,"y":"b"},{"x":3,"y":"c"}]}`},
		{"nested", `{"an": [null, 1], "nested": {"e": {}, "arr": [[1, 2], [3]]}}`, `{"an":[null,1],"nested":{"e":{},"arr":[[1,2],[3]]}}`},
		{"int and double in one array", `{"f": [1.5, 2.25], "mixnum": [1, 2.5]}`, `"{\"f\": [1.5, 2.25], \"mixnum\": [1, 2.5]}"`},
		{"int and long", `{"i": 2147483647, "j": 2147483648, "k": -2147483649, "l": 9223372036854775807}`, `{"i":2147483647,"j":2147483648,"k":-2147483649,"l":9223372036854775807}`},
		// Debezium 3.7.0 fails the record on these two; later versions keep the string.
		{"array", `[1, 2]`, `"[1, 2]"`},
		{"big integer", `{"bigi": 123456789012345678901}`, `"{\"bigi\": 123456789012345678901}"`},
		{"array of nulls", `{"n": [null]}`, `"{\"n\": [null]}"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev := &decoder.Event{Payload: []byte(c.payload), PayloadType: oidJSONB}
			got, err := jsonRecordValue(ev, JSONValue{ExpandPayload: true})
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Errorf("expanded\n  %s\nwant\n  %s", got, c.want)
			}
		})
	}
}

func TestEnvelopeAsDebezium(t *testing.T) {
	// Column values as pgoutput sends them, with their type OID and modifier, and what
	// Debezium's value holds for them.
	fields := []struct {
		name string
		typ  uint32
		mod  int32
		text string
		want string
	}{
		{"E_c_text", 25, -1, `tëxt "q"`, `"tëxt \"q\""`},
		{"E_c_int2", 21, -1, "-5", "-5"},
		{"E_c_int4", 23, -1, "2147483647", "2147483647"},
		{"E_c_int8", 20, -1, "9223372036854775807", "9223372036854775807"},
		{"E_c_bool", 16, -1, "t", "true"},
		{"E_c_float4", 700, -1, "1.5", "1.5"},
		{"E_c_float8", 701, -1, "0.1", "0.1"},
		{"E_c_num", 1700, (10<<16 | 2) + 4, "12.30", `"BM4="`},
		{"E_c_numv", 1700, -1, "1234.5678", `{"scale":4,"value":"ALxhTg=="}`},
		{"E_c_ts", 1114, -1, "2024-05-01 10:00:00.123456", "1714557600123456"},
		{"E_c_ts3", 1114, 3, "2024-05-01 10:00:00.1", "1714557600100"},
		{"E_c_tstz", 1184, -1, "2024-05-01 10:00:00.12+02", `"2024-05-01T08:00:00.120000Z"`},
		{"E_c_tstz0", 1184, 0, "2024-05-01 10:00:01+00", `"2024-05-01T10:00:01Z"`},
		{"E_c_date", 1082, -1, "2024-05-01", "19844"},
		{"E_c_time", 1083, -1, "10:11:12.5", "36672500000"},
		{"E_c_bytea", 17, -1, "\x00\xff\x10", `"AP8Q"`},
		{"E_c_json", 114, -1, `{"j": 1,  "k":[1]}`, `"{\"j\": 1,  \"k\":[1]}"`},
		{"E_c_jsonb", 3802, -1, `{"j": 1, "k": [1]}`, `"{\"j\": 1, \"k\": [1]}"`},
		{"E_c_uuid", 2950, -1, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", `"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"`},
		{"E_c_char", 1042, 9, "ab   ", `"ab   "`},
		{"E_c_varchar", 1043, 24, "vc", `"vc"`},
		{"E_c_null", 25, -1, "", "null"},
		{"E_c_oid", 26, -1, "42", "42"},
		{"E_c_inet", 869, -1, "10.0.0.1/24", `"10.0.0.1/24"`},
		{"E_c_xml", 142, -1, "<a/>", `"<a/>"`},
	}
	ev := &decoder.Event{Payload: []byte(`{"a": 1}`), PayloadType: oidJSONB}
	want := `{"payload":"{\"a\": 1}"`
	for _, f := range fields {
		ef := decoder.EnvelopeField{Name: f.name, Type: f.typ, TypeMod: f.mod, Value: []byte(f.text)}
		if f.want == "null" {
			ef.Value, ef.Null = nil, true
		}
		ev.Envelope = append(ev.Envelope, ef)
		want += `,"` + f.name + `":` + f.want
	}
	want += "}"
	got, err := jsonRecordValue(ev, JSONValue{})
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("envelope\n  %s\nwant\n  %s", got, want)
	}

	// A NULL payload: null in the envelope; a tombstone without one.
	ev.Payload = nil
	if got, _ := jsonRecordValue(ev, JSONValue{ExpandPayload: true}); !strings.HasPrefix(string(got), `{"payload":null,"E_c_text":`) {
		t.Errorf("NULL payload in an envelope: %s", got)
	}
	if got, err := jsonRecordValue(&decoder.Event{PayloadType: oidJSONB}, JSONValue{ExpandPayload: true}); got != nil || err != nil {
		t.Errorf("NULL payload without an envelope: %q, %v; want a tombstone", got, err)
	}
	// A bytea payload is base64, expanded or not.
	if got, _ := jsonRecordValue(&decoder.Event{Payload: []byte("{}"), PayloadType: oidBytea}, JSONValue{ExpandPayload: true}); string(got) != `"e30="` {
		t.Errorf("bytea payload: %s", got)
	}
}

func TestEnvelopeValuesItCannotWrite(t *testing.T) {
	for _, c := range []struct {
		typ  uint32
		mod  int32
		text string
	}{
		{1184, -1, "infinity"}, {1114, -1, "2024-05-01 10:00:00 BC"}, {1082, -1, "-infinity"},
		{16, -1, "yes"}, {23, -1, "x"}, {1700, (5<<16 | 1) + 4, "1.23"}, {1083, -1, "1:2"},
		{1186, -1, "1 day"}, // interval
	} {
		ev := &decoder.Event{Payload: []byte("{}"), PayloadType: oidJSONB,
			Envelope: []decoder.EnvelopeField{{Name: "f", Type: c.typ, TypeMod: c.mod, Value: []byte(c.text)}}}
		if v, err := jsonRecordValue(ev, JSONValue{}); !errors.Is(err, ErrEnvelopeValue) {
			t.Errorf("type %d %q: %s, %v; want ErrEnvelopeValue", c.typ, c.text, v, err)
		}
	}
	// NaN numeric has no Connect decimal: null, as Debezium writes it.
	if got, _ := appendConnect(nil, oidNumeric, -1, []byte("NaN")); string(got) != "null" {
		t.Errorf("numeric NaN: %s", got)
	}
}

func TestJavaDouble(t *testing.T) {
	for _, c := range []struct {
		f    float64
		bits int
		want string
	}{
		{1, 64, "1.0"}, {99.9, 64, "99.9"}, {1e7, 64, "1.0E7"}, {9999999, 64, "9999999.0"}, {1e-3, 64, "0.001"},
		{1e-4, 64, "1.0E-4"}, {12345678.5, 64, "1.23456785E7"}, {-0.0001234, 64, "-1.234E-4"}, {100, 64, "100.0"},
		{math.Copysign(0, -1), 64, "-0.0"}, {0, 64, "0.0"}, {math.MaxFloat64, 64, "1.7976931348623157E308"},
		{5e-324, 64, "4.9E-324"}, {1.5, 32, "1.5"}, {float64(float32(0.1)), 32, "0.1"}, {math.NaN(), 64, `"NaN"`},
		{math.Inf(-1), 64, `"-Infinity"`}, {123456789012345.678, 64, "1.2345678901234567E14"},
	} {
		if got := string(appendJavaDouble(nil, c.f, c.bits)); got != c.want {
			t.Errorf("%v (%d bits): %s, want %s", c.f, c.bits, got, c.want)
		}
	}
}

func TestTwosComplement(t *testing.T) {
	for _, c := range []struct {
		decimal string
		want    []byte
	}{
		{"0", []byte{0}}, {"1230", []byte{0x04, 0xCE}}, {"12345678", []byte{0x00, 0xBC, 0x61, 0x4E}}, {"-1", []byte{0xFF}},
		{"-128", []byte{0x80}}, {"-129", []byte{0xFF, 0x7F}}, {"128", []byte{0x00, 0x80}}, {"-256", []byte{0xFF, 0x00}},
	} {
		ev := decimalBytes(t, c.decimal)
		if string(ev) != string(c.want) {
			t.Errorf("%s: % X, want % X", c.decimal, ev, c.want)
		}
	}
}

func decimalBytes(t *testing.T, s string) []byte {
	t.Helper()
	x, ok := new(big.Int).SetString(s, 10)
	if !ok {
		t.Fatal(s)
	}
	return twosComplement(x)
}

// TestSinkPreparesJSONValues: Prepare gives a table of Config.JSONValues its JSON value
// and leaves other tables' payloads as stored; the dead-letter record keeps the payload.
func TestSinkPreparesJSONValues(t *testing.T) {
	s := &Sink{cfg: Config{JSONValues: map[string]JSONValue{"public.env": {}}}}
	ev := &decoder.Event{Table: "public.env", Payload: []byte(`{"a": 1}`), PayloadType: oidJSONB,
		Envelope: []decoder.EnvelopeField{{Name: "type", Type: 25, Value: []byte("OrderCreated")}}}
	rec := &kgo.Record{Value: ev.Payload}
	if err := s.encodeJSONValue(ev, rec); err != nil || string(rec.Value) != `{"payload":"{\"a\": 1}","type":"OrderCreated"}` {
		t.Errorf("envelope table: %s, %v", rec.Value, err)
	}
	other := &decoder.Event{Table: "public.plain", Payload: []byte(`{"a": 1}`)}
	rec = &kgo.Record{Value: other.Payload}
	if err := s.encodeJSONValue(other, rec); err != nil || string(rec.Value) != `{"a": 1}` {
		t.Errorf("other table: %s, %v", rec.Value, err)
	}
}
