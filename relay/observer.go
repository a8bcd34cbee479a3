package relay

import (
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walrelay/walrelay/replication"
)

// Observer is what Run tells the telemetry attached to it
// (Options.Observer), as franz-go's hooks and pgx's tracer do: the runtime
// calls it and knows nothing of what it feeds. Run works the same without
// one. relay/relayprom implements it with walrelay's Prometheus metrics; a
// program with other telemetry embeds NopObserver and overrides what it
// wants.
//
// Methods are called from several goroutines at once (the pipeline's,
// Kafka's acknowledgements, the polls) and must return at once: they run on
// the path of every event. The arguments use no type of this package, so an
// implementation need not import it.
type Observer interface {
	// The pipeline (pipeline.go).

	// TransactionRead: a transaction's commit was read from the stream.
	TransactionRead()
	// EventAcked: Kafka acknowledged an event (or its dead letter)
	// committed in Postgres at commitTime; called before the
	// acknowledgement can move the confirmed position.
	EventAcked(commitTime time.Time)
	// ProduceFailed: a record failed for good (walrelay stops on it).
	ProduceFailed()
	// DeadLettered: an event goes to the dead-letter topic for reason.
	DeadLettered(reason string)
	// KafkaRetried: a topic look-up or creation is retried because Kafka
	// is unavailable.
	KafkaRetried()
	// ChangeIgnored: a change that is no event (decoder.KindIgnored).
	ChangeIgnored(reason string)
	// EventFiltered: an event a table's filter does not publish.
	EventFiltered(reason string)
	// ReservedHeaderDropped: a headers column entry named as a walrelay
	// header was dropped.
	ReservedHeaderDropped(name string)
	// HeartbeatDecoded: a heartbeat came back through the stream; emitted
	// is when it was written (zero when its content is not a time).
	HeartbeatDecoded(emitted time.Time)
	// HeartbeatFailed: writing a heartbeat failed.
	HeartbeatFailed()

	// Sessions (relay.go, standby.go).

	// Streaming: the instance streams from the slot (true) or no longer
	// (connecting, reconnecting, standing by).
	Streaming(on bool)
	// Role: RoleActive, RoleStandby or "" (connecting or reconnecting).
	Role(role string)
	// NotReadyReason hands over, once, what says why the instance is not
	// ready beyond not streaming ("" when nothing more: while standing by,
	// the walsender holding the slot); safe to call concurrently.
	NotReadyReason(why func() string)
	// SlotRecoveries: the embedding program recovered a lost slot n times
	// in this process before this Run (Options.SlotRecoveries); called once.
	SlotRecoveries(n int)
	// Reconnecting: a session ended for cause ReconnectConnection (the
	// connection was lost) or ReconnectSlotInUse (first try of a standby
	// period).
	Reconnecting(cause string)

	// Exactly-once (eos.go).

	// TxnCommitted: a Kafka transaction committed, in took.
	TxnCommitted(took time.Duration)
	// TxnAborted: a Kafka transaction was aborted.
	TxnAborted()
	// EventsSkipped: n events read again were skipped, the checkpoint
	// showing them committed.
	EventsSkipped(n int)

	// Polls (Options.SlotMetricsInterval, Options.OutboxSpan).

	// SlotPolled: a reading of the slot's row; nil when the slot does not
	// exist.
	SlotPolled(s *replication.Slot)
	// SlotPollFailed: reading the slot's row failed.
	SlotPollFailed()
	// SlotHeldBack: with each reading of the slot, the age of the oldest
	// transaction holding it back (0: none) and
	// Options.SlotHolderAlertAfter.
	SlotHeldBack(age, alertAfter time.Duration)
	// SlotWALTimeLeft: with each reading of the slot, the time left before
	// max_slot_wal_keep_size invalidates it at the rate its safe WAL size
	// shrinks; known false when unlimited or the slot keeps up.
	SlotWALTimeLeft(left time.Duration, known bool)
	// FailoverPolled: a reading of the failover slot's protection on the
	// DSN's hosts (with Replication.SlotFailover).
	FailoverPolled(h replication.FailoverHealth)
	// OutboxSpanPolling: the outbox span poll starts, with the minimum
	// retained span configured (0: none).
	OutboxSpanPolling(minRetained time.Duration)
	// OutboxSpanRead: a reading of one outbox table's span, at now.
	OutboxSpanRead(sp replication.OutboxSpan, now time.Time)
	// OutboxSpanPolled: a poll read every table (ok) or not.
	OutboxSpanPolled(ok bool)

	// Positions hands over, once the first session's tracker exists, what
	// reads the positions at any time (safe to call concurrently): the
	// watermark, the records in flight and the server's WAL end last seen.
	Positions(watermark func() pglogrepl.LSN, inFlight func() int, walEnd func() pglogrepl.LSN)
}

// Values of Observer.Role and Observer.Reconnecting.
const (
	RoleActive  = "active"  // streaming from the slot
	RoleStandby = "standby" // the slot is held by another process

	ReconnectConnection = "connection"  // the replication connection was lost
	ReconnectSlotInUse  = "slot_in_use" // another process holds the slot
)

// NopObserver observes nothing. Embed it in an Observer that implements
// only some of the methods.
type NopObserver struct{}

func (NopObserver) TransactionRead()                                                 {}
func (NopObserver) EventAcked(time.Time)                                             {}
func (NopObserver) ProduceFailed()                                                   {}
func (NopObserver) DeadLettered(string)                                              {}
func (NopObserver) KafkaRetried()                                                    {}
func (NopObserver) ChangeIgnored(string)                                             {}
func (NopObserver) EventFiltered(string)                                             {}
func (NopObserver) ReservedHeaderDropped(string)                                     {}
func (NopObserver) HeartbeatDecoded(time.Time)                                       {}
func (NopObserver) HeartbeatFailed()                                                 {}
func (NopObserver) Streaming(bool)                                                   {}
func (NopObserver) Role(string)                                                      {}
func (NopObserver) Reconnecting(string)                                              {}
func (NopObserver) TxnCommitted(time.Duration)                                       {}
func (NopObserver) TxnAborted()                                                      {}
func (NopObserver) EventsSkipped(int)                                                {}
func (NopObserver) SlotPolled(*replication.Slot)                                     {}
func (NopObserver) SlotPollFailed()                                                  {}
func (NopObserver) SlotHeldBack(time.Duration, time.Duration)                        {}
func (NopObserver) SlotWALTimeLeft(time.Duration, bool)                              {}
func (NopObserver) FailoverPolled(replication.FailoverHealth)                        {}
func (NopObserver) NotReadyReason(func() string)                                     {}
func (NopObserver) SlotRecoveries(int)                                               {}
func (NopObserver) OutboxSpanPolling(time.Duration)                                  {}
func (NopObserver) OutboxSpanRead(replication.OutboxSpan, time.Time)                 {}
func (NopObserver) OutboxSpanPolled(bool)                                            {}
func (NopObserver) Positions(func() pglogrepl.LSN, func() int, func() pglogrepl.LSN) {}
