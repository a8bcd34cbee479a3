package e2e

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walrelay/walrelay/internal/testwait"
)

// TestDebeziumTableSafetyNet: an outbox migrated from Debezium keeps the safety net.
// Debezium's documented outbox table (id, aggregatetype, aggregateid, type, payload) has
// no created_at. `walrelay config from-debezium` on the connector says so and names the
// step that adds it; before that step `run` relays and warns once with the step,
// `doctor` warns with it, and `status`, `replay` and `prune` each fail with one line
// naming it. After `walrelay migrate --table`, all of them succeed and `run` warns no
// more. A connector with table.field.event.timestamp maps that column to the record
// timestamp and to the time column both.
func TestDebeziumTableSafetyNet(t *testing.T) {
	env := requireEnv(t)
	run := make([]byte, 3)
	_, _ = crand.Read(run)
	name := "e2e_dbzt_" + hex.EncodeToString(run)
	table := "public." + name
	dir := filepath.Join(env.dir, "e2e-logs", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	pgExec(t, env.pgDSN, `CREATE TABLE `+qtable(table)+` (
		id            uuid         PRIMARY KEY,
		aggregatetype varchar(255) NOT NULL,
		aggregateid   varchar(255) NOT NULL,
		type          varchar(255) NOT NULL,
		payload       jsonb)`)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := dropSlot(ctx, t, env.pgDSN, name); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		p := pgPool(t, env.pgDSN)
		_ = p.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{name}.Sanitize())
		if t.Failed() {
			t.Logf("kept table %s and logs in %s", table, dir)
			return
		}
		_ = p.Exec(ctx, "DROP TABLE IF EXISTS "+qtable(table))
		deleteTopics(ctx, t, env.kafka, name+".")
		_ = os.RemoveAll(dir)
	})
	insert := func(aggregate string) {
		pgExec(t, env.pgDSN, `INSERT INTO `+qtable(table)+` (id, aggregatetype, aggregateid, type, payload)
			VALUES (gen_random_uuid(), $1, 'o-1', 'OrderCreated', '{"total": 1}')`, aggregate)
	}
	insert(name + "_before")

	// Debezium's connector, as Kafka Connect's REST API returns it.
	connector := func(extra map[string]string) string {
		cfg := map[string]string{
			"connector.class":   "io.debezium.connector.postgresql.PostgresConnector",
			"database.hostname": "127.0.0.1", "database.port": "5432", "database.user": "postgres",
			"database.password": "secret", "database.dbname": "postgres", "topic.prefix": name,
			"table.include.list": table, "plugin.name": "pgoutput", "slot.name": name + "_dbz",
			"transforms": "outbox", "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
			"transforms.outbox.route.topic.replacement": name + ".${routedByValue}",
		}
		for k, v := range extra {
			cfg[k] = v
		}
		b, err := json.Marshal(map[string]any{"name": name, "config": cfg})
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, "connector.json")
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	translate := func(file string) (yml, note string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(walrelayBin, "config", "from-debezium", file)
		cmd.Env, cmd.Stdout, cmd.Stderr = childEnv(nil), &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("walrelay config from-debezium: %v\n%s%s", err, stdout.String(), stderr.String())
		}
		return stdout.String(), stderr.String()
	}

	t.Run("event_timestamp_mapped", func(t *testing.T) {
		yml, _ := translate(connector(map[string]string{"transforms.outbox.table.field.event.timestamp": "occurred_at"}))
		for _, want := range []string{"column_timestamp: occurred_at", "created_at_column: occurred_at"} {
			if !strings.Contains(yml, want) {
				t.Errorf("from-debezium with table.field.event.timestamp: no %q in\n%s", want, yml)
			}
		}
		if strings.Contains(yml, "walrelay migrate") {
			t.Errorf("from-debezium with a time column: want no step to add one, got\n%s", yml)
		}
	})

	yml, _ := translate(connector(nil))
	step := "walrelay migrate --table " + table
	if !strings.Contains(yml, step) {
		t.Fatalf("from-debezium does not name the step %q:\n%s", step, yml)
	}
	// The tools name the same step in words (the table as the setting table).
	step = "walrelay migrate of table " + table
	ymlFile := filepath.Join(dir, "walrelay.yaml")
	if err := os.WriteFile(ymlFile, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	common := []string{"--config", ymlFile, "--postgres-dsn", env.pgDSN, "--kafka-brokers", env.kafka, "--slot", name, "--publication", name}
	cmd := func(command string, extra ...string) []string {
		return append(append([]string{command}, common...), extra...)
	}
	timeColumnWarnings := func(p *walrelayProc) int {
		n := 0
		for _, l := range p.logLines() {
			if l["level"] == "WARN" && strings.Contains(fmt.Sprint(l["error"], l["msg"]), "created_at") {
				n++
			}
		}
		return n
	}
	runOnce := func(logName string) *walrelayProc {
		t.Helper()
		p := startWalrelay(t, name, filepath.Join(dir, logName), cmd("run", "--metrics-addr", "127.0.0.1:0"), nil)
		p.waitReady(60 * time.Second)
		waitSlotStreaming(t, env.pgDSN, name, 60*time.Second, p)
		return p
	}

	// Before the step: run relays and says once what to add; the tools say it in one line.
	p := runOnce("run-1.log")
	testwait.Eventually(t, 30*time.Second, "run's warning about the time column", func() bool { return timeColumnWarnings(p) > 0 })
	insert(name + "_during")
	p.sigterm()
	if !p.waitExit(60 * time.Second) {
		t.Fatal("walrelay run did not stop on SIGTERM")
	}
	if !strings.Contains(p.log(), `"msg":"created publication"`) {
		t.Errorf("run created publication %s without saying so", name)
	}
	if n := timeColumnWarnings(p); n != 1 || !strings.Contains(p.log(), step) {
		t.Errorf("run before the step: %d warnings about created_at, want 1 naming %q\n%s", n, step, p.tail(20))
	}
	code, out := runCommand(t, 90*time.Second, cmd("doctor")...)
	if code != 0 || !strings.Contains(out, "WARN time-column") || !strings.Contains(out, step) {
		t.Errorf("doctor before the step: exit %d, want 0 with a WARN time-column line naming %q", code, step)
	}
	for _, c := range [][]string{cmd("status"), cmd("replay", "--dry-run", "--since", "1h"), cmd("prune", "--dry-run", "--older-than", "1h")} {
		code, out := runCommand(t, 90*time.Second, c...)
		if code == 0 || !strings.Contains(out, step) || strings.Count(strings.TrimSpace(out), "\n") > 12 {
			t.Errorf("%s before the step: exit %d, want a failure naming %q", c[0], code, step)
		}
	}

	// The step.
	code, out = runCommand(t, 90*time.Second, "migrate", "--postgres-dsn", env.pgDSN, "--table", table)
	if code != 0 || !strings.Contains(out, "003_time_column.sql") || !strings.Contains(out, "skipped migration") {
		t.Fatalf("walrelay migrate on Debezium's table: exit %d, want 0, the time column added and walrelay.emit skipped", code)
	}

	// After it: everything works, and run warns no more.
	code, out = runCommand(t, 90*time.Second, cmd("doctor")...)
	if code != 0 || !strings.Contains(out, "ok   time-column") {
		t.Errorf("doctor after the step: exit %d, want 0 with an ok time-column line", code)
	}
	code, out = runCommand(t, 90*time.Second, cmd("status")...)
	if code != 0 || !strings.Contains(out, "outbox_table         "+table) {
		t.Errorf("status after the step: exit %d, want 0 with the span of %s", code, table)
	}
	if code, _ := runCommand(t, 90*time.Second, cmd("replay", "--dry-run", "--since", "1h")...); code != 0 {
		t.Errorf("replay --dry-run after the step: exit %d, want 0", code)
	}
	if code, _ := runCommand(t, 90*time.Second, cmd("prune", "--dry-run", "--older-than", "1h")...); code != 0 {
		t.Errorf("prune --dry-run after the step: exit %d, want 0", code)
	}
	p = runOnce("run-2.log")
	testwait.Eventually(t, 30*time.Second, "the outbox span metrics of "+table, func() bool {
		m, err := p.metrics()
		_, ok := m[`walrelay_outbox_rows_estimate{table="`+table+`"}`]
		return err == nil && ok
	})
	p.sigterm()
	if !p.waitExit(60 * time.Second) {
		t.Fatal("walrelay run did not stop on SIGTERM")
	}
	for _, l := range p.logLines() {
		if l["level"] == "WARN" {
			t.Errorf("run after the step warned: %v", l)
		}
	}
}
