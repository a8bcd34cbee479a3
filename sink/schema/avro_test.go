package schema

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
)

const orderAvsc = `{"type":"record","name":"Order","namespace":"shop","fields":[
 {"name":"id","type":"string"},
 {"name":"qty","type":"long"},
 {"name":"count","type":"int"},
 {"name":"total","type":"double"},
 {"name":"ratio","type":"float","default":0.5},
 {"name":"paid","type":"boolean"},
 {"name":"note","type":["null","string"],"default":null},
 {"name":"choice","type":["null","string","long"]},
 {"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW","PAID"]}},
 {"name":"tags","type":{"type":"array","items":"string"}},
 {"name":"attrs","type":{"type":"map","values":"long"},"default":{}},
 {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
 {"name":"cost","type":{"type":"fixed","name":"Cost","size":8,"logicalType":"decimal","precision":12,"scale":3}},
 {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
 {"name":"at_us","type":{"type":"long","logicalType":"timestamp-micros"}},
 {"name":"epoch","type":{"type":"long","logicalType":"timestamp-millis"}},
 {"name":"local","type":{"type":"long","logicalType":"local-timestamp-millis"}},
 {"name":"day","type":{"type":"int","logicalType":"date"}},
 {"name":"clock","type":{"type":"int","logicalType":"time-millis"}},
 {"name":"ref","type":{"type":"string","logicalType":"uuid"}},
 {"name":"raw","type":"bytes","default":"\u00ff\u0001"},
 {"name":"hash","type":{"type":"fixed","name":"Hash","size":2}},
 {"name":"address","type":{"type":"record","name":"Address","fields":[
   {"name":"city","type":"string"},{"name":"zip","type":["null","string"],"default":null}]}},
 {"name":"shipping","type":["null","Address"],"default":null},
 {"name":"origin","type":"Address","default":{"city":"Paris"}},
 {"name":"level","type":"int","default":3}
]}`

// The payload as the outbox row holds it (jsonb text): Postgres numbers,
// RFC 3339 times as to_json writes them, a 64-bit integer beyond float64.
const orderJSON = `{"id":"o-1","qty":9007199254740993,"count":"42","total":99.90,"paid":true,
 "choice":{"long":7},"status":"PAID","tags":["a","b"],"attrs":{"x":1},
 "price":99.90,"cost":"-12.5","at":"2024-03-01T10:20:30.123456+01:00","at_us":"2024-03-01T09:20:30.123456Z",
 "epoch":1709284830123,"local":"2024-03-01T10:20:30.5","day":"2024-03-01","clock":"10:20:30.250",
 "ref":"4bf92f35-77b3-4da6-a3ce-929d0e0e4736","hash":"\u00ab\u00cd",
 "address":{"city":"Lyon","zip":"69001"},"shipping":{"city":"Nice"}}`

