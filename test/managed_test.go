package e2e

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestManagedPlatformStandIns runs walrelay against vanilla Postgres dressed
// as the managed services (none of which runs here): roles and settings
// that only those services create, set per role (ALTER ROLE ... SET takes
// any dotted name as a custom setting), so that walrelay recognises the
// service from the server as it would on the real one. What vanilla
// Postgres itself does is not dressed up: it refuses a walsender to a role
// without REPLICATION whatever its memberships, so the RDS stand-in shows
// walrelay's one-line refusal naming the fix of both kinds of platform
// (walrelay's own decision on the catalog answers of RDS and Aurora is
// tested in replication/platform_test.go). The doctor output of each
// stand-in is logged (runCommand).
func TestManagedPlatformStandIns(t *testing.T) {
	env := requireEnv(t)
	c := newContract(t, env, "hmgd")
	c.migrate(env.pgDSN, c.table)
	leftovers, err := pgPool(t, env.pgDSN).strings(context.Background(), `SELECT rolname::text FROM pg_roles WHERE rolname LIKE $1`, c.like())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range leftovers {
		_ = pgPool(t, env.pgDSN).Exec(context.Background(), "DROP OWNED BY "+pgx.Identifier{r}.Sanitize()+"; DROP ROLE "+pgx.Identifier{r}.Sanitize())
	}
	doctor := func(t *testing.T, dsn string) (int, string) {
		t.Helper()
		return runCommand(t, 90*time.Second, "doctor", "--postgres-dsn", dsn, "--kafka-brokers", env.kafka,
			"--slot", c.name, "--publication", c.name, "--table", c.table) // logs the output

	}
	line := func(out, prefix string, keywords []string) string {
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, prefix) && hasKeywords(l, keywords) {
				return l
			}
		}
		return ""
	}
	// dressed creates a login role with options and the platform's settings.
	dressed := func(t *testing.T, role, options string, settings map[string]string) string {
		createLoginRole(t, env, role, options)
		for k, v := range settings {
			pgExec(t, env.pgDSN, "ALTER ROLE "+pgx.Identifier{role}.Sanitize()+" SET "+k+" = '"+v+"'")
		}
		return dsnWithUser(t, env.pgDSN, role, "", "")
	}

	t.Run("rds_replication_member", func(t *testing.T) {
		// rds_replication as RDS creates it: the role that grants logical replication there.
		var created bool
		if err := pgPool(t, env.pgDSN).scan(context.Background(), `SELECT NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'rds_replication')`, nil, &created); err != nil {
			t.Fatal(err)
		}
		if created {
			pgExec(t, env.pgDSN, "CREATE ROLE rds_replication NOLOGIN")
			t.Cleanup(func() { pgExec(t, env.pgDSN, "DROP ROLE IF EXISTS rds_replication") }) // after its member
		}
		dsn := dressed(t, c.name+"_rds", "IN ROLE rds_replication", map[string]string{"rds.logical_replication": "on", "rds.extensions": "pglogical"})
		keywords := []string{"ALTER ROLE", "WITH REPLICATION", "GRANT rds_replication TO", c.name + "_rds", "rds.logical_replication = 1"}
		l := refusedAtStart(t, c, keywords, "run", "--postgres-dsn", dsn, "--kafka-brokers", env.kafka, "--slot", c.name,
			"--publication", c.name, "--table", c.table, "--topic", c.topicTemplate(), "--metrics-addr", "127.0.0.1:0")
		if strings.Contains(l, "\n") {
			t.Errorf("the refusal is more than one line: %q", l)
		}
		code, out := doctor(t, dsn)
		if code == 0 || line(out, "FAIL", keywords) == "" {
			t.Errorf("doctor: exit %d, want a FAIL line with %q", code, keywords)
		}
	})

	t.Run("neon", func(t *testing.T) {
		dsn := dressed(t, c.name+"_neon", "SUPERUSER", map[string]string{"neon.timeline_id": "d2b8e3a1f0c94e7b9a6c5d4e3f2a1b0c", "neon.tenant_id": "0f1e2d3c4b5a69788796a5b4c3d2e1f0"})
		code, out := doctor(t, dsn)
		if code != 0 || line(out, "WARN", []string{"platform", "Neon", "neon.* settings", "40 hours", "walrelay replay"}) == "" {
			t.Errorf("doctor: exit %d, want exit 0 and a WARN platform line about Neon's removal of inactive slots", code)
		}
	})

	t.Run("rds_member_ok", func(t *testing.T) {
		// A superuser dressed as RDS's master user: doctor names the platform and passes.
		dsn := dressed(t, c.name+"_rdsok", "SUPERUSER", map[string]string{"rds.logical_replication": "on", "rds.extensions": "pglogical"})
		code, out := doctor(t, dsn)
		if code != 0 || line(out, "ok", []string{"platform", "Amazon RDS", "rds.* settings", "docs/managed-services.md"}) == "" {
			t.Errorf("doctor: exit %d, want exit 0 and an ok platform line naming Amazon RDS", code)
		}
	})

	t.Run("pooler_port", func(t *testing.T) {
		u, err := url.Parse(env.pgDSN)
		if err != nil {
			t.Fatal(err)
		}
		u.Host = "127.0.0.1:6543"
		dsn := u.String()
		code, out := doctor(t, dsn)
		if code == 0 || line(out, "FAIL", []string{"port 6543", "pooler", "replication connection"}) == "" {
			t.Errorf("doctor: exit %d, want a FAIL line naming the pooler port", code)
		}
	})
}

// TestManagedWALLevelStandIns: on a server whose wal_level is not logical
// (a private cluster with wal_level=replica) dressed as each managed service
// that manages wal_level through its own switch, walrelay's refusal and
// doctor name that switch: the RDS parameter group, the Cloud SQL flag, the
// Azure server parameter.
func TestManagedWALLevelStandIns(t *testing.T) {
	env := requireEnv(t)
	priv, _ := startPrivateCluster(t, env, "WALRELAY_TEST_PG_WAL_LEVEL=replica")
	for _, tc := range []struct {
		name     string
		settings map[string]string
		keywords []string
	}{
		{"rds", map[string]string{"rds.logical_replication": "off", "rds.extensions": "pglogical"}, []string{"wal_level", "rds.logical_replication = 1", "parameter group", "reboot"}},
		{"cloudsql", map[string]string{"cloudsql.logical_decoding": "off", "cloudsql.iam_authentication": "on"}, []string{"wal_level", "cloudsql.logical_decoding to on"}},
		{"azure", map[string]string{"azure.extensions": "pg_stat_statements"}, []string{"wal_level", "server parameter wal_level", "Server parameters in the portal"}},
		{"selfmanaged", nil, []string{"wal_level", "ALTER SYSTEM SET wal_level = logical"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			role := "e2e_walstand_" + tc.name
			createLoginRole(t, priv, role, "SUPERUSER")
			for k, v := range tc.settings {
				pgExec(t, priv.pgDSN, "ALTER ROLE "+pgx.Identifier{role}.Sanitize()+" SET "+k+" = '"+v+"'")
			}
			dsn := dsnWithUser(t, priv.pgDSN, role, "", "")
			code, out := runCommand(t, 90*time.Second, "doctor", "--postgres-dsn", dsn, "--kafka-brokers", env.kafka,
				"--slot", role, "--publication", role, "--table", "public.outbox") // logs the output
			var fail string
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, "FAIL server") && hasKeywords(l, tc.keywords) {
					fail = l
				}
			}
			if code == 0 || fail == "" {
				t.Errorf("doctor: exit %d, want a FAIL server line with %q", code, tc.keywords)
			}
		})
	}
}
