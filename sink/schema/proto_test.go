package schema

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/bufbuild/protocompile"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

const moneyProto = `syntax = "proto3";
package shop.common;
message Money { string currency = 1; int64 units = 2; }
`

const ordersProto = `syntax = "proto3";
package shop;
import "shop/common/money.proto";
import "google/protobuf/timestamp.proto";

message Order {
  message Item { string sku = 1; int32 count = 2; }
  enum Status { NEW = 0; PAID = 1; }
  string id = 1;
  int64 qty = 2;
  double total = 3;
  repeated Item items = 4;
  shop.common.Money amount = 5;
  Status status = 6;
  google.protobuf.Timestamp at = 7;
  map<string, string> attrs = 8;
}

message Refund { string order_id = 1; int64 cents = 2; }
`

// decodeProto reads a framed record with an independent decoder: the header
// and indexes with sr.ConfluentHeader, the body with dynamicpb over a
// descriptor compiled here from the same .proto texts; it returns the id,
// the indexes and the message as protojson (proto field names).
func decodeProto(t *testing.T, val []byte, message string) (int, []int, map[string]any) {
	t.Helper()
	var h sr.ConfluentHeader
	id, rest, err := h.DecodeID(val)
	if err != nil {
		t.Fatal(err)
	}
	idx, body, err := h.DecodeIndex(rest, 8)
	if err != nil {
		t.Fatal(err)
	}
	comp := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
		Accessor: protocompile.SourceAccessorFromMap(map[string]string{"orders.proto": ordersProto, "shop/common/money.proto": moneyProto})})}
	files, err := comp.Compile(ctx(t), "orders.proto")
	if err != nil {
		t.Fatal(err)
	}
	md := files[0].FindDescriptorByName(protoreflect.FullName(message)).(protoreflect.MessageDescriptor)
	m := dynamicpb.NewMessage(md)
	if err := proto.Unmarshal(body, m); err != nil {
		t.Fatalf("unmarshal %s: %v", message, err)
	}
	js, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(js, &got); err != nil {
		t.Fatal(err)
	}
	return id, idx, got
}

// TestProtobufRoundTrip encodes the row's JSON with a .proto that imports a
// schema registered under another subject and a well-known type, for the
// first message, a second one and a nested one; the wire format's message
// indexes say which, and the body decodes to the row's values.
func TestProtobufRoundTrip(t *testing.T) {
	reg := newFakeRegistry(t)
	if _, _, err := reg.RegisterSchema("shop.common.Money", sr.Schema{Schema: moneyProto, Type: sr.TypeProtobuf}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := writeFile(t, dir, "orders.proto", ordersProto)
	refs := []Reference{{Name: "shop/common/money.proto", Subject: "shop.common.Money", Version: 1}}
	e := newEncoder(t, reg.URL(),
		Rule{Table: "public.outbox", EventType: "OrderCreated", Value: Binding{File: file, References: refs}},
		Rule{Table: "public.outbox", EventType: "RefundIssued", Value: Binding{File: file, References: refs, Message: "shop.Refund", Strategy: StrategyTopicRecord}},
		Rule{Table: "public.outbox", EventType: "ItemAdded", Value: Binding{File: file, References: refs, Message: "shop.Order.Item", Strategy: StrategyRecord}},
	)
	for _, tc := range []struct {
		event, payload, message, subject string
		index                            []int
		want                             string
	}{
		{"OrderCreated", `{"id":"o-1","qty":"9007199254740993","total":99.9,"items":[{"sku":"s-1","count":2}],
		  "amount":{"currency":"EUR","units":9990},"status":"PAID","at":"2024-03-01T10:20:30.123+01:00","attrs":{"k":"v"}}`,
			"shop.Order", "orders-value", []int{0},
			`{"id":"o-1","qty":"9007199254740993","total":99.9,"items":[{"sku":"s-1","count":2}],
		  "amount":{"currency":"EUR","units":"9990"},"status":"PAID","at":"2024-03-01T09:20:30.123Z","attrs":{"k":"v"}}`},
		{"RefundIssued", `{"orderId":"o-1","cents":-500}`, "shop.Refund", "orders-shop.Refund", []int{1}, `{"order_id":"o-1","cents":"-500"}`},
		{"ItemAdded", `{"sku":"s-9","count":7}`, "shop.Order.Item", "shop.Order.Item", []int{0, 0}, `{"sku":"s-9","count":7}`},
	} {
		val, _, err := e.Encode(ctx(t), Target{Topic: "orders", Table: "public.outbox", EventType: tc.event}, []byte(tc.payload), []byte("k"))
		if err != nil {
			t.Fatalf("%s: %v", tc.event, err)
		}
		ss, ok := reg.GetSchema(tc.subject, 1)
		if !ok {
			t.Fatalf("%s: subject %s not registered", tc.event, tc.subject)
		}
		if len(ss.References) != 1 || ss.References[0].Subject != "shop.common.Money" {
			t.Fatalf("%s: registered with references %+v", tc.event, ss.References)
		}
		id, idx, got := decodeProto(t, val, tc.message)
		if id != ss.ID || !reflect.DeepEqual(idx, tc.index) {
			t.Errorf("%s: id %d indexes %v, want %d %v", tc.event, id, idx, ss.ID, tc.index)
		}
		if tc.index[0] == 0 && len(tc.index) == 1 && val[5] != 0 {
			t.Errorf("%s: the first message's index list is not the single byte 0: % x", tc.event, val[5:7])
		}
		var want map[string]any
		if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: decoded %v, want %v", tc.event, got, want)
		}
	}
	// A payload that does not fit: the protojson message, as a mismatch.
	_, _, err := e.Encode(ctx(t), Target{Topic: "orders", Table: "public.outbox", EventType: "OrderCreated"}, []byte(`{"id":1,"nope":2}`), nil)
	if !errors.Is(err, ErrMismatch) {
		t.Fatalf("error %v, want ErrMismatch", err)
	}
	wantErr(t, err, "shop.Order", "id", `subject "orders-value"`)
}

// TestProtobufSyntaxErrorNamesTheField: a payload that is not JSON where a field's value
// should be names that field, as a value of the wrong type does.
func TestProtobufSyntaxErrorNamesTheField(t *testing.T) {
	c, err := compile(context.Background(), FormatProtobuf, "syntax = \"proto3\";\nmessage R { string c = 1; int32 b = 2; R2 r = 3; }\nmessage R2 { int32 d = 1; }", nil, "R")
	if err != nil {
		t.Fatal(err)
	}
	for in, field := range map[string]string{`{"c":"x","b":1.5x}`: `"b"`, `{"c":"x","r":{"d":tru}}`: `"d"`, "{\"c\":\"x\",\n\"b\": }": `"b"`} {
		_, err := c.encode(nil, []byte(in))
		if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "syntax error") || !strings.Contains(err.Error(), "the value of field "+field) {
			t.Errorf("%s: %v, want a syntax error naming field %s", in, err, field)
		}
	}
}