// TestAvroRoundTrip encodes the row's JSON with a registered .avsc and reads
// the record back with hamba/avro's decoder from the same schema text: every
// value as the row held it, unions picked by value or by the JSON encoding's
// wrapper, logical types converted, missing fields from their defaults.
func TestAvroRoundTrip(t *testing.T) {
	reg := newFakeRegistry(t)
	file := writeFile(t, t.TempDir(), "order.avsc", orderAvsc)
	e := newEncoder(t, reg.URL(), Rule{Table: "public.outbox", Value: Binding{File: file}})
	val, key, err := e.Encode(ctx(t), Target{Topic: "orders", Table: "public.outbox", EventType: "OrderCreated"}, []byte(orderJSON), []byte("o-1"))
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	if string(key) != "o-1" {
		t.Fatalf("key %q: a rule without a key schema keeps the key", key)
	}
	ss, ok := reg.GetSchema("orders-value", 1)
	if !ok {
		t.Fatal("subject orders-value was not registered")
	}
	id, body, err := (&sr.ConfluentHeader{}).DecodeID(val)
	if err != nil || id != ss.ID || val[0] != 0 || binary.BigEndian.Uint32(val[1:5]) != uint32(ss.ID) {
		t.Fatalf("header % x: id %d, %v; want magic 0 and id %d", val[:5], id, err, ss.ID)
	}
	schema := avro.MustParse(orderAvsc)
	var got map[string]any
	if err := avro.Unmarshal(schema, body, &got); err != nil {
		t.Fatalf("decode: %v", err)
	}
	at := time.Date(2024, 3, 1, 9, 20, 30, 123000000, time.UTC)
	want := map[string]any{
		"id": "o-1", "qty": int64(9007199254740993), "count": 42, "total": 99.90, "ratio": float32(0.5), "paid": true,
		"note": nil, "choice": int64(7), "status": "PAID", "tags": []any{"a", "b"},
		"attrs": map[string]any{"x": int64(1)}, "price": big.NewRat(9990, 100), "cost": big.NewRat(-12500, 1000),
		"at": at, "at_us": at.Add(456 * time.Microsecond), "epoch": at,
		"local": time.Date(2024, 3, 1, 10, 20, 30, 500000000, time.UTC), "day": time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC),
		"clock": 10*time.Hour + 20*time.Minute + 30*time.Second + 250*time.Millisecond,
		"ref":   "4bf92f35-77b3-4da6-a3ce-929d0e0e4736", "raw": []byte{0xff, 0x01}, "hash": [2]byte{0xab, 0xcd},
		"address":  map[string]any{"city": "Lyon", "zip": "69001"},
		"shipping": map[string]any{"shop.Address": map[string]any{"city": "Nice", "zip": nil}},
		"origin":   map[string]any{"city": "Paris", "zip": nil}, "level": 3,
	}
	for k, w := range want {
		g := got[k]
		if wr, ok := w.(*big.Rat); ok {
			if gr, ok := g.(*big.Rat); !ok || gr.Cmp(wr) != 0 {
				t.Errorf("%s = %v, want %v", k, g, wr.FloatString(3))
			}
			continue
		}
		if wt, ok := w.(time.Time); ok {
			if gt, ok := g.(time.Time); !ok || !gt.Equal(wt) {
				t.Errorf("%s = %v, want %v", k, g, wt)
			}
			continue
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("%s = %#v, want %#v", k, g, w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("decoded %d fields, want %d", len(got), len(want))
	}
}

// TestAvroMismatch: a payload that does not fit is refused with a message
// naming the field and the reason, wrapping ErrMismatch.
func TestAvroMismatch(t *testing.T) {
	reg := newFakeRegistry(t)
	const avsc = `{"type":"record","name":"R","fields":[{"name":"n","type":"int"},
	 {"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":4,"scale":2},"default":"\u0000"},
	 {"name":"t","type":{"type":"long","logicalType":"timestamp-millis"},"default":0},
	 {"name":"e","type":{"type":"enum","name":"E","symbols":["A"]},"default":"A"},
	 {"name":"u","type":["null","string"],"default":null},
	 {"name":"b","type":"bytes","default":""},
	 {"name":"f","type":"float","default":0}]}`
	file := writeFile(t, t.TempDir(), "r.avsc", avsc)
	e := newEncoder(t, reg.URL(), Rule{Table: "public.outbox", Value: Binding{File: file}})
	for _, tc := range []struct{ payload, want string }{
		{`{"n":"x"}`, `n: "x" is not an integer`},
		{`{"n":1.5}`, `n: 1.5 is not an integer`},
		{`{"n":"1.5"}`, `n: "1.5" is not an integer`},
		{`{"n":2147483648}`, "n: 2147483648 is out of range"},
		{`{}`, `n: missing field "n"`},
		{`{"n":1,"extra":2}`, `record R has no field "extra"`},
		{`{"n":1,"d":1.234}`, "d: 1.234 has more than 2 fraction digits"},
		{`{"n":1,"d":"123.4"}`, "d: 123.4 has more than 4 digits"},
		{`{"n":1,"t":"yesterday"}`, `t: "yesterday" is not an RFC 3339 timestamp`},
		{`{"n":1,"e":"B"}`, `e: "B" is not a symbol of enum E`},
		{`{"n":1,"u":5}`, "u: the number 5 fits no branch of the union [null string]"},
		{`{"n":1,"b":"€"}`, "b: code point U+20AC is not a byte"},
		{`{"n":1,"f":1e40}`, "f: 1e40 is out of range for float"},
		{`{"n":1} {}`, "not JSON: data after the first value"},
		{`{"n":`, "not JSON"},
		{`[1]`, "the value: got an array, want an object (record R)"},
	} {
		_, _, err := e.Encode(ctx(t), Target{Topic: "t", Table: "public.outbox"}, []byte(tc.payload), []byte("k"))
		if !errors.Is(err, ErrMismatch) {
			t.Errorf("%s: error %v, want ErrMismatch", tc.payload, err)
			continue
		}
		wantErr(t, err, tc.want, `subject "t-value"`)
	}
}

// A top-level union takes the plain object; fixed and enum fields take their
// defaults.
func TestAvroTopLevelUnionAndDefaults(t *testing.T) {
	reg := newFakeRegistry(t)
	const sch = `["null",{"type":"record","name":"P","fields":[{"name":"x","type":"long"},
	 {"name":"h","type":{"type":"fixed","name":"H","size":2},"default":"ab"},
	 {"name":"e","type":{"type":"enum","name":"E","symbols":["A","B"]},"default":"B"}]}]`
	file := writeFile(t, t.TempDir(), "u.avsc", sch)
	e := newEncoder(t, reg.URL(), Rule{Table: "public.outbox", Value: Binding{File: file}})
	v, _, err := e.Encode(ctx(t), Target{Topic: "t", Table: "public.outbox"}, []byte(`{"x":5}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got any
	if err := avro.Unmarshal(avro.MustParse(sch), v[5:], &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"P": map[string]any{"x": int64(5), "h": [2]byte{'a', 'b'}, "e": "B"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %#v, want %#v", got, want)
	}
}

// TestAvroMapBytesDeterministic: a map is written in key order, so the same
// payload encodes to the same bytes every time (the live record, its replay
// and its redrive are byte for byte the same), nested maps and maps in
// arrays and unions included, and the bytes read back as the map.
func TestAvroMapBytesDeterministic(t *testing.T) {
	const avsc = `{"type":"record","name":"Tally","namespace":"test","fields":[
	 {"name":"counts","type":{"type":"map","values":"long"}},
	 {"name":"nested","type":{"type":"map","values":{"type":"map","values":"string"}}},
	 {"name":"many","type":{"type":"array","items":{"type":"map","values":"int"}}},
	 {"name":"maybe","type":["null",{"type":"map","values":"boolean"}]},
	 {"name":"big","type":{"type":"map","values":"long"}}]}`
	var payload strings.Builder
	payload.WriteString(`{"counts":{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8},"nested":{"x":{"p":"1","q":"2","r":"3"},"y":{"s":"4","t":"5"}},`)
	payload.WriteString(`"many":[{"k1":1,"k2":2,"k3":3},{}],"maybe":{"map":{"on":true,"off":false,"maybe":true}},"big":{`)
	for i := range 250 { // more than one block
		if i > 0 {
			payload.WriteByte(',')
		}
		fmt.Fprintf(&payload, `"key%03d":%d`, i, i)
	}
	payload.WriteString(`}}`)

	reg := newFakeRegistry(t)
	file := writeFile(t, t.TempDir(), "tally.avsc", avsc)
	e := newEncoder(t, reg.URL(), Rule{Table: "public.outbox", Value: Binding{File: file}})
	target := Target{Topic: "tallies", Table: "public.outbox", EventType: "Counted"}
	first, _, err := e.Encode(ctx(t), target, []byte(payload.String()), []byte("t-1"))
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	differ := 0
	for range 50 {
		again, _, err := e.Encode(ctx(t), target, []byte(payload.String()), []byte("t-1"))
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		if !bytes.Equal(again, first) {
			differ++
		}
	}
	if differ > 0 {
		t.Fatalf("%d of 50 encodings of the same payload differ from the first", differ)
	}
	_, body, err := (&sr.ConfluentHeader{}).DecodeID(first)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := avro.Unmarshal(avro.MustParse(avsc), body, &got); err != nil {
		t.Fatalf("decode: %v", err)
	}
	var want map[string]any
	if err := json.Unmarshal([]byte(payload.String()), &want); err != nil {
		t.Fatal(err)
	}
	if g, w := fmt.Sprint(got), fmt.Sprint(normalize(want)); g != w {
		t.Fatalf("decoded %s\nwant    %s", g, w)
	}
}

// normalize makes decoded JSON comparable with hamba/avro's decoding of
// TestAvroMapBytesDeterministic's schema: numbers as integers (the union's
// JSON wrapper is also hamba/avro's decoded form).
func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			out[k] = normalize(e)
		}
		return out
	case []any:
		for i := range x {
			x[i] = normalize(x[i])
		}
		return x
	case float64:
		return int64(x)
	}
	return v
}
