package config

import (
	"time"

	"github.com/walrelay/walrelay/operator"
	"github.com/walrelay/walrelay/relay"
	"github.com/walrelay/walrelay/replication"
)

// SafetyNet is what keeps the outbox table usable as the safety net of
// `walrelay run`: the time column replays select by, how often the relay
// reads the table's retained span (the walrelay_outbox_* metrics) and the
// span the alert expects, and whether a slot found lost at start may be
// created again. run, doctor and replay take these settings.
type SafetyNet struct {
	// CreatedAtColumn is each outbox table's timestamp column: replays
	// select and order rows by it, the retained span is read from it
	// (default created_at; prune's key too).
	CreatedAtColumn string
	// OutboxSpanInterval is how often the relay reads the outbox tables'
	// oldest row and row estimate (default 1m; 0 disables).
	OutboxSpanInterval time.Duration
	// OutboxRetentionTarget is the span the outbox tables should keep, for
	// the alert on a shorter one (0: no target).
	OutboxRetentionTarget time.Duration
	// AcceptSlotLoss lets run create a missing slot although walrelay's
	// mark of it (or, exactly-once, its checkpoint) shows it was lost.
	AcceptSlotLoss bool
	// OnSlotLost is what run does when it finds its slot lost (dropped,
	// invalidated, missing after a failover): OnSlotLostStop (default) or
	// OnSlotLostRecover.
	OnSlotLost string
}

// What run does when it finds its slot lost (on-slot-lost).
const (
	// OnSlotLostStop stops with the error and the recovery command.
	OnSlotLostStop = "stop"
	// OnSlotLostRecover runs the recovery itself (replay
	// --since-last-delivered, which creates the new slot), then streams
	// from the new slot.
	OnSlotLostRecover = "recover"
)

// DefaultOutboxSpanInterval is how often walrelay run reads the outbox
// tables' span by default: one query per table, one index entry with an
// index on the time column (a scan without one).
const DefaultOutboxSpanInterval = time.Minute

func defaultSafetyNet() SafetyNet {
	return SafetyNet{CreatedAtColumn: operator.DefaultReplayTimeColumn, OutboxSpanInterval: DefaultOutboxSpanInterval, OnSlotLost: OnSlotLostStop}
}

func (s *SafetyNet) safetyNetSettings() []setting {
	return []setting{
		{name: "created-at-column", group: GroupTables, value: stringVal{&s.CreatedAtColumn},
			usage: "each outbox table's timestamp column: replays select and order rows by it, the retained span is read from it"},
		{name: "accept-slot-loss", group: GroupPostgres, value: boolVal{&s.AcceptSlotLoss},
			usage: "create a missing slot although walrelay's mark of it (or its exactly-once checkpoint) shows walrelay streamed from it before (the events committed since the loss are then never sent; recover them first with walrelay replay --since-last-delivered)"},
		{name: "on-slot-lost", group: GroupPostgres, value: stringVal{&s.OnSlotLost},
			usage: "what run does when it finds its slot lost (dropped, invalidated, missing after a failover): stop (print the recovery command) or recover (replay since the last delivered event, create the new slot and stream from it; consumers see duplicates and must deduplicate on id)"},
		{name: "outbox-span-interval", group: GroupService, value: durVal{&s.OutboxSpanInterval},
			usage: "how often the outbox tables' oldest row and row estimate are read for the walrelay_outbox_* metrics (one query per table; index the time column on a large table); 0 disables"},
		{name: "outbox-retention-target", group: GroupService, value: ageVal{&s.OutboxRetentionTarget},
			usage: "how far back the outbox tables should reach, e.g. 7d, exported for the alert on a shorter span (empty: no target)"},
	}
}

func (s SafetyNet) validate() error {
	switch {
	case s.CreatedAtColumn == "":
		return invalid("created-at-column", "required")
	case s.OutboxSpanInterval < 0:
		return invalid("outbox-span-interval", "must not be negative (0 disables)")
	case s.OutboxRetentionTarget < 0:
		return invalid("outbox-retention-target", "must not be negative")
	case s.OnSlotLost != OnSlotLostStop && s.OnSlotLost != OnSlotLostRecover:
		return invalid("on-slot-lost", "must be stop or recover, got %q", s.OnSlotLost)
	}
	if err := replication.ValidateIdentifier(s.CreatedAtColumn); err != nil {
		return &Error{Key: "created-at-column", Err: err}
	}
	return nil
}

// apply sets the runtime's options of the safety net.
func (s SafetyNet) apply(o *relay.Options) {
	o.AcceptSlotLoss = s.AcceptSlotLoss
	if s.OutboxSpanInterval > 0 {
		o.OutboxSpan = &relay.OutboxSpanOptions{Interval: s.OutboxSpanInterval, TimeColumn: s.CreatedAtColumn, MinRetained: s.OutboxRetentionTarget}
	}
}
