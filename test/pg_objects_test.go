package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The Postgres objects walrelay relies on: an outbox table renamed or moved while
// walrelay runs, publications that do not carry the events, names that need quoting, and
// the errors a new user meets setting up roles, passwords and privileges.

// insertOrder commits one outbox event into table (any name of the outbox) and returns
// its id and where its transaction lies in the WAL. The record goes to <prefix>order.
func insertOrder(t *testing.T, conn *pgx.Conn, table string) (string, *txnInfo) {
	t.Helper()
	id := newUUID()
	return id, insertEvent(t, conn, table, id, "order", "{}", "", "")
}

// orderDelivered reports which of ids arrived on the topics under prefix.
func orderDelivered(t *testing.T, env *testEnv, prefix string, ids ...string) map[string]bool {
	t.Helper()
	recs := consumeAll(t, env.kafka, prefix, []string{prefix + "order"})
	got := map[string]bool{}
	for _, id := range ids {
		_, got[id] = findRecord(recs, id)
	}
	return got
}

// TestRenamedOutboxTableStops: a publication holds its tables by OID, so after
// ALTER TABLE outbox RENAME TO ... or SET SCHEMA ..., inserts keep arriving in pgoutput
// under the new name. They used to be ignored as an unmapped table and the slot was
// confirmed past them (lost events). Now walrelay stops with one ERROR line naming the
// old and the new name and the fix, the slot stays before the insert, and either fix
// (restart with --table at the new name, or rename it back) delivers it. A restart with
// the new name also delivers inserts made before the rename, which arrive under the old
// name (docs/outbox-contract.md).
func TestRenamedOutboxTableStops(t *testing.T) {
	env := requireEnv(t)
	for _, mode := range []string{"rename", "set_schema"} {
		t.Run(mode, func(t *testing.T) {
			c := newContract(t, env, "hren")
			c.migrate(env.pgDSN, c.table)
			prefix := c.name + "."
			p := c.startReady()
			conn := connect(t, env.pgDSN)
			idA, txA := insertOrder(t, conn, c.table)
			waitSlotLSN(t, env.pgDSN, c.name, txA.post, 60*time.Second, p)

			var moved string
			if mode == "rename" {
				moved = "public." + c.name + "_old"
				c.exec("ALTER TABLE " + qtable(c.table) + " RENAME TO " + pgx.Identifier{c.name + "_old"}.Sanitize())
			} else {
				schema := c.name + "_app"
				moved = schema + "." + c.name
				c.exec("CREATE SCHEMA " + pgx.Identifier{schema}.Sanitize())
				c.dropOnSuccess("DROP SCHEMA IF EXISTS " + pgx.Identifier{schema}.Sanitize() + " CASCADE")
				c.exec("ALTER TABLE " + qtable(c.table) + " SET SCHEMA " + pgx.Identifier{schema}.Sanitize())
			}
			c.dropOnSuccess("DROP TABLE IF EXISTS " + qtable(moved))
			idB, txB := insertOrder(t, conn, moved)

			if !p.waitExit(60 * time.Second) {
				t.Fatalf("walrelay still running 60 s after an insert into the outbox under its new name %s (slot at %s, insert in [%s, %s])\n%s",
					moved, slotLSN(t, env.pgDSN, c.name), txB.begin, txB.post, p.tail(20))
			}
			if p.exitCode() <= 0 {
				t.Errorf("exit status %s, want non-zero", p.exitStatus())
			}
			line := errorLine(p.log(), []string{c.table, moved, "rename it back", "configure the outbox table as"})
			if line == "" {
				t.Errorf("no ERROR line names %s, %s and the fixes\n%s", c.table, moved, p.tail(20))
			}
			confirmed := slotLSN(t, env.pgDSN, c.name)
			if confirmed > txB.begin {
				t.Errorf("slot confirmed_flush_lsn %s passed the start %s of the insert into %s", confirmed, txB.begin, moved)
			}
			if got := orderDelivered(t, env, prefix, idA, idB); !got[idA] || got[idB] {
				t.Errorf("before the fix: delivered %v, want only the insert before the %s", got, mode)
			}
			t.Logf("stopped: exit=%d slot=%s insert_after=[%s,%s] error_line=%s", p.exitCode(), confirmed, txB.begin, txB.post, line)

			// The fixes: point --table at the new name, or move the table back.
			var p2 *walrelayProc
			table := c.table
			if mode == "rename" {
				table = moved
				p2 = c.startReady("--table", moved)
			} else {
				c.exec("ALTER TABLE " + qtable(moved) + " SET SCHEMA public")
				p2 = c.startReady()
			}
			idC, txC := insertOrder(t, conn, table)
			waitSlotLSN(t, env.pgDSN, c.name, txC.post, 60*time.Second, p2)
			if got := orderDelivered(t, env, prefix, idB, idC); !got[idB] || !got[idC] {
				t.Errorf("after the fix: delivered %v, want the insert made under the new name and the next one", got)
			}
			t.Logf("scenario=pgobjects/renamed_%s stop_exit=%d slot_before_insert=%v after_fix_delivered=true", mode, p.exitCode(), confirmed <= txB.begin)
		})
	}

	// Inserts before and after a rename while walrelay was down: started with the new
	// name, it delivers both; the first arrives under the table's old name.
	t.Run("restart_with_new_name", func(t *testing.T) {
		c := newContract(t, env, "hren")
		c.migrate(env.pgDSN, c.table)
		prefix := c.name + "."
		p := c.startReady()
		p.sigterm()
		if !p.waitExit(30*time.Second) || p.exitCode() != 0 {
			t.Fatalf("SIGTERM: %s\n%s", p.exitStatus(), p.tail(20))
		}
		conn := connect(t, env.pgDSN)
		idA, _ := insertOrder(t, conn, c.table)
		moved := "public." + c.name + "_new"
		c.exec("ALTER TABLE " + qtable(c.table) + " RENAME TO " + pgx.Identifier{c.name + "_new"}.Sanitize())
		c.dropOnSuccess("DROP TABLE IF EXISTS " + qtable(moved))
		idB, txB := insertOrder(t, conn, moved)
		p2 := c.startReady("--table", moved)
		waitSlotLSN(t, env.pgDSN, c.name, txB.post, 60*time.Second, p2)
		got := orderDelivered(t, env, prefix, idA, idB)
		if !got[idA] || !got[idB] {
			t.Errorf("delivered %v, want both the insert made under the old name and the one under the new", got)
		}
		t.Logf("scenario=pgobjects/renamed_while_down delivered_old_name=%v delivered_new_name=%v", got[idA], got[idB])
	})
}

