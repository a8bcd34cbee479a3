// Package replication owns the logical replication connection to Postgres:
// it checks the prerequisites, ensures the publication and the persistent
// pgoutput slot exist, streams pgoutput messages from the slot's confirmed
// position, answers keepalives and reports the confirmed position. It is
// also walrelay's one reader of pg_replication_slots (ReadSlot, a typed Slot
// for every supported Postgres version) and its one writer of logical
// messages (EmitMessage), on its own replication connection or on any
// ordinary one (NewQuerier).
//
// Entry points: prereq.go (Open: the checks, the publication and the slot;
// Diagnose), stream.go (Stream, the loop that reads WAL and reports the
// position), slot.go (ReadSlot, DropSlot), message.go (EmitMessage,
// EmitGrants), span.go (ReadOutboxSpan, ServerTime), identity.go (Identity,
// SystemIdentifier), querier.go (NewQuerier, TableColumns), connect.go
// (Connect, ExplainConnect) and errors.go (IsRetryable and the typed
// errors).
//
// Invariants:
//   - one goroutine (the one running Stream.Run) uses the connection;
//   - the only position ever reported as flushed is the one the caller's
//     Position hands over (the checkpoint watermark); write, flush and apply
//     positions are always set explicitly, and a reported position never goes
//     down;
//   - every receive has a deadline, a keepalive that requests a reply is
//     answered at once, and status updates also go out on a timer, so the
//     walsender never times the connection out while walrelay waits on Kafka;
//   - memory is bounded: the stream reads WAL only into a fixed pool of
//     batches; when the consumer does not release them, it stops reading.
//   - every message from the server is length-checked before use: a
//     malformed one ends the stream with a *FrameError, never a panic;
//   - every connection records the server's Identity (system identifier and
//     timeline), so that the caller never carries positions from one WAL
//     history into another.
package replication
