// Package decoder turns the messages of a Postgres logical replication
// stream, as produced by the pgoutput plugin with proto_version 1,
// messages 'true', no streaming and no binary, into walrelay events.
//
// A Decoder is fed the WALData of each XLogData, in order, with the XLogData's
// walStart. It decodes the pgoutput v1 wire format itself, with a bounds
// check on every read (pglogrepl's parser panics on malformed input), keeps
// a cache of Relation messages, resolves the configured outbox columns of each
// outbox table, and reports one Output per message:
//
//   - Begin and Commit frame a transaction (KindBegin, KindCommit). Commit
//     carries the transaction's end LSN, the only position to confirm.
//   - An INSERT into a configured outbox table, or a transactional logical
//     message with the configured MessagePrefix, is an outbox event
//     (KindEvent).
//   - A logical message with the heartbeat prefix is a heartbeat
//     (KindHeartbeat).
//   - UPDATE, DELETE and TRUNCATE of outbox tables, changes of other tables
//     and foreign or non-transactional messages are reported, not dropped
//     (KindIgnored, with a Reason).
//   - Relation, Type and Origin messages only update state (KindNone).
//
// Entry points: decoder.go (New, Decoder.Decode), row.go
// (Decoder.DecodeRow: a row read back from an outbox table, as a replay
// sends it) and config.go (Config, DefaultColumns, DebeziumColumns); the
// other files serve them.
//
// # Columns
//
// Columns maps an outbox table's columns to event fields. Besides the
// required ones and the optional headers (a JSON object) and timestamp
// columns, an optional Partition column carries an explicit Kafka partition
// (Event.Partition, valid when Event.HasPartition; NULL leaves the choice to
// the key hash), and HeaderColumns copies more columns into Event.Headers,
// named after the column (or HeaderNames), after the entries of the headers
// column. Envelope columns (Columns.Envelope, Debezium's envelope placement)
// are mapped columns whose values, with their type OID and modifier, the
// event carries in Event.Envelope for the sink to place in the record value;
// a type the envelope cannot carry is a stream error (ErrEnvelopeType). A
// table without envelope columns pays one length test for them. A mapped
// column (Partition included) missing from a table's Relation message is a
// stream error (ErrMissingColumn); a header column is not mapped in that
// sense: it is absent until a Relation message includes it, so it can be
// added with ALTER TABLE ... ADD COLUMN while the decoder runs, and inserts
// after that Relation carry the header. A tableless message event takes an
// optional integer "partition" field the same way.
//
// # Renamed tables
//
// A publication holds its tables by OID, so an outbox table renamed or moved
// to another schema keeps sending its inserts, under the new name. Those are
// never taken for another table's: an INSERT into a relation that was mapped
// earlier in the session, or whose OID is a configured table's (Table.OID),
// under a name other than the configured one is ErrTableRenamed. A FOR ALL
// TABLES publication's other tables stay ignored. One exception keeps a
// restart with the new name working: with Config.OIDsReadAt, an INSERT
// before that position under an older name is the configured table's event.
//
// # Invariants
//
//   - Pure and synchronous: no I/O, no goroutines, no logging, no context.
//     A Decoder is not safe for concurrent use.
//   - Decode never panics, whatever the bytes. Every problem with the stream
//     (truncation, unknown message types or relations, Begin inside or Commit
//     outside a transaction, a mapped column missing from a Relation) is a
//     *DecodeError wrapping an exported sentinel; the caller must stop, and
//     decode a new replication session with a new Decoder.
//   - A problem with the values of one event (NULL aggregate id, bad headers,
//     invalid bytea, a partition that is not an integer in [0, 2^31-1], ...)
//     is never an error and never drops the event: the event is returned
//     with Event.Poison set, for the caller to dead-letter or stop on.
//   - KindEvent is only produced inside a transaction, and an event's LSN,
//     XID and CommitTime are those of its change and its transaction.
//   - Decode never retains its input, and nothing in an Output aliases it.
//     Each event's strings and byte slices are fresh allocations that the
//     caller may keep; the Output itself and its Content buffer are reused.
package decoder