// refusedAtStart starts `walrelay run` with args and requires a prompt exit != 0 with one
// ERROR line containing every keyword ("a|b": either). It returns that line.
func refusedAtStart(t *testing.T, c *contract, keywords []string, args ...string) string {
	t.Helper()
	p := c.startArgs(args...)
	if !p.waitExit(60 * time.Second) {
		t.Fatalf("walrelay still running 60 s after start; want a refusal\n%s", p.tail(20))
	}
	if p.exitCode() <= 0 {
		t.Errorf("exit status %s, want non-zero", p.exitStatus())
	}
	line := errorLine(p.log(), keywords)
	if line == "" {
		t.Errorf("no ERROR line contains all of %q\n%s", keywords, p.tail(20))
	}
	return line
}

// TestPublicationWithoutInsertsRefused: an existing publication that would not carry the
// outbox's inserts whole (inserts not published, a row filter, a column list without a
// mapped column) makes `walrelay run` refuse to start with one ERROR line saying how to
// fix it, and `walrelay doctor` reports the same finding. Before, walrelay started and
// the events were never sent. A FOR ALL TABLES publication with inserts is accepted.
// Row filters and column lists came with Postgres 15: on 14 the test checks that Postgres
// refuses to create such a publication at all.
func TestPublicationWithoutInsertsRefused(t *testing.T) {
	env := requireEnv(t)
	c := newContract(t, env, "hpub")
	c.migrate(env.pgDSN, c.table)
	pub := pgx.Identifier{c.name}.Sanitize()
	version := serverVersion(t, env.pgDSN)
	cases := []struct {
		name, create string
		keywords     []string
		since        int // the first server_version_num that has the feature
	}{
		{"publish_update", "FOR TABLE " + qtable(c.table) + " WITH (publish = 'update')", []string{"does not publish inserts", "publish = 'insert'"}, 0},
		{"row_filter", "FOR TABLE " + qtable(c.table) + " WHERE (aggregate_type = 'order')", []string{"row filter", "drop table", "add table"}, 150000},
		{"column_list", "FOR TABLE " + qtable(c.table) + " (id, aggregate_type, aggregate_id, event_type)", []string{"column list", "payload", "add table"}, 150000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c.exec("DROP PUBLICATION IF EXISTS " + pub)
			if version < tc.since {
				err := pgPool(t, env.pgDSN).Exec(context.Background(), "CREATE PUBLICATION "+pub+" "+tc.create)
				var pgErr *pgconn.PgError
				if !errors.As(err, &pgErr) || pgErr.Code != "42601" { // syntax_error
					t.Fatalf("Postgres %d: CREATE PUBLICATION %s: %v, want a syntax error (the feature needs %d)", version, tc.create, err, tc.since)
				}
				t.Logf("scenario=pgobjects/publication_%s Postgres %d refuses it: %s", tc.name, version, pgErr.Message)
				return
			}
			c.exec("CREATE PUBLICATION " + pub + " " + tc.create)
			line := refusedAtStart(t, c, tc.keywords, c.runArgs()...)
			code, out := runCommand(t, 90*time.Second, "doctor", "--postgres-dsn", env.pgDSN, "--kafka-brokers", env.kafka,
				"--slot", c.name, "--publication", c.name, "--table", c.table)
			if code == 0 || !strings.Contains(out, "FAIL publication") || !strings.Contains(strings.ToLower(out), strings.ToLower(tc.keywords[1])) {
				t.Errorf("doctor: exit %d, want a FAIL publication line with %q:\n%s", code, tc.keywords[1], out)
			}
			t.Logf("scenario=pgobjects/publication_%s refused=%v doctor_exit=%d line=%s", tc.name, line != "", code, line)
		})
	}
	t.Run("for_all_tables", func(t *testing.T) {
		dsn := c.createDatabase(c.name + "_all")
		c.migrate(dsn, c.table)
		pgExec(t, dsn, "CREATE PUBLICATION "+pub+" FOR ALL TABLES")
		code, out := runCommand(t, 90*time.Second, "doctor", "--postgres-dsn", dsn, "--kafka-brokers", env.kafka,
			"--slot", c.name, "--publication", c.name, "--table", c.table)
		if code != 0 || !strings.Contains(out, "ok   publication") {
			t.Errorf("doctor on a FOR ALL TABLES publication: exit %d\n%s", code, out)
		}
	})
}

