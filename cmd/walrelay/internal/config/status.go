package config

import "github.com/walrelay/walrelay/replication"

// StatusConfig is what `walrelay status` needs.
type StatusConfig struct {
	Postgres
	Logging
	// Slot is the replication slot shown (default walrelay).
	Slot string
}

// DefaultStatusConfig returns the status configuration used when nothing is
// set.
func DefaultStatusConfig() StatusConfig {
	return StatusConfig{Logging: defaultLogging(), Slot: "walrelay"}
}

func (c *StatusConfig) settings() []setting {
	ss := append(c.loggingSettings(), c.postgresSettings()...)
	return append(ss, slotSetting(&c.Slot, "replication slot to show"))
}

// Validate reports the first value status refuses, as a *Error.
func (c StatusConfig) Validate() error {
	return firstError(c.Logging.validate, c.Postgres.validate,
		func() error { return validateReplication(replication.Config{DSN: c.PostgresDSN, Slot: c.Slot}) })
}
