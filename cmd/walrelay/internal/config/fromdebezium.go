package config

// FromDebeziumConfig is what `walrelay config from-debezium` needs: the file
// of a connector's configuration (its one argument).
type FromDebeziumConfig struct {
	Logging
	File string
}

// DefaultFromDebeziumConfig returns its configuration when nothing is set.
func DefaultFromDebeziumConfig() FromDebeziumConfig {
	return FromDebeziumConfig{Logging: defaultLogging()}
}

func (c *FromDebeziumConfig) settings() []setting { return c.loggingSettings() }

// arg takes the file, the command's one argument.
func (c *FromDebeziumConfig) arg() (string, func(string)) {
	return "<connector file>", func(s string) { c.File = s }
}

// Validate reports the first value from-debezium refuses.
func (c FromDebeziumConfig) Validate() error { return c.Logging.validate() }
