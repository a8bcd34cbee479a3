// Package checkpoint decides which WAL position is safe to confirm to
// Postgres.
//
// A Tracker follows every transaction read from the replication stream, in
// stream order, together with the number of its records that Kafka has not
// acknowledged yet. Its watermark is the highest TransactionEndLSN such that
// every transaction ending at or before it is fully acknowledged; only the
// watermark may ever be reported as flushed.
//
// Entry point: tracker.go (New, Tracker: Begin, Add, Ack, Watermark).
//
// Invariants:
//   - the watermark never passes a transaction with an unacknowledged record,
//     nor a transaction whose commit has not been read;
//   - the watermark never moves backwards;
//   - at most Config.MaxInFlight units (one per tracked transaction, one per
//     unacknowledged record) are held at once: Begin and Add block at the cap,
//     which is how walrelay stops reading WAL when Kafka is slow (backpressure).
//
// The package does no I/O and never logs.
package checkpoint
