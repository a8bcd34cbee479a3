package e2e

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestRefusesToStart: bad configuration and missing prerequisites make walrelay exit
// non-zero, promptly, with an ERROR log line that names the problem.
func TestRefusesToStart(t *testing.T) {
	env := requireEnv(t)
	s := newScenario(t, env, "refuse")
	replica, _ := startPrivateCluster(t, env, "WALRELAY_TEST_PG_WAL_LEVEL=replica")
	replicaDSN := replica.pgDSN
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
			line := errorLine(p.log(), c.keywords)
			if line == "" {
				t.Errorf("no ERROR log line mentions all of %q\n%s", c.keywords, p.tail(40))
				return
			}
			t.Logf("refused in %s with %s: %s", took, p.exitStatus(), line)
			t.Logf("scenario=refuse/%s exit=%d took=%s error_line=found", c.name, p.exitCode(), took)
		})
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
