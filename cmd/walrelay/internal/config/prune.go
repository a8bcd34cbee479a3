package config

import (
	"log/slog"
	"slices"
	"time"

	"github.com/walrelay/walrelay/operator"

	"github.com/walrelay/walrelay/replication"
)

// PruneConfig is what `walrelay prune` needs.
type PruneConfig struct {
	Postgres
	Logging
	// Table is the outbox table, schema.name (default public.outbox).
	Table string
	// OlderThan is the age beyond which rows go; required, at least
	// operator.MinPruneAge.
	OlderThan time.Duration
	// BatchSize is the number of rows deleted per transaction (default
	// 10000).
	BatchSize int
	// CreatedAtColumn is the column compared with the cutoff (default
	// created_at).
	CreatedAtColumn string
	// DryRun counts what would go and changes nothing.
	DryRun bool
	// Slot is walrelay's replication slot: a row goes only once the slot
	// confirmed its transaction (operator.PruneGuard), unless Force.
	Slot  string
	Force bool
	// Kafka holds the Kafka settings (brokers, security, topic template,
	// dead-letter topic, delivery) that find the last event delivered when
	// the slot is gone: then rows older than it less RecoveryMargin go.
	// Without brokers, no row goes while the slot is gone.
	Kafka          Config
	RecoveryMargin time.Duration
}

// DefaultPruneConfig returns the prune configuration used when nothing is
// set; OlderThan has no default.
func DefaultPruneConfig() PruneConfig {
	return PruneConfig{Logging: defaultLogging(), Table: "public.outbox", BatchSize: 10000, CreatedAtColumn: "created_at",
		Slot: "walrelay", Kafka: Defaults(), RecoveryMargin: operator.DefaultRecoveryMargin}
}

// pruneKafkaKeys are the settings of walrelay run that prune takes to find
// the last delivered event (the whole Kafka security group too).
var pruneKafkaKeys = []string{"kafka-brokers", "kafka-client-id", "kafka-timeout", "topic", "dlq-topic", "delivery", "checkpoint-topic"}

func (c *PruneConfig) settings() []setting {
	ss := append(c.loggingSettings(), c.postgresSettings()...)
	return append(append(ss,
		setting{name: "table", group: GroupTables, usage: "outbox table, schema.name (one per run)", value: stringVal{&c.Table}},
		setting{name: "created-at-column", group: GroupTables, usage: "timestamp column compared with the cutoff", value: stringVal{&c.CreatedAtColumn}},
		setting{name: "older-than", group: GroupPrune, usage: "delete rows older than this age, e.g. 72h or 3d; required, at least 1h", value: ageVal{&c.OlderThan}},
		setting{name: "batch-size", group: GroupPrune, usage: "rows deleted per transaction", value: intVal{&c.BatchSize}},
		setting{name: "dry-run", group: GroupPrune, usage: "count what would be pruned, delete nothing", value: boolVal{&c.DryRun}},
		slotSetting(&c.Slot, "walrelay's replication slot: a row goes only once the slot confirmed its transaction"),
		setting{name: "force", group: GroupPrune, usage: "delete old rows even when the slot has not confirmed them, or is gone (their events may not be in Kafka)", value: boolVal{&c.Force}},
		setting{name: "recovery-margin", group: GroupPrune, usage: "with the slot gone and kafka-brokers set: keep the rows newer than the last delivered event less this", value: ageVal{&c.RecoveryMargin}},
	), c.kafkaSettings()...)
}

// kafkaSettings are run's settings of pruneKafkaKeys and of the Kafka
// security group, setting c.Kafka.
func (c *PruneConfig) kafkaSettings() []setting {
	var out []setting
	for _, st := range c.Kafka.settings() {
		if st.group == GroupSecurity || slices.Contains(pruneKafkaKeys, st.name) {
			out = append(out, st)
		}
	}
	return out
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
	case c.OlderThan < operator.MinPruneAge:
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
	if c.RecoveryMargin < 0 {
		return invalid("recovery-margin", "must not be negative")
	}
	if err := validateReplication(replication.Config{DSN: c.PostgresDSN, Slot: c.Slot}); err != nil {
		return err
	}
	if len(c.Kafka.KafkaBrokers) == 0 {
		return nil
	}
	k := c.deliveredConfig()
	return firstError(k.validateDelivery, k.validateTables, k.validateSink)
}

// deliveredConfig is run's configuration that finds the last delivered
// event: the Kafka settings, the slot and the table.
func (c PruneConfig) deliveredConfig() Config {
	k := c.Kafka
	k.Postgres, k.Slot, k.Tables = c.Postgres, c.Slot, []string{c.Table}
	return k
}

// Prune is prune's options for this configuration: with Kafka brokers, run's
// settings that find the last delivered event; log is their logger.
func (c PruneConfig) Prune(log *slog.Logger) (operator.PruneOptions, error) {
	o := operator.PruneOptions{DSN: c.PostgresDSN, PasswordSource: c.PasswordSource(), Table: c.Table, OlderThan: c.OlderThan, BatchSize: c.BatchSize,
		TimeColumn: c.CreatedAtColumn, DryRun: c.DryRun, Slot: c.Slot, Force: c.Force, RecoveryMargin: c.RecoveryMargin}
	if len(c.Kafka.KafkaBrokers) == 0 {
		return o, nil
	}
	ro, err := c.deliveredConfig().Relay(log)
	d := delivered(ro)
	o.Delivered = &d
	return o, err
}
