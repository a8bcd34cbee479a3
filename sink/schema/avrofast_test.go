package schema

import (
	"bytes"
	"strings"
	"testing"
)

// fastCases are schemas and payloads for the fast path's tests. fast lists
// the payloads the fast path must take on its own (the common shapes: the
// optimization is real); every other payload may go either way.
var fastCases = []struct {
	name, schema string
	fast         []string
	other        []string
}{
	{"order", orderAvsc, []string{orderJSON}, []string{
		strings.Replace(orderJSON, `"id":"o-1"`, `"id":"o-\"1\""`, 1), // an escape: the general path
		strings.Replace(orderJSON, `"qty":9007199254740993`, `"qty":"12"`, 1),
		strings.Replace(orderJSON, `"qty":9007199254740993`, `"qty":1.5`, 1), // a mismatch
		strings.Replace(orderJSON, `"id":"o-1",`, ``, 1),                     // a required field missing
		strings.Replace(orderJSON, `"id":"o-1"`, `"id":"o-1","id":"o-2"`, 1), // given twice: the last wins
		strings.Replace(orderJSON, `"id":"o-1"`, `"id":"o-1","extra":1`, 1),  // not a field
		strings.Replace(orderJSON, `"status":"PAID"`, `"status":"GONE"`, 1),
		orderJSON + " x",
	}},
	{"bench", `{"type":"record","name":"BenchEvent","namespace":"walrelay.bench","fields":[{"name":"seq","type":"long"},{"name":"pad","type":"string"}]}`,
		[]string{`{"pad": "ab12", "seq": 123456}`, " \n{\"seq\":-0,\"pad\":\"\"}\t", `{"pad": "é ü ✓", "seq": -9223372036854775808}`},
		[]string{`{"pad": "ab", "seq": 9223372036854775808}`, `{"pad": "ab", "seq": 01}`, `{"pad": "ab", "seq": 1e3}`, `{"pad": "\u00e9", "seq": 1}`,
			`{"pad": "ab", "seq": 1,}`, `{"pad": "ab" "seq": 1}`, `{"pad": "a` + "\x01" + `b", "seq": 1}`, `{"pad": "` + "\xff" + `", "seq": 1}`, `[1]`, `null`, ``}},
	{"typical", benchOrderAvsc, []string{benchOrderJSON}, nil},
	{"scalars", `{"type":"record","name":"S","fields":[{"name":"i","type":"int"},{"name":"f","type":"float"},{"name":"d","type":"double"},
	  {"name":"b","type":"boolean"},{"name":"n","type":"null"},{"name":"u","type":["string","null"]},{"name":"w","type":["null","string","long"],"default":null}]}`,
		[]string{`{"i":-2147483648,"f":1.5e-3,"d":-0.0,"b":false,"n":null,"u":null,"w":"x"}`, `{"i":7,"f":3,"d":1E+300,"b":true,"n":null,"u":"s"}`},
		[]string{`{"i":2147483648,"f":1,"d":1,"b":true,"n":null,"u":"s"}`, `{"i":1,"f":1e39,"d":1,"b":true,"n":null,"u":"s"}`,
			`{"i":1,"f":1,"d":1,"b":true,"n":null,"u":"s","w":5}`, `{"i":1,"f":1,"d":1,"b":true,"n":null,"u":"s","w":{"long":5}}`,
			`{"i":1,"f":1,"d":1,"b":1,"n":null,"u":"s"}`, `{"i":1,"f":1,"d":1,"b":true,"n":0,"u":"s"}`}},
	{"decimals", `{"type":"record","name":"D","fields":[{"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":6,"scale":2}}]}`,
		[]string{`{"d":99.90}`, `{"d":-12.5}`, `{"d":0}`, `{"d":"-0.01"}`, `{"d":-1.28}`, `{"d":1.28}`, `{"d":9999.99}`, `{"d":-9999.99}`, `{"d":1e2}`, `{"d":-327.68}`},
		[]string{`{"d":10000}`, `{"d":0.001}`, `{"d":"1/2"}`, `{"d":" 5"}`, `{"d":"x"}`, `{"d":true}`, `{"d":"\u0035"}`}},
	{"arrays", `{"type":"record","name":"A","fields":[{"name":"longs","type":{"type":"array","items":"long"}},
	  {"name":"nulls","type":{"type":"array","items":"null"}},{"name":"recs","type":{"type":"array","items":{"type":"record","name":"R","fields":[{"name":"x","type":"string"}]}}}]}`,
		[]string{`{"longs":` + jsonArray(250, "7") + `,"nulls":` + jsonArray(150, "null") + `,"recs":` + jsonArray(101, `{"x":"y"}`) + `}`,
			`{"longs":[],"nulls":[],"recs":[ ]}`, `{"longs":[1],"nulls":[null],"recs":[{"x":""}]}`},
		[]string{`{"longs":[1,],"nulls":[],"recs":[]}`, `{"longs":[1 2],"nulls":[],"recs":[]}`}},
	{"recursive", `{"type":"record","name":"Node","fields":[{"name":"v","type":"long"},{"name":"next","type":["null","Node"],"default":null}]}`,
		[]string{`{"v":1}`, `{"v":1,"next":null}`}, []string{`{"v":1,"next":{"v":2,"next":{"v":3}}}`}},
	{"deep", `{"type":"record","name":"T","fields":[{"name":"kids","type":{"type":"array","items":"T"}}]}`,
		[]string{`{"kids":[{"kids":[]},{"kids":[{"kids":[]}]}]}`},
		[]string{strings.Repeat(`{"kids":[`, 6000) + strings.Repeat(`]}`, 6000), `{"kids":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`}},
}

