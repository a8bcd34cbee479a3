package registrytest

// The schemas of the schema registry tests: an Avro order that uses a Money
// record registered under its own subject, a Protobuf file of two messages
// (one nested) that imports money.proto, and a JSON Schema of an order.
const (
	MoneyAvsc = `{"type":"record","name":"Money","namespace":"wr.common","fields":[{"name":"currency","type":"string"},{"name":"units","type":"long"}]}`
	OrderAvsc = `{"type":"record","name":"Order","namespace":"wr.it","fields":[
 {"name":"id","type":"string"},{"name":"qty","type":"long"},{"name":"total","type":"double"},{"name":"paid","type":"boolean"},
 {"name":"note","type":["null","string"],"default":null},
 {"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW","PAID"]}},
 {"name":"tags","type":{"type":"array","items":"string"}},
 {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
 {"name":"amount","type":"wr.common.Money"}]}`
	MoneyProto = `syntax = "proto3";
package wr.common;
message Money { string currency = 1; int64 units = 2; }
`
	OrdersProto = `syntax = "proto3";
package wr.it;
import "wr/common/money.proto";
message Order {
  message Item { string sku = 1; int32 count = 2; }
  string id = 1;
  int64 qty = 2;
  repeated Item items = 3;
  wr.common.Money amount = 4;
}
message Refund { string order_id = 1; int64 cents = 2; }
`
	OrderJSONSchema = `{"$schema":"http://json-schema.org/draft-07/schema#","title":"wr.it.Order","type":"object",
 "properties":{"id":{"type":"string"},"total":{"type":"number"},"tags":{"type":"array","items":{"type":"string"}}},
 "required":["id","total"],"additionalProperties":false}`
)
