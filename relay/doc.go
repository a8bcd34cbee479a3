// Package relay is walrelay's runtime: Run(ctx, Options) wires the stages
// together, for the walrelay command and for a Go program that embeds it.
// The replication stream feeds the decoder, whose events are tracked by the
// checkpoint and produced by the sink through a delivery mode (delivery.go:
// at-least-once, or exactly-once in eos.go); the checkpoint's watermark
// flows back to the stream, which reports it to Postgres. Around them: the
// session and reconnect loop, the heartbeat and the polls of the slot and
// the outbox's span. It imports the stages only; the command's
// configuration (cmd/walrelay/internal/config) maps the settings to Options.
//
// Telemetry attaches from outside (observer.go): Run reports what happens
// to Options.Observer and hands Options.TracerProvider to the sink, and
// works the same with neither. relay/relayprom (walrelay's Prometheus
// metrics, /metrics, /healthz, /readyz) and relay/relayotel (a tracer
// provider from the OTEL_* variables) are what the walrelay command
// attaches; relay imports neither.
//
// The operator's tools (replay, recovery, redrive, prune, cutover) are the
// sibling package operator; relay never imports it.
//
// Entry points: relay.go (Run), options.go (Options, ExactlyOnce,
// OutboxSpanOptions, OptionError) and observer.go (Observer, NopObserver); the errors Run stops with are in eos.go
// (FencedError) and slotlost.go (SlotLostError), besides the sink's
// PoisonError (the dead-letter reasons are the sink's too, sink/reason.go,
// shared with the operator's replays and redrives). Options, Run, those
// errors, Observer and BuildVersion (version.go) are the embedding API; the rest
// is internal.
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
//   - in either delivery mode, Run marks a slot in the checkpoint topic
//     before it creates it; a slot missing at start whose mark (or,
//     exactly-once, whose checkpoint) exists was lost, and Run does not
//     create it again unless told to (slotguard.go): a new slot would start
//     past the events the lost one never delivered. An invalidated slot
//     found at start is a *SlotLostError too (slotlost.go).
package relay
