package replication

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Managed Postgres services grant logical replication and turn on logical
// decoding each in its own way, and an operator can only apply the fix the
// service offers (on RDS nobody may run ALTER ROLE ... WITH REPLICATION).
// walrelay recognises the service from what only it puts in the server
// (settings and roles), never from a guess, and names that service's fix.

// Platform is a managed Postgres service, "" for self-managed Postgres (or
// a service walrelay does not recognise).
type Platform string

// The platforms walrelay recognises.
const (
	PlatformRDS      Platform = "Amazon RDS"
	PlatformAurora   Platform = "Amazon Aurora"
	PlatformCloudSQL Platform = "Cloud SQL"
	PlatformAlloyDB  Platform = "AlloyDB"
	PlatformAzure    Platform = "Azure Database for PostgreSQL"
	PlatformNeon     Platform = "Neon"
	PlatformSupabase Platform = "Supabase"
)

// platformSettings and platformRoles are what only each service puts in
// the server: setting prefixes (its own GUCs, listed in pg_settings) and
// roles.
var (
	platformSettingPrefixes = []string{"rds.", "cloudsql.", "alloydb.", "azure.", "neon."}
	platformRoles           = []string{"rds_superuser", "rds_replication", "cloudsqlsuperuser", "alloydbsuperuser",
		"azure_pg_admin", "neon_superuser", "supabase_admin"}
)

// serverFacts are the catalog's answers the prerequisite check decides on.
type serverFacts struct {
	WALLevel    string
	User        string
	Super       bool // rolsuper
	Replication bool // rolreplication
	// RDSReplication: the role is a member of rds_replication, the role by
	// which RDS and Aurora grant logical replication (rolreplication stays
	// false there).
	RDSReplication bool
	// Settings are the server's settings under the platforms' prefixes,
	// and shared_preload_libraries, with their values.
	Settings map[string]string
	// Roles are the platform roles that exist.
	Roles map[string]bool
	// Aurora: the server has aurora_version().
	Aurora bool
}

// markerSettings are settings of the platforms read by name as well:
// pg_settings leaves out custom settings no loaded module defines (what a
// stand-in for a platform sets), though the platforms' own show there.
const markerSettings = `'rds.logical_replication', 'rds.extensions', 'cloudsql.logical_decoding', 'cloudsql.iam_authentication',
	'alloydb.logical_decoding', 'alloydb.iam_authentication', 'azure.extensions', 'neon.timeline_id', 'neon.tenant_id'`

// factsSQL reads serverFacts in one statement (simple protocol: it also runs
// on a replication connection).
const factsSQL = `SELECT current_setting('wal_level'), current_user, r.rolsuper, r.rolreplication,
       coalesce((SELECT pg_has_role(current_user, oid, 'MEMBER') FROM pg_roles WHERE rolname = 'rds_replication'), false),
       coalesce((SELECT string_agg(name || '=' || setting, E'\n' ORDER BY name) FROM (
                   SELECT name, setting FROM pg_settings
                    WHERE name ~ '^(rds|cloudsql|alloydb|azure|neon)\.' OR name = 'shared_preload_libraries'
                   UNION
                   SELECT n, current_setting(n, true) FROM unnest(ARRAY[` + markerSettings + `]) n
                    WHERE current_setting(n, true) IS NOT NULL) s), ''),
       coalesce((SELECT string_agg(rolname, ',' ORDER BY rolname) FROM pg_roles
                  WHERE rolname IN ('rds_superuser', 'rds_replication', 'cloudsqlsuperuser', 'alloydbsuperuser',
                                    'azure_pg_admin', 'neon_superuser', 'supabase_admin')), ''),
       to_regproc('aurora_version') IS NOT NULL
  FROM pg_roles r WHERE r.rolname = current_user`

