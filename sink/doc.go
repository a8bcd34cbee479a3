// Package sink produces outbox events to Kafka with franz-go.
//
// Every record is produced with acks=all by an idempotent producer, keyed by
// the event's aggregate id so that one aggregate maps to one partition and
// its events keep their commit order. Prepare turns an event into a record
// (or says why Kafka will never take it); Send is asynchronous: the caller's
// done function runs once Kafka acknowledged the record or the record failed
// for good; only then may the caller count it as delivered.
//
// Entry points: sink.go (New, Sink.Prepare, Sink.Send), deadletter.go
// (Sink.PrepareDeadLetter), reason.go (why an event is dead-lettered:
// DeadLetterReason, PoisonOf, RefusalReason; PoisonError), txn.go (Kafka transactions, exactly-once),
// checkpoint.go (the exactly-once checkpoint record and ReadCheckpoint),
// readback.go (ReadRanges: records read back as a read_committed consumer
// sees them, the one reader the operator's tools use too), replay.go
// (records made again from a row or a dead letter), topic.go (topic
// templates) and security.go (TLS and SASL).
//
// Invariants:
//   - a record is never dropped: every Send ends in exactly one call of done,
//     with nil only after the broker acknowledged it with acks=all;
//   - records of one key are produced in the order Send was called;
//   - a record without an explicit partition goes to the partition of
//     murmur2(aggregate id), also when a key schema encoded its key
//     (partition.go: the framed key carries the schema id and is not hashed);
//   - memory is bounded by Config.MaxBufferedBytes: Send blocks when it is
//     reached;
//   - a topic's look-up or creation either succeeds, fails transiently
//     (IsRetryable: Kafka unavailable, try again), or fails for good with a
//     typed reason (ErrTopicRefused, ErrTopicNotAuthorized, ErrTopicMissing);
//     a failure is never remembered, a success is re-read periodically;
//   - entries of the headers column never shadow walrelay's own headers
//     (id, event_type, aggregate_type, walrelay.*, ce_*; content-type with
//     CloudEvents on): they are dropped and reported (WithOnReservedHeader).
//
// A table of Config.JSONValues gets the record value Debezium's outbox router
// writes through Kafka Connect's JsonConverter (envelope.go, connectjson.go):
// its envelope columns beside the payload, the payload expanded or as a JSON
// string. That value is built before a schema rule (Config.Schema) encodes
// it, so the schema describes the envelope. The dead-letter record keeps the
// payload as stored.
package sink
