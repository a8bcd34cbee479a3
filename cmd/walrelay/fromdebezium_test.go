package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigFromDebezium: `walrelay config from-debezium <file>` prints a configuration
// walrelay run accepts; the file is its one argument, before or after the flags; a file
// that is no connector configuration fails naming it.
func TestConfigFromDebezium(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "connector.properties")
	if err := os.WriteFile(file, []byte(`connector.class=io.debezium.connector.postgresql.PostgresConnector
database.hostname=db
database.dbname=app
database.user=dbz
database.password=not-printed
table.include.list=public.outbox
transforms=outbox
transforms.outbox.type=io.debezium.transforms.outbox.EventRouter
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"config", "from-debezium", file},
		{"config", "from-debezium", "--log-level", "warn", file},
		{"config", "from-debezium", file, "--log-format=json"},
	} {
		code, out := mainOut(nil, args...)
		if code != ExitOK || !strings.Contains(out, "table: public.outbox\n") || !strings.Contains(out, "topic: outbox.event.{aggregate_type}\n") ||
			strings.Contains(out, "not-printed") {
			t.Errorf("walrelay %s: exit %d\n%s", strings.Join(args, " "), code, out)
		}
		yml := filepath.Join(dir, "walrelay.yaml")
		if err := os.WriteFile(yml, []byte(out), 0o600); err != nil {
			t.Fatal(err)
		}
		// The output is a configuration file of every command (cutover takes from_slot).
		if code, out := mainOut(nil, "run", "--config", yml, "--kafka-brokers", "k:9092", "--postgres-dsn", "::bad"); code != ExitConfig || !strings.Contains(out, "postgres-dsn") {
			t.Errorf("run with the translation: exit %d\n%s", code, out)
		}
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"config", "from-debezium"}, ExitConfig, "missing <connector file>"},
		{[]string{"config", "from-debezium", file, "other"}, ExitConfig, `unexpected argument "other"`},
		{[]string{"config", "from-debezium", "--bogus", file}, ExitConfig, "bogus"},
		{[]string{"config", "from-debezium", filepath.Join(dir, "missing.json")}, ExitFailure, "missing.json"},
		{[]string{"config", "from-debezium", "-h"}, ExitOK, "Usage: walrelay config from-debezium"},
	} {
		if code, out := mainOut(nil, c.args...); code != c.code || !strings.Contains(out, c.want) {
			t.Errorf("walrelay %s: exit %d, want %d and %q\n%s", strings.Join(c.args, " "), code, c.code, c.want, out)
		}
	}
	if err := os.WriteFile(file, []byte("connector.class=io.debezium.connector.mysql.MySqlConnector\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out := mainOut(nil, "config", "from-debezium", file); code != ExitFailure || !strings.Contains(out, "MySqlConnector") {
		t.Errorf("a MySQL connector: exit %d\n%s", code, out)
	}
}