// readFacts runs factsSQL.
func readFacts(ctx context.Context, q Querier) (serverFacts, error) {
	rows, err := q.queryRows(ctx, factsSQL)
	if err != nil {
		return serverFacts{}, fmt.Errorf("read the role's privileges and the server's platform: %w", err)
	}
	if len(rows) != 1 || len(rows[0]) != 8 {
		return serverFacts{}, fmt.Errorf("read the role's privileges and the server's platform: unexpected result")
	}
	r := rows[0]
	f := serverFacts{WALLevel: string(r[0]), User: string(r[1]), Super: string(r[2]) == "t", Replication: string(r[3]) == "t",
		RDSReplication: string(r[4]) == "t", Settings: map[string]string{}, Roles: map[string]bool{}, Aurora: string(r[7]) == "t"}
	for line := range strings.SplitSeq(string(r[5]), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			f.Settings[k] = v
		}
	}
	for role := range strings.SplitSeq(string(r[6]), ",") {
		if role != "" {
			f.Roles[role] = true
		}
	}
	return f, nil
}

// platform names the service the facts show, "" for none.
func (f serverFacts) platform() Platform {
	has := func(prefix string) bool {
		for k := range f.Settings {
			if strings.HasPrefix(k, prefix) {
				return true
			}
		}
		return false
	}
	switch {
	case f.Aurora && (has("rds.") || f.Roles["rds_superuser"]):
		return PlatformAurora
	case has("rds.") || f.Roles["rds_superuser"]:
		return PlatformRDS
	case has("alloydb.") || f.Roles["alloydbsuperuser"]:
		return PlatformAlloyDB
	case has("cloudsql.") || f.Roles["cloudsqlsuperuser"]:
		return PlatformCloudSQL
	case has("azure.") || f.Roles["azure_pg_admin"]:
		return PlatformAzure
	case has("neon.") || f.Roles["neon_superuser"]:
		return PlatformNeon
	case f.Roles["supabase_admin"]:
		return PlatformSupabase
	}
	return ""
}

// evidence says what the platform was recognised by.
func (f serverFacts) evidence() string {
	var seen []string
	for k := range f.Settings {
		for _, p := range platformSettingPrefixes {
			if strings.HasPrefix(k, p) && !slices.Contains(seen, p+"* settings") {
				seen = append(seen, p+"* settings")
			}
		}
	}
	for _, r := range platformRoles {
		if f.Roles[r] {
			seen = append(seen, "role "+r)
		}
	}
	if f.Aurora {
		seen = append(seen, "aurora_version()")
	}
	slices.Sort(seen)
	return strings.Join(seen, ", ")
}

// checkWALLevel refuses a wal_level other than logical with the fix of the
// platform.
func (f serverFacts) checkWALLevel() error {
	if f.WALLevel == "logical" {
		return nil
	}
	fix := "run ALTER SYSTEM SET wal_level = logical; (or set it in postgresql.conf) and restart Postgres"
	switch f.platform() {
	case PlatformRDS:
		fix = "set rds.logical_replication = 1 in the DB instance's custom DB parameter group and reboot the instance (wal_level becomes logical); the default parameter group cannot be changed"
	case PlatformAurora:
		fix = "set rds.logical_replication = 1 in the cluster's custom DB cluster parameter group and reboot the writer instance (wal_level becomes logical)"
	case PlatformCloudSQL:
		fix = "set the database flag cloudsql.logical_decoding to on (the instance's Flags in the console, or gcloud sql instances patch); the instance restarts"
	case PlatformAlloyDB:
		fix = "set the database flag alloydb.logical_decoding to on on the primary instance (it restarts)"
	case PlatformAzure:
		fix = "set the server parameter wal_level to logical (Server parameters in the portal, or az postgres flexible-server parameter set) and restart the server"
	case PlatformNeon:
		fix = "enable logical replication in the Neon project's settings (Settings, Logical Replication); it restarts the computes and cannot be turned off"
	}
	return &PrereqError{Check: "wal_level", Problem: fmt.Sprintf("wal_level is %q, logical decoding needs \"logical\"", f.WALLevel), Fix: fix}
}

