package config

import (
	"time"

	"github.com/walrelay/walrelay/operator"
	"github.com/walrelay/walrelay/replication"
)

// CutoverConfig is what `walrelay cutover` needs: operator.CutoverOptions
// as settings (its DSN comes from Postgres); DropFromSlot runs
// operator.DropFromSlot instead of operator.Cutover.
type CutoverConfig struct {
	Postgres
	Logging
	operator.CutoverOptions
	DropFromSlot bool
}

// DefaultCutoverConfig returns the cutover configuration used when nothing is
// set; FromSlot has no default.
func DefaultCutoverConfig() CutoverConfig {
	return CutoverConfig{
		Logging: defaultLogging(),
		CutoverOptions: operator.CutoverOptions{Slot: "walrelay", Publication: "walrelay", Tables: []string{"public.outbox"},
			CreatePublication: true, Timeout: 10 * time.Minute, PollInterval: time.Second, StallWarning: time.Minute, Nudge: true},
	}
}

func (c *CutoverConfig) settings() []setting {
	ss := append(c.loggingSettings(), c.postgresSettings()...)
	return append(ss,
		slotSetting(&c.Slot, "walrelay's replication slot (created here)"),
		setting{name: "publication", group: GroupPostgres, usage: "walrelay's publication (created when missing, as by walrelay run)", value: stringVal{&c.Publication}},
		setting{name: "create-publication", group: GroupPostgres, usage: "create the publication when missing", value: boolVal{&c.CreatePublication}},
		setting{name: "table", group: GroupTables, usage: "outbox table(s), schema.name, comma-separated", value: listVal{&c.Tables}},
		setting{name: "from-slot", group: GroupCutover, usage: "the slot of the system walrelay replaces (Debezium's slot.name); required", value: stringVal{&c.FromSlot}},
		setting{name: "timeout", group: GroupCutover, usage: "how long to wait for --from-slot to confirm walrelay's start", value: durVal{&c.Timeout}},
		setting{name: "poll-interval", group: GroupCutover, usage: "how often both slots are read", value: durVal{&c.PollInterval}},
		setting{name: "stall-warning", group: GroupCutover, usage: "how long --from-slot may stand still before a hint is printed", value: durVal{&c.StallWarning}},
		setting{name: "nudge", group: GroupCutover, usage: "write one transactional logical message with prefix " + operator.CutoverNudgePrefix + " after creating the slot (moves Debezium's slot on an idle database)", value: boolVal{&c.Nudge}},
		setting{name: "drop-from-slot", group: GroupCutover, usage: "drop --from-slot (after checking it is inactive and confirmed at or past --start-lsn) instead of waiting", value: boolVal{&c.DropFromSlot}},
		setting{name: "start-lsn", group: GroupCutover, usage: "with --drop-from-slot: walrelay's start LSN printed by the first cutover run (default: walrelay's slot's confirmed position)", value: lsnVal{&c.StartLSN}},
	)
}

// Validate reports the first value cutover refuses, as a *Error.
func (c CutoverConfig) Validate() error {
	if err := firstError(c.Logging.validate, c.Postgres.validate); err != nil {
		return err
	}
	switch {
	case c.FromSlot == "":
		return invalid("from-slot", "required: the replication slot of the system walrelay replaces (Debezium's slot.name)")
	case c.FromSlot == c.Slot:
		return invalid("from-slot", "%q is walrelay's own slot; to run walrelay on that slot directly see docs/migrating-from-debezium.md", c.FromSlot)
	case c.Timeout <= 0:
		return invalid("timeout", "must be positive")
	case c.PollInterval <= 0:
		return invalid("poll-interval", "must be positive")
	case c.StallWarning < 0:
		return invalid("stall-warning", "must not be negative")
	case c.StartLSN != 0 && !c.DropFromSlot:
		return invalid("start-lsn", "only with drop-from-slot")
	}
	if err := replication.ValidateIdentifier(c.FromSlot); err != nil {
		return &Error{Key: "from-slot", Err: err}
	}
	return validateReplication(c.Replication())
}

// Replication is the replication configuration of walrelay's slot.
func (c CutoverConfig) Replication() replication.Config {
	return replication.Config{DSN: c.PostgresDSN, Slot: c.Slot, Publication: c.Publication, Tables: c.Tables,
		NoCreatePublication: !c.CreatePublication, PasswordSource: c.Postgres.PasswordSource()}
}

// Cutover is cutover's options for this configuration.
func (c CutoverConfig) Cutover() operator.CutoverOptions {
	o := c.CutoverOptions
	o.DSN, o.PasswordSource = c.PostgresDSN, c.Postgres.PasswordSource()
	return o
}
