package config

import (
	"time"

	"github.com/walrelay/walrelay/replication"
)

// MinPruneAge is the smallest --older-than that prune accepts. A row younger
// than that may belong to an event walrelay has not relayed yet; the event is
// safe in the WAL while the slot holds it, but the row is the only copy left
// to re-send it from should the slot be lost.
const MinPruneAge = time.Hour

// PruneConfig is what `walrelay prune` needs.
type PruneConfig struct {
	Postgres
	Logging
	// Table is the outbox table, schema.name (default public.outbox).
	Table string
	// OlderThan is the age beyond which rows go; required, at least
	// MinPruneAge.
	OlderThan time.Duration
	// BatchSize is the number of rows deleted per transaction (default
	// 10000).
	BatchSize int
	// CreatedAtColumn is the column compared with the cutoff (default
	// created_at).
	CreatedAtColumn string
	// DryRun counts what would go and changes nothing.
	DryRun bool
}

// DefaultPruneConfig returns the prune configuration used when nothing is
// set; OlderThan has no default.
func DefaultPruneConfig() PruneConfig {
	return PruneConfig{Logging: defaultLogging(), Table: "public.outbox", BatchSize: 10000, CreatedAtColumn: "created_at"}
}

func (c *PruneConfig) settings() []setting {
	ss := append(c.loggingSettings(), c.postgresSettings()...)
	return append(ss,
		setting{name: "table", group: GroupTables, usage: "outbox table, schema.name (one per run)", value: stringVal{&c.Table}},
		setting{name: "created-at-column", group: GroupTables, usage: "timestamp column compared with the cutoff", value: stringVal{&c.CreatedAtColumn}},
		setting{name: "older-than", group: GroupPrune, usage: "delete rows older than this age, e.g. 72h or 3d; required, at least 1h", value: ageVal{&c.OlderThan}},
		setting{name: "batch-size", group: GroupPrune, usage: "rows deleted per transaction", value: intVal{&c.BatchSize}},
		setting{name: "dry-run", group: GroupPrune, usage: "count what would be pruned, delete nothing", value: boolVal{&c.DryRun}},
	)
}

// Validate reports the first value prune refuses, as a *Error.
func (c PruneConfig) Validate() error {
	if err := firstError(c.Logging.validate, c.Postgres.validate); err != nil {
		return err
	}
	if err := oneTable(c.Table, "prune"); err != nil {
		return err
	}
	switch {
	case c.OlderThan == 0:
		return invalid("older-than", "required (e.g. 72h or 3d)")
	case c.OlderThan < MinPruneAge:
		return invalid("older-than", "%v is below the minimum of 1h: rows that recent may belong to events walrelay "+
			"has not relayed yet; their events are safe in the WAL while the slot holds it, but the rows are the "+
			"only copy to re-send them from should the slot be lost or recreated", c.OlderThan)
	case c.BatchSize < 1:
		return invalid("batch-size", "%d is not a positive number of rows", c.BatchSize)
	case c.CreatedAtColumn == "":
		return invalid("created-at-column", "required")
	}
	if err := replication.ValidateIdentifier(c.CreatedAtColumn); err != nil {
		return &Error{Key: "created-at-column", Err: err}
	}
	return nil
}
