package decoder

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pglogrepl"
)

// Stream-level errors. Decode returns them wrapped in a *DecodeError; the
// stream cannot be trusted past such an error, so the caller stops (and, after
// reconnecting, decodes the new session with a new Decoder). Test with errors.Is.
var (
	// ErrTruncated: the message ends before a field it declares.
	ErrTruncated = errors.New("truncated message")
	// ErrUnknownMessage: the message type byte is not one of pgoutput v1's
	// non-streaming messages (streaming ones, like 'S', are unknown too: the
	// decoder is for streaming off).
	ErrUnknownMessage = errors.New("unknown message type")
	// ErrUnknownRelation: a change refers to a relation ID for which no
	// Relation message was seen since the decoder was created.
	ErrUnknownRelation = errors.New("unknown relation")
	// ErrMissingColumn: a Relation message for a configured outbox table lacks
	// a mapped column (dropped, renamed, or excluded by a publication column
	// list), the Partition column included. Columns.HeaderColumns are exempt:
	// a missing header column only means no such header. The error is a
	// *MissingColumnError.
	ErrMissingColumn = errors.New("mapped column missing")
	// ErrTableRenamed: an INSERT into an outbox table that was renamed or
	// moved to another schema (ALTER TABLE ... RENAME / SET SCHEMA) arrived
	// under its new name. A publication holds tables by OID, so the inserts
	// keep coming; they are the outbox's events, and the configuration no
	// longer names the table. The decoder recognises the table by its OID
	// (Table.OID) or by the Relation it had earlier in the session. The
	// error is a *TableRenamedError.
	ErrTableRenamed = errors.New("outbox table renamed")
	// ErrProtocol: the bytes or the message sequence break pgoutput's rules
	// (Begin inside a transaction, Commit or a change outside one, a negative
	// length, an unknown tuple column kind, trailing bytes, ...).
	ErrProtocol = errors.New("protocol violation")
)

// Value-level errors. They never come back from Decode: they are set as
// Event.Poison (wrapped with the column or field name) and the event is still
// returned, so that the caller dead-letters it or stops, but never skips it.
var (
	// ErrNullAggregateID: the aggregate id (the record key) is NULL or absent.
	ErrNullAggregateID = errors.New("aggregate id is null")
	// ErrNullField: the id, aggregate type or event type is NULL or absent.
	ErrNullField = errors.New("required field is null")
	// ErrBadHeaders: the headers value is not a JSON object (JSON null counts
	// as no headers).
	ErrBadHeaders = errors.New("headers are not a JSON object")
	// ErrBadPayload: a bytea value is not valid Postgres hex or escape output.
	ErrBadPayload = errors.New("invalid bytea value")
	// ErrBadTimestamp: the mapped timestamp column's text is not a timestamp
	// this decoder understands (ISO DateStyle output between years 1 and 9999;
	// infinity and BC dates are rejected).
	ErrBadTimestamp = errors.New("invalid timestamp")
	// ErrBadMessage: a tableless outbox message's content is not a JSON object
	// or one of its fields has the wrong JSON type (a "partition" that is not
	// a number or null included).
	ErrBadMessage = errors.New("invalid outbox message content")
	// ErrBadPartition: the partition column's text, or a message's
	// "partition" number, is not an integer between 0 and 2^31-1.
	ErrBadPartition = errors.New("invalid partition")
	// ErrUnsupportedValue: a mapped column arrived as an unchanged TOAST
	// pointer ('u') or in binary format ('b'), neither of which an INSERT with
	// text output can carry.
	ErrUnsupportedValue = errors.New("unsupported column value")
)

// DecodeError is the error Decode returns. It says where in the stream and
// where in the message decoding stopped; Err wraps one of the stream-level
// sentinels above.
type DecodeError struct {
	// LSN is the walStart passed to Decode.
	LSN pglogrepl.LSN
	// Type is the message type byte ('I', 'R', ...), 0 for an empty message.
	Type byte
	// Offset is the byte offset in the message where the problem was found.
	Offset int
	Err    error
}

// Error describes the failure, e.g.
// "decode pgoutput 'I' at 0/16B3748 offset 12: truncated message".
func (e *DecodeError) Error() string {
	t := "empty"
	if e.Type != 0 {
		if e.Type >= 0x20 && e.Type < 0x7f {
			t = fmt.Sprintf("'%c'", e.Type)
		} else {
			t = fmt.Sprintf("0x%02x", e.Type)
		}
	}
	if e.LSN == 0 {
		// Relation and Type messages carry no WAL position.
		return fmt.Sprintf("decode pgoutput %s offset %d: %v", t, e.Offset, e.Err)
	}
	return fmt.Sprintf("decode pgoutput %s at %s offset %d: %v", t, e.LSN, e.Offset, e.Err)
}

// Unwrap returns the wrapped error.
func (e *DecodeError) Unwrap() error { return e.Err }

// MissingColumnError names the outbox table and the configured column that a
// Relation message lacks. It wraps ErrMissingColumn.
type MissingColumnError struct {
	// Table is "schema.table".
	Table string
	// Column is the configured column name.
	Column string
	// Field is the Columns field it is configured as (e.g. "AggregateID").
	Field string
}

// Error describes the missing column and how it is mapped.
func (e *MissingColumnError) Error() string {
	return fmt.Sprintf("%v: table %s has no column %q (mapped as %s)", ErrMissingColumn, e.Table, e.Column, e.Field)
}

// Unwrap returns ErrMissingColumn.
func (e *MissingColumnError) Unwrap() error { return ErrMissingColumn }

// TableRenamedError names an outbox table that now arrives under another
// name, and how to resume. It wraps ErrTableRenamed.
type TableRenamedError struct {
	// Table is the configured name, "schema.table".
	Table string
	// Now is the name the table arrives under, "schema.table".
	Now string
	// OID is the table's OID (the Relation ID).
	OID uint32

	was, now [2]string // schema, name
}

// Error names both names and the two ways out, e.g.
// "outbox table renamed: public.outbox (oid 16390) now arrives as
// public.outbox_old; its inserts are events: rename it back (ALTER TABLE
// "public"."outbox_old" RENAME TO "outbox";) or configure the outbox table
// as public.outbox_old, then restart walrelay".
func (e *TableRenamedError) Error() string {
	return fmt.Sprintf("%v: %s (oid %d) now arrives as %s; its inserts are events: rename it back (%s) "+
		"or configure the outbox table as %s, then restart walrelay",
		ErrTableRenamed, e.Table, e.OID, e.Now, renameBack(e.now, e.was), e.Now)
}

// Unwrap returns ErrTableRenamed.
func (e *TableRenamedError) Unwrap() error { return ErrTableRenamed }

// renameBack returns the SQL that gives table now (schema, name) the name
// was again.
func renameBack(now, was [2]string) string {
	ns, nn, ws, wn := now[0], now[1], was[0], was[1]
	var stmts []string
	if nn != wn {
		stmts = append(stmts, fmt.Sprintf("ALTER TABLE %s.%s RENAME TO %s;", quoteIdent(ns), quoteIdent(nn), quoteIdent(wn)))
	}
	if ns != ws {
		stmts = append(stmts, fmt.Sprintf("ALTER TABLE %s.%s SET SCHEMA %s;", quoteIdent(ns), quoteIdent(wn), quoteIdent(ws)))
	}
	return strings.Join(stmts, " ")
}

// quoteIdent quotes an SQL identifier.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