// TestMixedCasePublicationName: publication names that need quoting (upper case, and
// spaces, commas and quotes) work end to end: walrelay creates the publication, streams
// from it, and validates it again on restart. pgoutput reads publication_names as a list
// of SQL identifiers, so an unquoted "WalRelay_Pub" used to be folded to walrelay_pub and
// START_REPLICATION failed with "publication does not exist". Slot names, which
// Postgres restricts to lower case, are refused at start with the rule and a valid name.
func TestMixedCasePublicationName(t *testing.T) {
	env := requireEnv(t)
	for _, tc := range []struct{ name, suffix string }{
		{"mixed_case", "_WalRelay_Pub"},
		{"needs_quoting", `_Wal "Relay", it's`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newContract(t, env, "hmix")
			c.migrate(env.pgDSN, c.table)
			pub := c.name + tc.suffix
			t.Cleanup(func() { pgExec(t, env.pgDSN, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{pub}.Sanitize()) })
			prefix := c.name + "."
			conn := connect(t, env.pgDSN)
			var ids []string
			for run := 1; run <= 2; run++ { // created, then found and validated
				p := c.startReady("--publication", pub)
				id, tx := insertOrder(t, conn, c.table)
				ids = append(ids, id)
				waitSlotLSN(t, env.pgDSN, c.name, tx.post, 60*time.Second, p)
				p.sigterm()
				if !p.waitExit(30*time.Second) || p.exitCode() != 0 {
					t.Fatalf("run %d: SIGTERM: %s\n%s", run, p.exitStatus(), p.tail(20))
				}
			}
			var n int
			if err := pgPool(t, env.pgDSN).scan(context.Background(), "SELECT count(*) FROM pg_publication WHERE pubname = $1", []any{pub}, &n); err != nil || n != 1 {
				t.Errorf("publication %q: count %d, err %v", pub, n, err)
			}
			got := orderDelivered(t, env, prefix, ids...)
			for _, id := range ids {
				if !got[id] {
					t.Errorf("event %s not delivered through publication %q", id, pub)
				}
			}
			t.Logf("scenario=pgobjects/publication_name_%s publication=%q delivered=%d/%d", tc.name, pub, len(ids), len(ids))
		})
	}
	t.Run("mixed_case_slot_refused", func(t *testing.T) {
		c := newContract(t, env, "hmix")
		c.migrate(env.pgDSN, c.table)
		args := append(c.runArgs(), "--slot", "WalRelay")
		line := refusedAtStart(t, c, []string{"slot", "WalRelay", "lower case", "choose e.g. walrelay"}, args...)
		t.Logf("refused: %s", line)
	})
}

