package replication

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestPlatformPrivilege feeds the privilege and wal_level checks the catalog
// answers each managed service gives. They are stand-ins written from the
// services' documentation (none of them runs here): on RDS and Aurora a
// role gets logical replication by membership in rds_replication while
// rolreplication stays false, and the services are told apart by the
// settings and roles only they create. Each refusal names that service's
// own fix.
func TestPlatformPrivilege(t *testing.T) {
	rds := func(f serverFacts) serverFacts {
		f.Settings = map[string]string{"rds.extensions": "pg_stat_statements,pglogical", "rds.logical_replication": "on", "rds.force_ssl": "1"}
		f.Roles = map[string]bool{"rds_superuser": true, "rds_replication": true}
		return f
	}
	aurora := func(f serverFacts) serverFacts { f = rds(f); f.Aurora = true; return f }
	tests := []struct {
		name       string
		facts      serverFacts
		platform   Platform
		walFix     string // "" when wal_level is fine
		privFix    string // "" when the role may replicate
		noteHas    string
		noteWarn   bool
		evidenceIn string
	}{
		{name: "self-managed superuser", facts: serverFacts{WALLevel: "logical", User: "postgres", Super: true}},
		{name: "self-managed no privilege", facts: serverFacts{WALLevel: "replica", User: "relay"},
			walFix: "ALTER SYSTEM SET wal_level = logical", privFix: `ALTER ROLE "relay" WITH REPLICATION; as a superuser`},
		{name: "RDS member of rds_replication", facts: rds(serverFacts{WALLevel: "logical", User: "relay", RDSReplication: true}),
			platform: PlatformRDS, noteHas: "docs/managed-services.md", evidenceIn: "rds.* settings, role rds_replication, role rds_superuser"},
		{name: "RDS no grant", facts: rds(serverFacts{WALLevel: "logical", User: "relay"}),
			platform: PlatformRDS, privFix: `GRANT rds_replication TO "relay"; as the master user (Amazon RDS`},
		{name: "RDS logical replication off", facts: rds(serverFacts{WALLevel: "replica", User: "relay", RDSReplication: true}),
			platform: PlatformRDS, walFix: "rds.logical_replication = 1 in the DB instance's custom DB parameter group and reboot"},
		{name: "Aurora member of rds_replication", facts: aurora(serverFacts{WALLevel: "logical", User: "relay", RDSReplication: true}),
			platform: PlatformAurora, evidenceIn: "aurora_version()"},
		{name: "Aurora off, no grant", facts: aurora(serverFacts{WALLevel: "replica", User: "relay"}),
			platform: PlatformAurora, walFix: "DB cluster parameter group and reboot the writer", privFix: `GRANT rds_replication TO "relay";`},
		{name: "Cloud SQL", facts: serverFacts{WALLevel: "replica", User: "relay",
			Settings: map[string]string{"cloudsql.logical_decoding": "off", "cloudsql.iam_authentication": "on"}, Roles: map[string]bool{"cloudsqlsuperuser": true}},
			platform: PlatformCloudSQL, walFix: "cloudsql.logical_decoding to on", privFix: `ALTER USER "relay" WITH REPLICATION; as a member of cloudsqlsuperuser`},
		{name: "AlloyDB", facts: serverFacts{WALLevel: "replica", User: "relay",
			Settings: map[string]string{"alloydb.logical_decoding": "off", "alloydb.iam_authentication": "on"}, Roles: map[string]bool{"alloydbsuperuser": true}},
			platform: PlatformAlloyDB, walFix: "alloydb.logical_decoding to on", privFix: "as a member of alloydbsuperuser"},
		{name: "Azure flexible server before 17", facts: serverFacts{WALLevel: "replica", User: "relay",
			Settings: map[string]string{"azure.extensions": "pg_stat_statements", "shared_preload_libraries": "pg_cron,pg_stat_statements"}, Roles: map[string]bool{"azure_pg_admin": true}},
			platform: PlatformAzure, walFix: "server parameter wal_level to logical", privFix: "as the server's administrator (a member of azure_pg_admin)",
			noteHas: "pg_failover_slots", noteWarn: true},
		{name: "Azure with pg_failover_slots", facts: serverFacts{WALLevel: "logical", User: "relay", Replication: true,
			Settings: map[string]string{"azure.extensions": "pg_failover_slots", "shared_preload_libraries": "pg_failover_slots"}, Roles: map[string]bool{"azure_pg_admin": true}},
			platform: PlatformAzure},
		{name: "Neon", facts: serverFacts{WALLevel: "replica", User: "relay",
			Settings: map[string]string{"neon.timeline_id": "0123", "neon.tenant_id": "4567"}, Roles: map[string]bool{"neon_superuser": true}},
			platform: PlatformNeon, walFix: "Neon project's settings", privFix: "as a member of neon_superuser",
			noteHas: "inactive for about 40 hours", noteWarn: true},
		{name: "Supabase", facts: serverFacts{WALLevel: "logical", User: "relay", Roles: map[string]bool{"supabase_admin": true}},
			platform: PlatformSupabase, privFix: "as the postgres user"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.facts.platform(); got != tc.platform {
				t.Errorf("platform = %q, want %q", got, tc.platform)
			}
			checkFix := func(what string, err error, want string) {
				t.Helper()
				var pe *PrereqError
				switch {
				case want == "" && err != nil:
					t.Errorf("%s refused: %v", what, err)
				case want != "" && (!errors.As(err, &pe) || !strings.Contains(pe.Fix, want)):
					t.Errorf("%s: %v, want a *PrereqError whose fix says %q", what, err, want)
				case want != "" && strings.Contains(err.Error(), "\n"):
					t.Errorf("%s: %q is more than one line", what, err)
				}
			}
			checkFix("wal_level", tc.facts.checkWALLevel(), tc.walFix)
			checkFix("privilege", tc.facts.checkPrivilege(), tc.privFix)
			note, warn := tc.facts.platformNote(150000)
			if tc.platform == "" && note != "" {
				t.Errorf("self-managed: platform note %q", note)
			}
			if tc.platform != "" && !strings.HasPrefix(note, string(tc.platform)+" (recognised by ") {
				t.Errorf("platform note %q does not name %s and its evidence", note, tc.platform)
			}
			if !strings.Contains(note, tc.noteHas) || warn != tc.noteWarn {
				t.Errorf("platform note %q (warn %v), want %q (warn %v)", note, warn, tc.noteHas, tc.noteWarn)
			}
			if tc.evidenceIn != "" && !strings.Contains(tc.facts.evidence(), tc.evidenceIn) {
				t.Errorf("evidence %q, want %q", tc.facts.evidence(), tc.evidenceIn)
			}
		})
	}
}

