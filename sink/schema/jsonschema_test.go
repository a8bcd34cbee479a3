package schema

import (
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
)

const addressJSONSchema = `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`

const orderJSONSchema = `{"$schema":"http://json-schema.org/draft-07/schema#","title":"shop.Order","type":"object",
 "properties":{"id":{"type":"string"},"total":{"type":"number","minimum":0},"ship":{"$ref":"address.json"}},
 "required":["id","total"],"additionalProperties":false}`

// TestJSONSchema: a payload that fits goes out as the row's JSON, byte for
// byte after the header; $refs resolve to referenced subjects; one that does
// not fit is a mismatch with the validator's message on one line.
func TestJSONSchema(t *testing.T) {
	reg := newFakeRegistry(t)
	if _, _, err := reg.RegisterSchema("address", sr.Schema{Schema: addressJSONSchema, Type: sr.TypeJSON}); err != nil {
		t.Fatal(err)
	}
	file := writeFile(t, t.TempDir(), "order.json", orderJSONSchema)
	e := newEncoder(t, reg.URL(), Rule{Table: "public.outbox", Value: Binding{File: file, Strategy: StrategyRecord,
		References: []Reference{{Name: "address.json", Subject: "address", Version: 1}}}})
	payload := `{"id": "o-1", "total": 12.50, "ship": {"city": "Lyon"}}`
	val, _, err := e.Encode(ctx(t), Target{Topic: "orders", Table: "public.outbox"}, []byte(payload), nil)
	if err != nil {
		t.Fatal(err)
	}
	ss, ok := reg.GetSchema("shop.Order", 1)
	if !ok {
		t.Fatal("subject shop.Order (the title, record strategy) not registered")
	}
	id, body, err := (&sr.ConfluentHeader{}).DecodeID(val)
	if err != nil || id != ss.ID || string(body) != payload {
		t.Fatalf("id %d body %q (%v); want id %d and the payload as stored", id, body, err, ss.ID)
	}
	for _, tc := range []struct{ payload, want string }{
		{`{"id": 1, "total": 2}`, "at '/id': got number, want string"},
		{`{"id": "o", "total": -1}`, "at '/total': minimum"},
		{`{"id": "o", "total": 1, "x": 1}`, "additional properties 'x' not allowed"},
		{`{"id": "o", "total": 1, "ship": {}}`, "at '/ship': missing property 'city'"},
		{`not json`, "not JSON"},
	} {
		_, _, err := e.Encode(ctx(t), Target{Topic: "orders", Table: "public.outbox"}, []byte(tc.payload), nil)
		if !errors.Is(err, ErrMismatch) {
			t.Fatalf("%s: error %v, want ErrMismatch", tc.payload, err)
		}
		wantErr(t, err, tc.want)
		for _, c := range err.Error() {
			if c == '\n' {
				t.Fatalf("%s: message %q spans lines", tc.payload, err)
			}
		}
	}
}

// TestJSONSchemaEnumNullPrintedAsNull: an enum that allows null names it null, as JSON
// does, not Go's <nil>.
func TestJSONSchemaEnumNullPrintedAsNull(t *testing.T) {
	c, err := compileJSON(`{"type":"object","properties":{"a":{"enum":["x",null]}}}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.encode(nil, []byte(`{"a":"y"}`))
	if err == nil || strings.Contains(err.Error(), "<nil>") || !strings.Contains(err.Error(), "'x', null") {
		t.Errorf("enum mismatch: %v, want the values 'x', null", err)
	}
}
