package config

import (
	"fmt"
	"io"
	"strings"
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
	PostgresDSN string
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
	// PostgresDSNFile holds the DSN instead of PostgresDSN.
	PostgresDSNFile string
}

// DefaultPruneConfig returns the prune configuration used when nothing is
// set; OlderThan has no default.
func DefaultPruneConfig() PruneConfig {
	return PruneConfig{Table: "public.outbox", BatchSize: 10000, CreatedAtColumn: "created_at"}
}

func (c *PruneConfig) settings() []setting {
	return []setting{
		{"postgres-dsn", "Postgres connection `DSN` (libpq URL or key=value); required", stringVal{&c.PostgresDSN}},
		{"table", "outbox `table`, schema.name", stringVal{&c.Table}},
		{"older-than", "delete rows older than `AGE`, e.g. 72h or 3d; required, at least 1h", ageVal{&c.OlderThan}},
		{"batch-size", "`rows` deleted per transaction", intVal{&c.BatchSize}},
		{"created-at-column", "timestamp `column` compared with the cutoff", stringVal{&c.CreatedAtColumn}},
		{"dry-run", "count what would be pruned, delete nothing", boolVal{&c.DryRun}},
		{"postgres-dsn-file", "`file` holding the Postgres DSN (instead of --postgres-dsn)", stringVal{&c.PostgresDSNFile}},
	}
}

// Validate reports the first value prune refuses, as a *Error.
func (c PruneConfig) Validate() error {
	bad := func(key string, format string, args ...any) error {
		return &Error{Key: key, Err: fmt.Errorf(format, args...)}
	}
	switch {
	case c.PostgresDSN == "":
		return bad("postgres-dsn", "required")
	case strings.Contains(c.Table, ","):
		return bad("table", "%q names several tables; prune one table per run", c.Table)
	case c.OlderThan == 0:
		return bad("older-than", "required (e.g. 72h or 3d)")
	case c.OlderThan < MinPruneAge:
		return bad("older-than", "%v is below the minimum of 1h: rows that recent may belong to events walrelay "+
			"has not relayed yet; their events are safe in the WAL while the slot holds it, but the rows are the "+
			"only copy to re-send them from should the slot be lost or recreated", c.OlderThan)
	case c.BatchSize < 1:
		return bad("batch-size", "%d is not a positive number of rows", c.BatchSize)
	case c.CreatedAtColumn == "":
		return bad("created-at-column", "required")
	}
	if _, err := replication.ParseTable(c.Table); err != nil {
		return &Error{Key: "table", Err: err}
	}
	if err := replication.ValidateIdentifier(c.CreatedAtColumn); err != nil {
		return &Error{Key: "created-at-column", Err: err}
	}
	return nil
}

// LoadPrune reads the prune flags over the WALRELAY_* environment over the
// defaults, and validates the result. usage heads what -h prints to help.
func LoadPrune(usage string, args []string, getenv func(string) string, help io.Writer) (PruneConfig, error) {
	cfg := DefaultPruneConfig()
	if err := load("walrelay prune", usage, cfg.settings(), args, getenv, help); err != nil {
		return PruneConfig{}, err
	}
	if err := ReadSecretFile("postgres-dsn", cfg.PostgresDSNFile, &cfg.PostgresDSN); err != nil {
		return PruneConfig{}, err
	}
	if err := cfg.Validate(); err != nil {
		return PruneConfig{}, err
	}
	return cfg, nil
}
