package relay

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/replication"
	"github.com/walrelay/walrelay/sink"
)

// HeartbeatPrefix is the logical message prefix of walrelay's heartbeats; the
// decoder reports messages with it as heartbeats, never as events.
const HeartbeatPrefix = "walrelay.heartbeat"

// Poison policies: what the pipeline does with an event Kafka can never
// accept.
const (
	OnPoisonDLQ  = "dlq"  // produce it to the dead-letter topic with the reason
	OnPoisonStop = "stop" // stop with a *sink.PoisonError; the slot stays before it
)

// Options is everything Run needs. The command's configuration maps its
// settings to it; the libraries' own configurations travel inside unchanged.
type Options struct {
	// Replication is the slot, publication and tables; its DSN and Slot also
	// serve the heartbeat and the slot poll.
	Replication replication.Config
	Sink        sink.Config
	// Decoder maps the outbox tables; Run sets its HeartbeatPrefix.
	Decoder decoder.Config

	// MaxInFlight caps the records and transactions awaiting Kafka's
	// acknowledgement (and so the records Kafka's client buffers). In
	// exactly-once mode the tracker also holds acknowledged records until
	// their Kafka transaction commits: its cap is trackerCap.
	MaxInFlight int
	OnPoison    string // OnPoisonDLQ or OnPoisonStop

	HeartbeatInterval time.Duration // 0: no heartbeats
	// HeartbeatDSN is where heartbeats are written when Replication.DSN is
	// a standby (logical decoding on a standby, Postgres 16+): the primary.
	// "" writes them through Replication.DSN.
	HeartbeatDSN        string
	SlotMetricsInterval time.Duration // between readings of the slot for the Observer; 0: none
	// SlotHolderAlertAfter is how long an open or prepared transaction may
	// hold the slot back before walrelay logs it as a warning (and the
	// WalrelaySlotHeldBack alert fires: walrelay_slot_holder_alert_after_seconds);
	// 0: never.
	SlotHolderAlertAfter time.Duration
	StandbyRetryInterval time.Duration // wait between tries of a slot another process holds
	ShutdownTimeout      time.Duration // bounds the drain after the context ends
	KafkaTimeout         time.Duration // bounds waiting for Kafka at start and at transaction ends

	// ExactlyOnce turns on Kafka transactions; nil is at-least-once.
	ExactlyOnce *ExactlyOnce

	// AcceptSlotLoss lets Run create a missing slot even though walrelay's
	// mark of the slot (or, exactly-once, its checkpoint) shows that walrelay
	// streamed from a slot of that name before (slotguard.go): the events
	// committed between the loss and the new slot are then never sent.
	// Without it Run stops with a *SlotLostError.
	AcceptSlotLoss bool

	// SlotMarkTopic is the compacted topic where Run marks, before creating
	// it, the slot it streams from (slotguard.go, sink.SlotMark), in both
	// delivery modes; "": ExactlyOnce.CheckpointTopic in exactly-once mode,
	// else sink.DefaultCheckpointTopic. SlotMarkReplicationFactor is the
	// replication factor of the topic when Run creates it (0 or -1: the
	// broker's default).
	SlotMarkTopic             string
	SlotMarkReplicationFactor int16

	// SlotRecoveries is how often the embedding program recovered a lost
	// slot before this Run in the same process (walrelay run's on-slot-lost
	// recover): the walrelay_slot_recoveries_total counter starts there, so
	// that it keeps counting across Runs.
	SlotRecoveries int

	// OutboxSpan turns on readings of the outbox tables' retained span
	// for the Observer (the walrelay_outbox_* metrics, retention.go); nil:
	// off.
	OutboxSpan *OutboxSpanOptions

	Logger *slog.Logger // nil: slog.Default()

	// Observer is told what happens (observer.go): the metrics attach here
	// (relay/relayprom for walrelay's Prometheus metrics); nil: none.
	Observer Observer
	// TracerProvider makes a span per event (sink.WithTracerProvider); nil:
	// no spans. relay/relayotel builds one from the OTEL_* environment
	// variables, as the walrelay command does.
	TracerProvider trace.TracerProvider
	// SinkOptions are more options for the Kafka producer, after Run's own:
	// client hooks such as relayprom.KafkaHooks (franz-go's kprom).
	SinkOptions []sink.Option
}

