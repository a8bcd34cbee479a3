package config

import "github.com/walrelay/walrelay/replication"

// StatusConfig is what `walrelay status` needs.
type StatusConfig struct {
	Postgres
	Logging
	// Slot is the replication slot shown (default walrelay).
	Slot string
	// Tables are the outbox tables whose retained span is shown (default
	// public.outbox), by their CreatedAtColumn.
	Tables          []string
	CreatedAtColumn string
}

// DefaultStatusConfig returns the status configuration used when nothing is
// set.
func DefaultStatusConfig() StatusConfig {
	return StatusConfig{Logging: defaultLogging(), Slot: "walrelay", Tables: []string{"public.outbox"}, CreatedAtColumn: "created_at"}
}

func (c *StatusConfig) settings() []setting {
	ss := append(c.loggingSettings(), c.postgresSettings()...)
	return append(ss, slotSetting(&c.Slot, "replication slot to show"),
		setting{name: "table", group: GroupTables, usage: "outbox table(s) whose retained span to show, schema.name, comma-separated", value: listVal{&c.Tables}},
		setting{name: "created-at-column", group: GroupTables, usage: "each outbox table's timestamp column (the span is its oldest value)", value: stringVal{&c.CreatedAtColumn}},
	)
}

// Validate reports the first value status refuses, as a *Error.
func (c StatusConfig) Validate() error {
	if err := firstError(c.Logging.validate, c.Postgres.validate,
		func() error { return validateReplication(replication.Config{DSN: c.PostgresDSN, Slot: c.Slot}) }); err != nil {
		return err
	}
	for _, t := range c.Tables {
		if _, err := replication.ParseTable(t); err != nil {
			return &Error{Key: "table", Err: err}
		}
	}
	if err := replication.ValidateIdentifier(c.CreatedAtColumn); err != nil {
		return &Error{Key: "created-at-column", Err: err}
	}
	return nil
}