// createLoginRole creates a login role named name with the given options, dropped (with what
// it owns in the databases of dsns) when the test ends.
func createLoginRole(t *testing.T, env *testEnv, name, options string, dsns ...string) {
	t.Helper()
	pgExec(t, env.pgDSN, "CREATE ROLE "+pgx.Identifier{name}.Sanitize()+" LOGIN "+options)
	t.Cleanup(func() {
		for _, dsn := range append(dsns, env.pgDSN) {
			pgExec(t, dsn, "DROP OWNED BY "+pgx.Identifier{name}.Sanitize())
		}
		pgExec(t, env.pgDSN, "DROP ROLE IF EXISTS "+pgx.Identifier{name}.Sanitize())
	})
}

// dsnWithUser is the test cluster's DSN with another user (and password) and database.
func dsnWithUser(t *testing.T, dsn, user, password, db string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if password != "" {
		u.User = url.UserPassword(user, password)
	} else {
		u.User = url.User(user)
	}
	if db != "" {
		u.Path = "/" + db
	}
	return u.String()
}

// TestNewUserErrors: the errors a new user meets each give one ERROR line that says the
// fix, not only what failed, from `walrelay run` and the same finding from `walrelay
// doctor`: a wrong password (28P01), a role without REPLICATION, a role that cannot
// create the publication (not the table's owner; doctor finds it before run does), and
// `walrelay migrate` by a role without CREATE on the database and schema (it names the
// GRANTs). The roles are created by the test and dropped after it.
func TestNewUserErrors(t *testing.T) {
	env := requireEnv(t)
	c := newContract(t, env, "hnew")
	c.migrate(env.pgDSN, c.table)
	// Roles of killed runs (their databases are gone: newContract dropped them).
	leftovers, err := pgPool(t, env.pgDSN).strings(context.Background(), `SELECT rolname::text FROM pg_roles WHERE rolname LIKE $1`, c.like())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range leftovers {
		_ = pgPool(t, env.pgDSN).Exec(context.Background(), "DROP OWNED BY "+pgx.Identifier{r}.Sanitize()+"; DROP ROLE "+pgx.Identifier{r}.Sanitize())
	}
	run := func(dsn string) []string {
		return []string{"run", "--postgres-dsn", dsn, "--kafka-brokers", env.kafka, "--slot", c.name, "--publication", c.name,
			"--table", c.table, "--topic", c.topicTemplate(), "--metrics-addr", "127.0.0.1:0"}
	}
	doctor := func(t *testing.T, dsn string, keywords []string) {
		t.Helper()
		code, out := runCommand(t, 90*time.Second, "doctor", "--postgres-dsn", dsn, "--kafka-brokers", env.kafka,
			"--slot", c.name, "--publication", c.name, "--table", c.table)
		var fail string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "FAIL") && hasKeywords(l, keywords) {
				fail = l
			}
		}
		if code == 0 || fail == "" {
			t.Errorf("doctor: exit %d, want a FAIL line with %q:\n%s", code, keywords, out)
		}
		t.Logf("doctor: %s", fail)
	}

	t.Run("wrong_password", func(t *testing.T) {
		// test/env/pg.sh asks members of walrelay_password_auth for their password, and
		// creates that group at start (make up's cluster too: a wrong password can be tried).
		if n, err := pgPool(t, env.pgDSN).strings(context.Background(), `SELECT rolname::text FROM pg_roles WHERE rolname = 'walrelay_password_auth'`); err != nil || len(n) != 1 {
			t.Fatalf("the test cluster has no role walrelay_password_auth (%v): restart it with the current test/env/pg.sh, which creates it", err)
		}
		role := c.name + "_pw"
		createLoginRole(t, env, role, "REPLICATION PASSWORD 'right-password' IN ROLE walrelay_password_auth")
		dsn := dsnWithUser(t, env.pgDSN, role, "wrong-password", "")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, dsn); err == nil {
			conn.Close(ctx)
			t.Fatal("the test cluster accepted a wrong password: restart it with the current test/env/pg.sh (pg_hba.conf asks walrelay_password_auth members for a password)")
		}
		keywords := []string{"password authentication failed", role, "check the user and password"}
		line := refusedAtStart(t, c, keywords, run(dsn)...)
		if strings.Contains(line, "wrong-password") {
			t.Errorf("the ERROR line shows the password: %s", line)
		}
		// One ERROR line, and no warning before it (the outbox span's reading
		// used to log the same refusal as a stale-metrics WARN).
		log, err := os.ReadFile(filepath.Join(c.logDir, fmt.Sprintf("run-%d.log", c.runs)))
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(log), `"level":"ERROR"`); n != 1 || strings.Contains(string(log), `"level":"WARN"`) {
			t.Errorf("wrong password: %d ERROR lines and a WARN %v, want one ERROR line and no WARN:\n%s", n, strings.Contains(string(log), `"level":"WARN"`), log)
		}
		doctor(t, dsn, keywords)
		t.Logf("scenario=pgobjects/new_user_wrong_password line=%s", line)
	})

	t.Run("no_replication", func(t *testing.T) {
		role := c.name + "_norepl"
		createLoginRole(t, env, role, "")
		dsn := dsnWithUser(t, env.pgDSN, role, "", "")
		keywords := []string{"ALTER ROLE", role, "WITH REPLICATION"}
		line := refusedAtStart(t, c, keywords, run(dsn)...)
		doctor(t, dsn, keywords)
		t.Logf("scenario=pgobjects/new_user_no_replication line=%s", line)
	})

	t.Run("not_table_owner", func(t *testing.T) {
		// README's Postgres setup, steps 3 and 4, as written there (names replaced by
		// the test's): the role of step 3 cannot create the publication itself.
		role := c.name + "_notowner"
		names := strings.NewReplacer("ROLE walrelay ", "ROLE "+pgx.Identifier{role}.Sanitize()+" ",
			"TO walrelay;", "TO "+pgx.Identifier{role}.Sanitize()+";", "PUBLICATION walrelay ", "PUBLICATION "+pgx.Identifier{c.name}.Sanitize()+" ",
			"public.outbox", qtable(c.table))
		step3 := names.Replace(readmeSetupSQL(t, 3))
		if !strings.Contains(step3, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()) {
			t.Fatalf("README step 3 creates no role walrelay:\n%s", step3)
		}
		pgExec(t, env.pgDSN, step3)
		t.Cleanup(func() {
			pgExec(t, env.pgDSN, "DROP OWNED BY "+pgx.Identifier{role}.Sanitize())
			pgExec(t, env.pgDSN, "DROP ROLE IF EXISTS "+pgx.Identifier{role}.Sanitize())
		})
		dsn := dsnWithUser(t, env.pgDSN, role, "", "")
		// The fix names who creates it, as the README's step 4 does: the table's owner.
		keywords := []string{"cannot create publication", "have the table owner", "postgres", "CREATE PUBLICATION"}
		doctor(t, dsn, keywords) // doctor finds it before run does
		line := refusedAtStart(t, c, keywords, run(dsn)...)
		// Step 4: the owner (here the superuser that ran migrate) creates the publication;
		// the role then streams.
		pgExec(t, env.pgDSN, names.Replace(readmeSetupSQL(t, 4)))
		if code, out := runCommand(t, 90*time.Second, "doctor", "--postgres-dsn", dsn, "--kafka-brokers", env.kafka,
			"--slot", c.name, "--publication", c.name, "--table", c.table); code != 0 {
			t.Errorf("doctor after the owner created the publication: exit %d\n%s", code, out)
		}
		p := c.startArgs(run(dsn)...)
		p.waitReady(60 * time.Second)
		conn := connect(t, env.pgDSN)
		id, tx := insertOrder(t, conn, c.table)
		waitSlotLSN(t, env.pgDSN, c.name, tx.post, 60*time.Second, p)
		if got := orderDelivered(t, env, c.name+".", id); !got[id] {
			t.Errorf("event %s not delivered by the non-owner role after the fix", id)
		}
		t.Logf("scenario=pgobjects/new_user_not_table_owner line=%s", line)
	})

	t.Run("migrate_without_create", func(t *testing.T) {
		db := c.name + "_mig"
		adminDSN := c.createDatabase(db)
		role := c.name + "_mig"
		createLoginRole(t, env, role, "", adminDSN)
		dsn := dsnWithUser(t, env.pgDSN, role, "", db)
		code, out := runCommand(t, 90*time.Second, "migrate", "--postgres-dsn", dsn, "--table", "public.outbox")
		keywords := []string{"permission denied", fmt.Sprintf(`GRANT CREATE ON DATABASE \"%s\" TO \"%s\"`, db, role)}
		schemaGrant := fmt.Sprintf(`GRANT CREATE ON SCHEMA \"public\" TO \"%s\"`, role)
		// Before Postgres 15 every role may create in schema public (PUBLIC has CREATE
		// there): the role lacks only the database privilege, and the line must not ask
		// for the schema's.
		publicCreate := serverVersion(t, env.pgDSN) < 150000
		if !publicCreate {
			keywords = append(keywords, schemaGrant)
		}
		line := errorLine(out, keywords)
		if code == 0 || line == "" {
			t.Errorf("migrate: exit %d, want an ERROR line with %q:\n%s", code, keywords, out)
		}
		if publicCreate && strings.Contains(line, schemaGrant) {
			t.Errorf("migrate asks for %s, which PUBLIC has before Postgres 15: %s", schemaGrant, line)
		}
		// The fix it names works.
		pgExec(t, adminDSN, "GRANT CREATE ON DATABASE "+pgx.Identifier{db}.Sanitize()+" TO "+pgx.Identifier{role}.Sanitize())
		pgExec(t, adminDSN, "GRANT CREATE ON SCHEMA public TO "+pgx.Identifier{role}.Sanitize())
		if code, out := runCommand(t, 90*time.Second, "migrate", "--postgres-dsn", dsn, "--table", "public.outbox"); code != 0 {
			t.Errorf("migrate after the GRANTs: exit %d\n%s", code, out)
		}
		t.Logf("scenario=pgobjects/new_user_migrate line=%s", line)
	})
}

// readmeSetupSQL returns the SQL block of step n of README.md's "Postgres setup".
func readmeSetupSQL(t *testing.T, n int) string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	start := strings.Index(s, "\n## Postgres setup")
	if start < 0 {
		t.Fatal("README.md has no Postgres setup section")
	}
	s = s[start:]
	step := strings.Index(s, fmt.Sprintf("\n%d. ", n))
	next := strings.Index(s, fmt.Sprintf("\n%d. ", n+1))
	if step < 0 || next < step {
		t.Fatalf("README.md's Postgres setup has no step %d", n)
	}
	s = s[step:next]
	i := strings.Index(s, "```sql\n")
	j := strings.Index(s[i+7:], "```")
	if i < 0 || j < 0 {
		t.Fatalf("step %d of README.md's Postgres setup has no SQL block", n)
	}
	return s[i+7 : i+7+j]
}
