package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/walrelay/walrelay/cmd/walrelay/internal/config"
	"github.com/walrelay/walrelay/cmd/walrelay/internal/fromdebezium"
)

const fromDebeziumUsage = `Usage: walrelay config from-debezium [flags] <connector file>

Prints the walrelay configuration (YAML) equivalent to a Debezium Postgres
connector with the outbox EventRouter. The file is the connector's
configuration as Kafka Connect's REST API returns it
(GET /connectors/<name>: {"name": ..., "config": {...}}), or a .properties
file. Each key printed names the Debezium keys it comes from; the keys that
map to nothing are listed at the end as comments, with the reason. The
database password and any other secret are never printed. The mapping is
docs/migrating-from-debezium.md's table.
`

// fromDebeziumCommand is `walrelay config from-debezium <file>`.
func fromDebeziumCommand(_ context.Context, cfg config.FromDebeziumConfig, c *call) int {
	data, err := os.ReadFile(cfg.File)
	if err != nil {
		c.failed("read the connector file", err)
		return ExitFailure
	}
	name, raw, err := fromdebezium.ParseConnectorConfig(data)
	if err == nil {
		var t fromdebezium.Translation
		if t, err = fromdebezium.Translate(name, raw); err == nil {
			yml := t.YAML(filepath.Base(cfg.File))
			fmt.Fprint(c.stdout, yml)
			if err := t.Check(yml, ""); err != nil {
				c.failed("the translation is not a configuration walrelay run accepts", fmt.Errorf("%s", config.Explain(err)))
				return ExitFailure
			}
			return ExitOK
		}
	}
	c.failed("translate the connector", fmt.Errorf("%s: %w", cfg.File, err))
	return ExitFailure
}
