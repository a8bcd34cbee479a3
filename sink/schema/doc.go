// Package schema encodes outbox payloads (and optionally keys) in the
// Confluent wire format with a schema registry, for consumers that read with
// Confluent-compatible deserializers (Confluent's, Apicurio's, Redpanda's,
// Karapace's registries): magic byte 0, the 4-byte big-endian schema id, for
// Protobuf the message-index list, then the body. The body is, by format:
//   - JSON Schema: the payload's JSON as stored, after it was validated
//     against the schema;
//   - Avro: the payload's JSON converted to Avro binary (rules in
//     docs/schema-registry.md, "JSON to Avro");
//   - Protobuf: the payload's JSON mapped to the message with the proto3 JSON
//     mapping (protojson) over a message built from the registered .proto.
//
// Rules choose a schema per table and optionally per event type; tables
// without a rule are not touched. The package knows nothing of Kafka: the
// sink calls Encode with the record's topic and the event's table and type.
//
// Entry points: encoder.go (New, Encoder.Encode) and config.go (Config,
// the rules).
//
// Invariants:
//   - a payload that does not fit its schema is never sent unencoded or
//     partially encoded: Encode fails with an error wrapping ErrMismatch that
//     carries the validator's message;
//   - a registry that cannot answer (network, timeout, HTTP 5xx, 408, 429)
//     fails Encode with an error wrapping ErrUnavailable: the same call may
//     succeed later; nothing else is retryable;
//   - the registry is asked once per subject (and per topic, for the topic
//     strategies), never per event: schema ids and compiled schemas are kept
//     for the life of the Encoder; a failed look-up is never remembered;
//   - secrets (password, bearer token) never appear in an error, a log line
//     or a formatted Config;
//   - encoding is deterministic: the same payload and schema give the same
//     bytes in every process (Avro maps in key order, avro.go; Protobuf
//     serialized deterministically, proto.go).
package schema