// TestDSNPooler: a DSN that points at a connection pooler or proxy that
// cannot carry a replication connection is named with the endpoint to use.
func TestDSNPooler(t *testing.T) {
	tests := []struct{ dsn, want string }{
		{"postgres://postgres.abcdefgh:pw@aws-0-eu-central-1.pooler.supabase.com:5432/postgres", "db.<project-ref>.supabase.co:5432"},
		{"postgres://u@aws-0-eu-central-1.pooler.supabase.com:6543/postgres", "Supavisor"},
		{"postgres://u@db.abcdefgh.supabase.co:6543/postgres", "port 6543"},
		{"host=orders.proxy-c1a2b3c4d5e6.eu-west-1.rds.amazonaws.com user=u", "RDS Proxy"},
		{"postgres://u@ep-cool-darkness-123456-pooler.us-east-2.aws.neon.tech/neondb", "without -pooler"},
		{"postgres://u@pgbouncer.internal:6432/app", "PgBouncer"},
		{"postgres://u@db.abcdefgh.supabase.co:5432/postgres", ""},
		{"postgres://u@orders.c1a2b3c4d5e6.eu-west-1.rds.amazonaws.com:5432/app", ""},
		{"postgres://u@ep-cool-darkness-123456.us-east-2.aws.neon.tech/neondb", ""},
	}
	for _, tc := range tests {
		pc, err := pgconn.ParseConfig(tc.dsn)
		if err != nil {
			t.Fatal(err)
		}
		got := DSNPooler(pc)
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("DSNPooler(%s) = %q, want %q", tc.dsn, got, tc.want)
		}
	}
}