func jsonArray(n int, item string) string {
	return "[" + strings.TrimSuffix(strings.Repeat(item+",", n), ",") + "]"
}

// TestAvroFastPath: what the fast path writes is byte for byte what the
// general path (decodeJSON, toAvro, hamba/avro) writes for the same
// payload, and it writes nothing the general path refuses; it takes the
// common shapes on its own.
func TestAvroFastPath(t *testing.T) {
	for _, tc := range fastCases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseAvro(tc.schema, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range tc.fast {
				if _, ok := c.fast.encodeFast(nil, []byte(p)); !ok {
					t.Errorf("the fast path gave up on %.120s", p)
				}
			}
			for _, p := range append(append([]string(nil), tc.fast...), tc.other...) {
				checkFastPath(t, c, []byte(p))
			}
		})
	}
}

// checkFastPath fails t when the fast path wrote data other than the
// general path would, or wrote data the general path refuses.
func checkFastPath(t *testing.T, c *avroCodec, data []byte) {
	t.Helper()
	prefix := []byte{0, 0, 0, 0, 7}
	fast, ok := c.fast.encodeFast(bytes.Clone(prefix), data)
	general, err := c.encodeGeneral(bytes.Clone(prefix), data)
	switch {
	case !ok:
	case err != nil:
		t.Errorf("%.120s: the fast path wrote %x, the general path refuses it: %v", data, fast, err)
	case !bytes.Equal(fast, general):
		t.Errorf("%.120s:\nfast    %x\ngeneral %x", data, fast, general)
	}
}

// FuzzAvroFastPath: for any payload, the fast path writes what the general
// path writes, or gives up.
func FuzzAvroFastPath(f *testing.F) {
	var codecs []*avroCodec
	for _, tc := range fastCases {
		c, err := parseAvro(tc.schema, nil)
		if err != nil {
			f.Fatal(err)
		}
		codecs = append(codecs, c)
		for _, p := range append(append([]string(nil), tc.fast...), tc.other...) {
			f.Add(uint8(len(codecs)-1), []byte(p))
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		checkFastPath(t, codecs[int(which)%len(codecs)], data)
	})
}
