package config

// MigrateConfig is what `walrelay migrate` needs.
type MigrateConfig struct {
	Postgres
	Logging
	// Table is the outbox table to create, schema.name (default
	// public.outbox); its schema is created when missing.
	Table string
	// Partitioned creates the outbox partitioned by day.
	Partitioned bool
}

// DefaultMigrateConfig returns the migrate configuration used when nothing
// is set.
func DefaultMigrateConfig() MigrateConfig {
	return MigrateConfig{Logging: defaultLogging(), Table: "public.outbox"}
}

func (c *MigrateConfig) settings() []setting {
	ss := append(c.loggingSettings(), c.postgresSettings()...)
	return append(ss,
		setting{name: "table", group: GroupTables, usage: "outbox table to create, schema.name (the schema is created when missing)", value: stringVal{&c.Table}},
		setting{name: "partitioned", group: GroupTables, usage: "create the outbox partitioned by day (see migrations/partitioned)", value: boolVal{&c.Partitioned}},
	)
}

// Validate reports the first value migrate refuses, as a *Error.
func (c MigrateConfig) Validate() error {
	return firstError(c.Logging.validate, c.Postgres.validate, func() error { return oneTable(c.Table, "migrate") })
}
