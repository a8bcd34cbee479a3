// Package relay is walrelay's runtime: Run(ctx, Options) wires the stages
// together, for the walrelay command and for a Go program that embeds it.
// The replication stream feeds the decoder, whose events are tracked by the
// checkpoint and produced by the sink through a delivery mode (delivery.go:
// at-least-once, or exactly-once in eos.go); the checkpoint's watermark
// flows back to the stream, which reports it to Postgres. Around them: the
// session and reconnect loop, the heartbeat, the slot poll, metrics and the
// HTTP endpoints. It imports the stages only; the command's configuration
// (cmd/walrelay/internal/config) maps the settings to Options.
//
// Beside Run, the runs that use the same stages on the outbox table's rows
// and on what Kafka holds (replay.go, recover.go, redrive.go,
// retention.go): Replay re-publishes kept rows (each row through the
// decoder's DecodeRow and the sink's Prepare, as the relay sends its
// INSERT); PlanRecovery and LastDelivered find where a lost slot left off;
// Redrive sends dead-lettered events to their topics; PruneGuard and
// ReadOutboxSpan keep the rows a replay may need in view.
//
// Options, Run, Replay, Redrive, the recovery and retention functions, the
// exported errors and DeadLetterReason are the embedding API; the rest is
// internal.
//
// Invariants kept here:
//   - an event is added to the checkpoint before it is handed to Kafka, and
//     acknowledged only from the sink's success callback;
//   - a record that fails for good stops the relay (it is never skipped), so
//     the watermark stays before its transaction;
//   - a keepalive's WAL end only becomes the watermark when the decoder has no
//     open transaction and nothing is in flight (checkpoint.AdvanceIdle);
//   - after the replication connection is lost, the half-read transaction is
//     abandoned and read again from the slot after reconnecting;
//   - a reconnect that reaches another WAL history (system identifier or
//     timeline changed: a failover) drops the in-memory position and resumes
//     from that server's slot, and no position of the old history is ever
//     sent to it (failover.go, shutdown.go);
//   - only errors known to be transient are retried (retry.go); anything
//     else, an invalid configuration included, stops walrelay with the error;
//   - exactly-once: a Kafka transaction holding a failed record is never
//     committed, and a checkpoint never skips what another WAL history
//     wrote (eos.go);
//   - a replay never touches the slot, never skips a selected row (its
//     resume token is the acknowledged prefix of the rows it sent), and in
//     exactly-once mode never fences the relay's producer (a transactional
//     id of its own);
//   - a redrive remembers what it sent only once Kafka acknowledged it, and
//     a prune guard lets a row go only once the slot confirmed past its
//     transaction;
//   - exactly-once: a slot missing at start whose checkpoint exists was lost,
//     and Run does not create it again unless told to (slotguard.go): a new
//     slot would start past the events the lost one never delivered.
package relay