// checkPrivilege refuses a role that may not use logical replication, with
// the grant of the platform. A superuser, a role WITH REPLICATION and (on
// RDS and Aurora) a member of rds_replication may.
func (f serverFacts) checkPrivilege() error {
	if f.Super || f.Replication || f.RDSReplication {
		return nil
	}
	user := pgx.Identifier{f.User}.Sanitize()
	fix := fmt.Sprintf("run ALTER ROLE %s WITH REPLICATION; as a superuser", user)
	switch p := f.platform(); p {
	case PlatformRDS, PlatformAurora:
		fix = fmt.Sprintf("run GRANT rds_replication TO %s; as the master user (%s grants logical replication by this role; ALTER ROLE ... WITH REPLICATION is not allowed there)", user, p)
	case PlatformCloudSQL:
		fix = fmt.Sprintf("run ALTER USER %s WITH REPLICATION; as a member of cloudsqlsuperuser (the postgres user)", user)
	case PlatformAlloyDB:
		fix = fmt.Sprintf("run ALTER USER %s WITH REPLICATION; as a member of alloydbsuperuser (the postgres user)", user)
	case PlatformAzure:
		fix = fmt.Sprintf("run ALTER ROLE %s WITH REPLICATION; as the server's administrator (a member of azure_pg_admin)", user)
	case PlatformNeon:
		fix = fmt.Sprintf("run ALTER ROLE %s WITH REPLICATION; as a member of neon_superuser (a role created in the Neon console)", user)
	case PlatformSupabase:
		fix = fmt.Sprintf("run ALTER ROLE %s WITH REPLICATION; as the postgres user", user)
	}
	return &PrereqError{Check: "privilege", Problem: fmt.Sprintf("role %q has no REPLICATION privilege", f.User), Fix: fix}
}

// platformNote is doctor's line about the platform: what it was recognised
// by and what walrelay's operators must know there; warn marks a trap.
func (f serverFacts) platformNote(version int) (note string, warn bool) {
	p := f.platform()
	if p == "" {
		return "", false
	}
	note = fmt.Sprintf("%s (recognised by %s)", p, f.evidence())
	switch p {
	case PlatformNeon:
		return note + ": Neon removes a replication slot that stays inactive for about 40 hours, and restoring a branch removes its slots; keep walrelay running (a compute with walrelay connected does not scale to zero); after a loss, replay from the last delivered event (walrelay replay, see docs/managed-services.md)", true
	case PlatformAzure:
		if version < 170000 && !strings.Contains(f.Settings["azure.extensions"]+","+f.Settings["shared_preload_libraries"], "pg_failover_slots") {
			return note + ": before Postgres 17 a high-availability failover loses walrelay's slot unless the pg_failover_slots extension is loaded (server parameters shared_preload_libraries and azure.extensions)", true
		}
	case PlatformCloudSQL, PlatformAlloyDB, PlatformAurora, PlatformRDS:
		return note + ": see docs/managed-services.md for what a failover does to the slot there", false
	}
	return note, false
}

// DSNPooler returns why the DSN's first host looks like a connection pooler
// or proxy that cannot carry a replication connection ("" when it does
// not): PgBouncer and Supabase's pooler in transaction mode, Neon's pooled
// endpoints, RDS Proxy. The fix is the database's own endpoint.
func DSNPooler(pc *pgconn.Config) string {
	host := strings.ToLower(strings.TrimSuffix(pc.Host, "."))
	switch {
	case strings.HasSuffix(host, ".pooler.supabase.com"):
		return fmt.Sprintf("%s is Supabase's connection pooler (Supavisor), which cannot carry a replication connection: use the direct connection, db.<project-ref>.supabase.co:5432", pc.Host)
	case strings.Contains(host, ".proxy-") && (strings.HasSuffix(host, ".rds.amazonaws.com") || strings.HasSuffix(host, ".rds.amazonaws.com.cn")):
		return fmt.Sprintf("%s is an RDS Proxy endpoint, which does not support replication connections: use the DB instance's or the cluster's writer endpoint", pc.Host)
	case strings.HasSuffix(host, ".neon.tech") && strings.Contains(strings.SplitN(host, ".", 2)[0], "-pooler"):
		return fmt.Sprintf("%s is a Neon pooled endpoint (PgBouncer): use the endpoint without -pooler for replication", pc.Host)
	case pc.Port == 6543:
		return "port 6543 is the usual port of a transaction-mode pooler (Supabase's, PgBouncer's), which cannot carry a replication connection: use the database's own port (5432)"
	case pc.Port == 6432:
		return "port 6432 is PgBouncer's usual port; PgBouncer cannot carry a replication connection: connect to Postgres itself"
	}
	return ""
}
