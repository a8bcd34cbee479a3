package decoder

import (
	"time"

	"github.com/jackc/pglogrepl"
)

// Kind says what a decoded pgoutput message produced.
type Kind uint8

const (
	// KindNone: the message only updated decoder state (Relation, Type, Origin).
	KindNone Kind = iota
	// KindBegin: a transaction starts; Output.XID, Output.CommitLSN (the
	// Begin's final LSN) and Output.CommitTime are set.
	KindBegin
	// KindEvent: an outbox event; Output.Event is set.
	KindEvent
	// KindCommit: the transaction ends; Output.CommitLSN, Output.EndLSN and
	// Output.CommitTime are set. EndLSN is the position to confirm.
	KindCommit
	// KindHeartbeat: a walrelay heartbeat message; Output.Content holds its
	// content (a copy).
	KindHeartbeat
	// KindIgnored: a change that is not an event (UPDATE, DELETE, TRUNCATE on
	// an outbox table, an INSERT into a table of the publication that is not
	// a configured outbox table, a non-transactional or foreign logical
	// message). Output.Reason and Output.Table say which.
	KindIgnored
	// KindFiltered: an outbox event its table's Filter does not publish.
	// Output.Event holds it; Output.Reason (ReasonFilteredEventType or
	// ReasonFilteredAggregateType) and Output.Table say why and where.
	KindFiltered
)

// String returns the kind's lowercase name.
func (k Kind) String() string {
	switch k {
	case KindNone:
		return "none"
	case KindBegin:
		return "begin"
	case KindEvent:
		return "event"
	case KindCommit:
		return "commit"
	case KindHeartbeat:
		return "heartbeat"
	case KindIgnored:
		return "ignored"
	case KindFiltered:
		return "filtered"
	}
	return "unknown"
}

// Reasons reported with KindIgnored.
const (
	ReasonUpdate           = "update"
	ReasonDelete           = "delete"
	ReasonTruncate         = "truncate"
	ReasonNonTransactional = "non_transactional_message"
	ReasonForeignMessage   = "foreign_message"
	ReasonUnmappedTable    = "unmapped_table"
)

// Output is the result of decoding one pgoutput message. It is reused by the
// caller between calls; Decode resets it first. Nothing in it aliases the
// input buffer. Content's buffer belongs to the Output and is overwritten by
// the next Decode into the same Output; Event's strings and slices
// (AggregateID, Payload, Headers and their values) are fresh allocations for
// every event, which the caller may keep and hand to other goroutines.
type Output struct {
	// Kind says which of the fields below are set.
	Kind Kind
	// XID is the transaction ID (KindBegin, KindCommit).
	XID uint32
	// CommitLSN is the LSN of the commit record (KindBegin, KindCommit).
	CommitLSN pglogrepl.LSN
	// EndLSN is the transaction's end LSN, the position to confirm once all
	// of its events are delivered (KindCommit).
	EndLSN pglogrepl.LSN
	// CommitTime is the commit timestamp, in UTC (KindBegin, KindCommit).
	CommitTime time.Time
	// Event is the outbox event (KindEvent).
	Event Event
	// Reason is one of the Reason constants (KindIgnored).
	Reason string
	// Table is the "schema.table" of an ignored change (KindIgnored; "" for
	// messages).
	Table string
	// Content is the heartbeat message's content (KindHeartbeat). It is a
	// copy, valid until the next Decode into this Output.
	Content []byte
}

// Header is one Kafka header taken from the event.
type Header struct {
	Key   string
	Value []byte
}

// Event is one outbox event: an INSERT into a mapped outbox table, or a
// transactional logical message carrying the same fields.
type Event struct {
	// Table is "schema.table" of the outbox table, or "" for a message event.
	Table string
	// TableName is the table name without schema ("" for message events).
	TableName string
	// ID identifies the event (the id column's text).
	ID string
	// AggregateType is used in topic names.
	AggregateType string
	// AggregateID is the record key. AggregateIDNull reports SQL NULL.
	AggregateID     []byte
	AggregateIDNull bool
	// EventType names the event.
	EventType string
	// Payload holds the payload as stored: jsonb/json/text as their text,
	// bytea as raw bytes. For a message event it is the JSON text of the
	// "payload" value, whatever its JSON type (a string keeps its quotes, as
	// jsonb's payload::text does). nil means SQL NULL or JSON null (a
	// tombstone).
	Payload []byte
	// Headers are the top-level string entries of the headers column (or
	// of a message's "headers" field), in the order they appear in its text,
	// entries with non-string values left out; then one entry per non-NULL
	// header column (Columns.HeaderColumns) present in the table, in the
	// configured order, keyed by the column name. Keys may repeat. nil when
	// there are none.
	Headers []Header
	// Timestamp is the mapped timestamp column's value, zero when unmapped
	// or NULL (the sink then uses CommitTime).
	Timestamp time.Time
	// Partition is the explicit Kafka partition (Columns.Partition, or a
	// message's "partition" field), valid when HasPartition is set. When
	// HasPartition is false (unmapped, NULL, or poisoned with
	// ErrBadPartition) the partition is chosen from the key as usual.
	Partition    int32
	HasPartition bool
	// CommitTime is the transaction's commit time (from its Begin), in UTC.
	CommitTime time.Time
	// LSN is the WAL position of the INSERT (or message); XID its transaction.
	LSN pglogrepl.LSN
	XID uint32
	// Poison, when non-nil, says why this event's values cannot become a
	// valid record (e.g. NULL aggregate id, headers not a JSON object,
	// undecodable bytea, a partition out of range). The caller dead-letters
	// or stops; never skips.
	Poison error
}
