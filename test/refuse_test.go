package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// startReplicaCluster starts a second, throwaway Postgres with wal_level=replica on its
// own port and state dir, and stops it at the end of the test. It returns its DSN.
func startReplicaCluster(t *testing.T, env *testEnv) string {
	t.Helper()
	dir, err := os.MkdirTemp(env.dir, "walrelay-e2e-replica-")
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	extra := []string{
		"WALRELAY_TEST_DIR=" + dir,
		"WALRELAY_TEST_PG_PORT=" + strconv.Itoa(port),
		"WALRELAY_TEST_PG_WAL_LEVEL=replica",
	}
	if env.pgBin != "" {
		extra = append(extra, "WALRELAY_TEST_PGBIN="+env.pgBin)
	}
	t.Cleanup(func() {
		if err := runEnvScript(t, env, 2*time.Minute, extra, "pg.sh", "stop"); err != nil {
			t.Errorf("cleanup: stop the wal_level=replica cluster: %v", err)
			return
		}
		_ = os.RemoveAll(dir)
	})
	if err := runEnvScript(t, env, 3*time.Minute, extra, "pg.sh", "start"); err != nil {
		t.Fatalf("start a wal_level=replica cluster: %v", err)
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestRefusesToStart: bad configuration and missing prerequisites make walrelay exit
// non-zero, promptly, with an ERROR log line that names the problem.
func TestRefusesToStart(t *testing.T) {
	env := requireEnv(t)
	s := newScenario(t, env, "refuse")
	replicaDSN := startReplicaCluster(t, env)
	s.migrate(replicaDSN, "public.outbox")
	missingTable := s.name + "_missing"

	type tc struct {
		name string
		// args replaces a default flag value (with a value of "" the flag is left out)
		// or, for a flag without a default, adds it.
		args map[string]string
		// keywords must all appear (case-insensitively) in one ERROR line; "a|b" accepts
		// either alternative.
		keywords []string
	}
	cases := []tc{
		{"wal_level_replica", map[string]string{"--postgres-dsn": replicaDSN, "--table": "public.outbox"}, []string{"wal_level", "logical"}},
		{"table_missing", map[string]string{"--table": "public." + missingTable}, []string{missingTable}},
		{"broker_unreachable", map[string]string{"--kafka-brokers": "127.0.0.1:1"}, []string{"127.0.0.1:1"}},
		{"negative_max_in_flight", map[string]string{"--max-in-flight": "-5"}, []string{"max-in-flight|max_in_flight|maxinflight"}},
		{"unknown_topic_placeholder", map[string]string{"--topic": "x.{nope}"}, []string{"nope"}},
		{"missing_postgres_dsn", map[string]string{"--postgres-dsn": ""}, []string{"postgres-dsn|postgres_dsn"}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			slot := fmt.Sprintf("%s_%d", s.name, i)
			t.Cleanup(func() {
				// A walrelay that got far enough may have created these on the main cluster.
				pgExec(t, env.pgDSN, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{slot}.Sanitize())
				pgExec(t, env.pgDSN, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active`, slot)
			})
			flags := map[string]string{
				"--postgres-dsn":  env.pgDSN,
				"--kafka-brokers": env.kafka,
				"--slot":          slot,
				"--publication":   slot,
				"--table":         s.table,
				"--topic":         s.topicTemplate(),
				"--metrics-addr":  "127.0.0.1:0",
			}
			for k, v := range c.args {
				flags[k] = v
			}
			args := []string{"run"}
			for _, k := range sortedKeys(flags) {
				if flags[k] != "" {
					args = append(args, k, flags[k])
				}
			}
			p := startWalrelay(t, c.name, filepath.Join(s.logDir, c.name+".log"), args, nil)
			const limit = 60 * time.Second
			if !p.waitExit(limit) {
				t.Fatalf("walrelay still running %s after start; want a prompt refusal\n%s", limit, p.tail(40))
			}
			took := time.Since(p.started).Round(time.Millisecond)
			if code := p.exitCode(); code <= 0 {
				t.Errorf("exit status %s, want a non-zero exit code", p.exitStatus())
			}
			line := findErrorLine(p, c.keywords)
			if line == "" {
				t.Errorf("no ERROR log line mentions all of %q\n%s", c.keywords, p.tail(40))
				return
			}
			t.Logf("refused in %s with %s: %s", took, p.exitStatus(), line)
			t.Logf("scenario=refuse/%s exit=%d took=%s error_line=found", c.name, p.exitCode(), took)
		})
	}
}

// findErrorLine returns the first JSON log line with level ERROR that contains every
// keyword (case-insensitively; "a|b" matches either).
func findErrorLine(p *walrelayProc, keywords []string) string {
	for _, raw := range strings.Split(p.log(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(raw), &m) != nil {
			continue
		}
		if lvl, _ := m["level"].(string); !strings.EqualFold(lvl, "ERROR") {
			continue
		}
		line := strings.ToLower(raw)
		ok := true
		for _, kw := range keywords {
			found := false
			for _, alt := range strings.Split(kw, "|") {
				found = found || strings.Contains(line, strings.ToLower(alt))
			}
			ok = ok && found
		}
		if ok {
			return raw
		}
	}
	return ""
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
