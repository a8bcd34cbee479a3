package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/walrelay/walrelay/migrations"
	"github.com/walrelay/walrelay/operator"
	"github.com/walrelay/walrelay/test/pgtest"
)

func prune(env map[string]string, args ...string) (code int, stdout, stderr string) {
	var out, errw bytes.Buffer
	code = Main(context.Background(), append([]string{"prune"}, args...), func(k string) string { return env[k] }, &out, &errw)
	return code, out.String(), errw.String()
}

// logLines decodes the JSON log lines with message msg.
func logLines(t *testing.T, stderr, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			continue
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

func TestPruneUsage(t *testing.T) {
	const dsn = "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=1"
	for _, c := range []struct {
		name   string
		env    map[string]string
		args   []string
		code   int
		stderr []string
	}{
		{"help", nil, []string{"-h"}, ExitOK,
			[]string{"only deletes rows", "WAL", "at least 1h", "-older-than", "-batch-size", "-created-at-column", "-dry-run",
				"catalog_xmin", "-slot", "-force", "-recovery-margin", "-kafka-brokers"}},
		{"under 1h", nil, []string{"--postgres-dsn", dsn, "--older-than", "59m59s"}, ExitConfig,
			[]string{"below the minimum of 1h", "not relayed yet", "safe in the WAL"}},
		{"under 1h from env", map[string]string{"WALRELAY_POSTGRES_DSN": dsn, "WALRELAY_OLDER_THAN": "30m"}, nil, ExitConfig,
			[]string{"below the minimum of 1h"}},
		{"flag beats env", map[string]string{"WALRELAY_POSTGRES_DSN": dsn, "WALRELAY_OLDER_THAN": "3d"}, []string{"--older-than", "10m"}, ExitConfig,
			[]string{"below the minimum of 1h"}},
		{"zero", nil, []string{"--postgres-dsn", dsn, "--older-than", "0"}, ExitConfig, []string{"older-than", "required"}},
		{"no age", nil, []string{"--postgres-dsn", dsn}, ExitConfig, []string{"older-than", "required"}},
		{"no dsn", nil, []string{"--older-than", "3d"}, ExitConfig, []string{"postgres-dsn", "required"}},
		{"bad age", nil, []string{"--postgres-dsn", dsn, "--older-than", "3x"}, ExitConfig, []string{`"3x" is not a duration`}},
		{"bad batch", nil, []string{"--postgres-dsn", dsn, "--older-than", "3d", "--batch-size", "0"}, ExitConfig, []string{"batch-size"}},
		{"bad env batch", map[string]string{"WALRELAY_BATCH_SIZE": "many"}, []string{"--postgres-dsn", dsn, "--older-than", "3d"}, ExitConfig,
			[]string{"WALRELAY_BATCH_SIZE", "not a whole number"}},
		{"two tables", map[string]string{"WALRELAY_TABLE": "public.a,public.b"}, []string{"--postgres-dsn", dsn, "--older-than", "3d"}, ExitConfig,
			[]string{"one table per run"}},
		{"bad table", nil, []string{"--postgres-dsn", dsn, "--older-than", "3d", "--table", "a.b.c"}, ExitConfig, []string{"schema.table"}},
		{"extra argument", nil, []string{"--postgres-dsn", dsn, "--older-than", "3d", "now"}, ExitConfig, []string{"unexpected argument", "now"}},
		{"unreachable", nil, []string{"--postgres-dsn", dsn, "--older-than", "3d"}, ExitFailure, []string{"prune failed", "check the host and port in the Postgres DSN"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := prune(c.env, c.args...)
			if c.name == "help" { // -h prints the usage on stdout, nothing on stderr
				stdout, stderr = stderr, stdout
			}
			if code != c.code {
				t.Errorf("exit %d, want %d\nstderr: %s", code, c.code, stderr)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
			for _, w := range c.stderr {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
		})
	}
}

func TestPrunePlain(t *testing.T) {
	dsn, pg := testDatabase(t)
	pg.Exec("CREATE SCHEMA h5_prune")
	if err := operator.Migrate(context.Background(), operator.MigrateOptions{DSN: dsn, Table: "h5_prune.outbox"}, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	insert := func(n int, age string) {
		pg.Exec(`INSERT INTO h5_prune.outbox (aggregate_type, aggregate_id, event_type, created_at)
			SELECT 'a', i::text, 'e', now() - $1::interval FROM generate_series(1, $2) i`, age, n)
	}
	insert(7, "10 days")
	insert(5, "3 hours")
	insert(4, "90 minutes")
	insert(6, "10 minutes")
	// The batches and the cutoff, without the guard (TestPruneGuard).
	env := map[string]string{"WALRELAY_POSTGRES_DSN": dsn, "WALRELAY_TABLE": "h5_prune.outbox", "WALRELAY_FORCE": "true"}
	rows := func() int { return pg.Count("SELECT count(*) FROM h5_prune.outbox") }
	summary := regexp.MustCompile(`^(would prune|pruned) (\d+) rows older than (\S+) from h5_prune\.outbox`)

	code, stdout, stderr := prune(env, "--older-than", "2h", "--batch-size", "5", "--dry-run")
	if code != ExitOK {
		t.Fatalf("dry run: exit %d\n%s", code, stderr)
	}
	if m := summary.FindStringSubmatch(stdout); m == nil || m[1] != "would prune" || m[2] != "12" {
		t.Errorf("dry run: stdout %q, want would prune 12 rows", stdout)
	}
	if n := rows(); n != 22 {
		t.Errorf("dry run deleted %d rows", 22-n)
	}

	code, stdout, stderr = prune(env, "--older-than", "2h", "--batch-size", "5")
	if code != ExitOK {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	m := summary.FindStringSubmatch(stdout)
	if m == nil || m[1] != "pruned" || m[2] != "12" {
		t.Fatalf("stdout %q, want pruned 12 rows", stdout)
	}
	cutoff, err := time.Parse(time.RFC3339, m[3])
	if err != nil {
		t.Errorf("cutoff %q: %v", m[3], err)
	} else if d := time.Since(cutoff) - 2*time.Hour; d < -time.Minute || d > time.Minute {
		t.Errorf("cutoff %v is not 2h ago", cutoff)
	}
	var got []float64
	for _, l := range logLines(t, stderr, "pruned batch") {
		got = append(got, l["rows"].(float64))
		if l["total"] == nil || l["table"] != "h5_prune.outbox" {
			t.Errorf("batch log %v lacks total or table", l)
		}
	}
	if len(got) != 3 || got[0] != 5 || got[1] != 5 || got[2] != 2 {
		t.Errorf("batches %v, want [5 5 2]", got)
	}
	if n := rows(); n != 10 {
		t.Errorf("%d rows left, want 10", n)
	}
	if n := pg.Count("SELECT count(*) FROM h5_prune.outbox WHERE created_at < now() - interval '2 hours'"); n != 0 {
		t.Errorf("%d rows older than 2h left", n)
	}

	// An exact multiple of the batch size ends with an empty batch.
	insert(4, "2 days")
	code, stdout, stderr = prune(env, "--older-than", "1d", "--batch-size", "2")
	if code != ExitOK || !strings.HasPrefix(stdout, "pruned 4 rows") {
		t.Errorf("exit %d, stdout %q\n%s", code, stdout, stderr)
	}
	if n := rows(); n != 10 {
		t.Errorf("%d rows left, want 10", n)
	}

	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"missing table", []string{"--table", "h5_prune.nope"}, "table h5_prune.nope does not exist"},
		{"missing column", []string{"--created-at-column", "born"}, "no column"},
		{"not a timestamp", []string{"--created-at-column", "aggregate_id"}, "not a timestamp"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := prune(env, append([]string{"--older-than", "2h"}, c.args...)...)
			if code != ExitFailure || stdout != "" || !strings.Contains(stderr, c.want) {
				t.Errorf("exit %d, stdout %q, stderr lacks %q:\n%s", code, stdout, c.want, stderr)
			}
		})
	}
}

func TestPrunePartitioned(t *testing.T) {
	dsn, pg := testDatabase(t)
	pg.Exec("CREATE SCHEMA h5_pp")
	createPartitionedOutbox(t, pg, `"h5_pp"."outbox"`)
	dayStart := func(off int) string { return time.Now().UTC().AddDate(0, 0, off).Format("2006-01-02") + " 00:00:00+00" }
	day := func(off int) string { return time.Now().UTC().AddDate(0, 0, off).Format("20060102") }
	for _, off := range []int{-10, -5} {
		pg.Exec("CREATE TABLE h5_pp.outbox_p" + day(off) + " PARTITION OF h5_pp.outbox FOR VALUES FROM ('" + dayStart(off) + "') TO ('" + dayStart(off+1) + "')")
	}
	insert := func(n int, at string) {
		pg.Exec(`INSERT INTO h5_pp.outbox (aggregate_type, aggregate_id, event_type, created_at)
			SELECT 'a', i::text, 'e', $1::timestamptz FROM generate_series(1, $2) i`, at, n)
	}
	insert(3, dayStart(-10))
	insert(2, dayStart(-5))
	insert(4, dayStart(-7)) // no partition: the default one
	insert(1, dayStart(-1)) // default, newer than the cutoff
	insert(2, dayStart(0))
	rows := func() int { return pg.Count("SELECT count(*) FROM h5_pp.outbox") }
	env := map[string]string{"WALRELAY_POSTGRES_DSN": dsn, "WALRELAY_FORCE": "true"} // the guard: TestPruneGuardPartitioned

	code, stdout, stderr := prune(env, "--table", "h5_pp.outbox", "--older-than", "2d", "--dry-run")
	want := "would drop 2 partitions (h5_pp.outbox_p" + day(-10) + ": 3 rows, h5_pp.outbox_p" + day(-5) +
		": 2 rows) and prune 4 rows from the default partition h5_pp.outbox_default, older than "
	if code != ExitOK || !strings.HasPrefix(stdout, want) {
		t.Fatalf("dry run: exit %d, stdout %q, want prefix %q\n%s", code, stdout, want, stderr)
	}
	if n := rows(); n != 12 {
		t.Errorf("dry run deleted %d rows", 12-n)
	}

	code, stdout, stderr = prune(env, "--table", "h5_pp.outbox", "--older-than", "2d", "--batch-size", "3")
	want = "dropped 2 partitions (h5_pp.outbox_p" + day(-10) + ", h5_pp.outbox_p" + day(-5) +
		") and pruned 4 rows from the default partition h5_pp.outbox_default, older than "
	if code != ExitOK || !strings.HasPrefix(stdout, want) {
		t.Fatalf("exit %d, stdout %q, want prefix %q\n%s", code, stdout, want, stderr)
	}
	if n := len(logLines(t, stderr, "dropped partition")); n != 2 {
		t.Errorf("%d dropped partition logs, want 2:\n%s", n, stderr)
	}
	if n := len(logLines(t, stderr, "pruned batch")); n != 2 {
		t.Errorf("%d pruned batch logs, want 2 (3 + 1 rows):\n%s", n, stderr)
	}
	if n := rows(); n != 3 {
		t.Errorf("%d rows left, want 3", n)
	}
	if n := pg.Count("SELECT count(*) FROM pg_class WHERE relname IN ($1, $2)", "outbox_p"+day(-10), "outbox_p"+day(-5)); n != 0 {
		t.Errorf("%d old partitions left", n)
	}

	// A partitioned table without walrelay's partition functions.
	pg.Exec("CREATE TABLE h5_pp.bare (id int, created_at timestamptz NOT NULL) PARTITION BY RANGE (created_at)")
	pg.Exec("DROP FUNCTION walrelay.outbox_drop_partitions(interval, regclass)")
	code, stdout, stderr = prune(env, "--table", "h5_pp.bare", "--older-than", "2d")
	if code != ExitFailure || stdout != "" ||
		!strings.Contains(stderr, "walrelay.outbox_drop_partitions(interval, regclass) does not exist") ||
		!strings.Contains(stderr, "migrations/partitioned/001_outbox_partitioned.sql") {
		t.Errorf("without the functions: exit %d, stdout %q\n%s", code, stdout, stderr)
	}
}

// createPartitionedOutbox creates the outbox table quoted partitioned by
// day, with walrelay's partition functions.
func createPartitionedOutbox(t *testing.T, pg *pgtest.Conn, quoted string) {
	t.Helper()
	for _, set := range []func() ([]migrations.Migration, error){migrations.Partitioned, migrations.All} {
		ms, err := set()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if _, err := pg.Conn.PgConn().Exec(context.Background(), m.Render(quoted)).ReadAll(); err != nil {
				t.Fatalf("apply %s: %v", m.Name, err)
			}
		}
	}
}