// observer is o.Observer, or one that observes nothing.
func (o Options) observer() Observer {
	if o.Observer == nil {
		return NopObserver{}
	}
	return o.Observer
}

// slotMarks returns the topic of the slot marks and its replication factor.
func (o *Options) slotMarks() (string, int16) {
	topic, rf := o.SlotMarkTopic, o.SlotMarkReplicationFactor
	if topic == "" {
		topic = sink.DefaultCheckpointTopic
		if o.ExactlyOnce != nil && o.ExactlyOnce.CheckpointTopic != "" {
			topic = o.ExactlyOnce.CheckpointTopic
		}
	}
	if rf == 0 {
		rf = -1
	}
	return topic, rf
}

// ExactlyOnce holds the settings of exactly-once delivery (eos.go).
type ExactlyOnce struct {
	// TransactionalID is the producer's transactional.id; every instance
	// serving a slot must use the same one, so that each fences the others.
	TransactionalID             string
	CheckpointTopic             string
	CheckpointReplicationFactor int16
	// A Kafka transaction is committed at the end of the Postgres
	// transaction during which CommitInterval passed or MaxRecords were
	// reached, whichever comes first.
	CommitInterval time.Duration
	MaxRecords     int
}

// trackerCap is the checkpoint tracker's cap: MaxInFlight, and in
// exactly-once mode room for two MaxRecords more (records and their
// transactions that Kafka acknowledged and that wait for the commit; they
// hold no buffer in Kafka's client, so memory stays bounded by MaxInFlight
// and the sink's byte cap).
func (o *Options) trackerCap() int {
	if o.ExactlyOnce == nil {
		return o.MaxInFlight
	}
	return o.MaxInFlight + 2*o.ExactlyOnce.MaxRecords
}

// OptionError is an option Run cannot use; Option names the Options field.
type OptionError struct {
	Option string
	Err    error
}

func (e *OptionError) Error() string { return fmt.Sprintf("option %s: %v", e.Option, e.Err) }
func (e *OptionError) Unwrap() error { return e.Err }

// Validate checks what Run relies on (as a *OptionError); the command's
// configuration refuses bad settings earlier with the flag's name.
func (o *Options) Validate() error {
	bad := func(option, msg string) error { return &OptionError{Option: option, Err: errors.New(msg)} }
	switch {
	case o.MaxInFlight < 2:
		return bad("MaxInFlight", "must be at least 2")
	case o.OnPoison != OnPoisonDLQ && o.OnPoison != OnPoisonStop:
		return bad("OnPoison", "must be dlq or stop")
	case o.StandbyRetryInterval <= 0, o.ShutdownTimeout <= 0, o.KafkaTimeout <= 0:
		return bad("StandbyRetryInterval, ShutdownTimeout, KafkaTimeout", "must be positive")
	case o.HeartbeatInterval < 0 || o.SlotMetricsInterval < 0:
		return bad("HeartbeatInterval, SlotMetricsInterval", "must not be negative")
	case o.SlotHolderAlertAfter < 0:
		return bad("SlotHolderAlertAfter", "must not be negative")
	}
	if so := o.OutboxSpan; so != nil {
		switch {
		case so.Interval < 0 || so.MinRetained < 0:
			return bad("OutboxSpan", "interval and minimum retained span must not be negative")
		case so.TimeColumn != "" && replication.ValidateIdentifier(so.TimeColumn) != nil:
			return &OptionError{Option: "OutboxSpan.TimeColumn", Err: replication.ValidateIdentifier(so.TimeColumn)}
		}
	}
	if x := o.ExactlyOnce; x != nil {
		switch {
		case x.TransactionalID == "" || x.CheckpointTopic == "":
			return bad("ExactlyOnce", "needs a transactional id and a checkpoint topic")
		case x.CommitInterval <= 0:
			return bad("ExactlyOnce.CommitInterval", "must be positive")
		case x.MaxRecords <= 0:
			return bad("ExactlyOnce.MaxRecords", "must be positive")
		}
	}
	return nil
}
