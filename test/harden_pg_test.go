package e2e

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// This file tests the Postgres side of hardening (issue 8): an outbox table renamed or
// moved while walrelay runs, publications that do not carry the events, names that need
// quoting, and the errors a new user meets (roles, passwords, privileges).

// hardenInsert commits one outbox event into table (any name of the outbox) and returns
// its id and where its transaction lies in the WAL. The record goes to <prefix>order.
func hardenInsert(t *testing.T, conn *pgx.Conn, table string) (string, *txnInfo) {
	t.Helper()
	id := newUUID()
	tx := runTxn(t, conn, false, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "INSERT INTO "+qtable(table)+
			" (id, aggregate_type, aggregate_id, event_type, payload) VALUES ($1::uuid, 'order', 'o-1', 'Created', '{}')", id)
		return err
	})
	return id, tx
}

// hardenDelivered reports which of ids arrived on the topics under prefix.
func hardenDelivered(t *testing.T, env *testEnv, prefix string, ids ...string) map[string]bool {
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
// name (DESIGN.md §3).
func TestRenamedOutboxTableStops(t *testing.T) {
	env := requireEnv(t)
	for _, mode := range []string{"rename", "set_schema"} {
		t.Run(mode, func(t *testing.T) {
			c := newContract(t, env, "hren")
			c.migrate(env.pgDSN, c.table)
			prefix := c.name + "."
			p := c.startReady()
			conn := connect(t, env.pgDSN)
			idA, txA := hardenInsert(t, conn, c.table)
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
			idB, txB := hardenInsert(t, conn, moved)

			if !p.waitExit(60 * time.Second) {
				t.Fatalf("walrelay still running 60 s after an insert into the outbox under its new name %s (slot at %s, insert in [%s, %s])\n%s",
					moved, slotLSN(t, env.pgDSN, c.name), txB.begin, txB.post, p.tail(20))
			}
			if p.exitCode() <= 0 {
				t.Errorf("exit status %s, want non-zero", p.exitStatus())
			}
			line := findErrorLine(p, []string{c.table, moved, "rename it back", "--table"})
			if line == "" {
				t.Errorf("no ERROR line names %s, %s and the fixes\n%s", c.table, moved, p.tail(20))
			}
			confirmed := slotLSN(t, env.pgDSN, c.name)
			if confirmed > txB.begin {
				t.Errorf("slot confirmed_flush_lsn %s passed the start %s of the insert into %s", confirmed, txB.begin, moved)
			}
			if got := hardenDelivered(t, env, prefix, idA, idB); !got[idA] || got[idB] {
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
			idC, txC := hardenInsert(t, conn, table)
			waitSlotLSN(t, env.pgDSN, c.name, txC.post, 60*time.Second, p2)
			if got := hardenDelivered(t, env, prefix, idB, idC); !got[idB] || !got[idC] {
				t.Errorf("after the fix: delivered %v, want the insert made under the new name and the next one", got)
			}
			t.Logf("scenario=harden/renamed_%s stop_exit=%d slot_before_insert=%v after_fix_delivered=true", mode, p.exitCode(), confirmed <= txB.begin)
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
		idA, _ := hardenInsert(t, conn, c.table)
		moved := "public." + c.name + "_new"
		c.exec("ALTER TABLE " + qtable(c.table) + " RENAME TO " + pgx.Identifier{c.name + "_new"}.Sanitize())
		c.dropOnSuccess("DROP TABLE IF EXISTS " + qtable(moved))
		idB, txB := hardenInsert(t, conn, moved)
		p2 := c.startReady("--table", moved)
		waitSlotLSN(t, env.pgDSN, c.name, txB.post, 60*time.Second, p2)
		got := hardenDelivered(t, env, prefix, idA, idB)
		if !got[idA] || !got[idB] {
			t.Errorf("delivered %v, want both the insert made under the old name and the one under the new", got)
		}
		t.Logf("scenario=harden/renamed_while_down delivered_old_name=%v delivered_new_name=%v", got[idA], got[idB])
	})
}

// hardenCommand runs a walrelay subcommand to completion and returns its exit code and
// its output (stdout and stderr).
func hardenCommand(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, walrelayBin, args...)
	cmd.Env = childEnv(env)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	}
	t.Fatalf("walrelay %s: %v\n%s", strings.Join(args, " "), err, out)
	return 0, ""
}

// hardenRefused starts `walrelay run` with args and requires a prompt exit != 0 with one
// ERROR line containing every keyword ("a|b": either). It returns that line.
func hardenRefused(t *testing.T, c *contract, keywords []string, args ...string) string {
	t.Helper()
	p := c.startArgs(args...)
	if !p.waitExit(60 * time.Second) {
		t.Fatalf("walrelay still running 60 s after start; want a refusal\n%s", p.tail(20))
	}
	if p.exitCode() <= 0 {
		t.Errorf("exit status %s, want non-zero", p.exitStatus())
	}
	line := findErrorLine(p, keywords)
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
func TestPublicationWithoutInsertsRefused(t *testing.T) {
	env := requireEnv(t)
	c := newContract(t, env, "hpub")
	c.migrate(env.pgDSN, c.table)
	pub := pgx.Identifier{c.name}.Sanitize()
	cases := []struct {
		name, create string
		keywords     []string
	}{
		{"publish_update", "FOR TABLE " + qtable(c.table) + " WITH (publish = 'update')", []string{"does not publish inserts", "publish = 'insert'"}},
		{"row_filter", "FOR TABLE " + qtable(c.table) + " WHERE (aggregate_type = 'order')", []string{"row filter", "drop table", "add table"}},
		{"column_list", "FOR TABLE " + qtable(c.table) + " (id, aggregate_type, aggregate_id, event_type)", []string{"column list", "payload", "add table"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c.exec("DROP PUBLICATION IF EXISTS " + pub)
			c.exec("CREATE PUBLICATION " + pub + " " + tc.create)
			line := hardenRefused(t, c, tc.keywords, c.runArgs()...)
			code, out := hardenCommand(t, nil, "doctor", "--postgres-dsn", env.pgDSN, "--kafka-brokers", env.kafka,
				"--slot", c.name, "--publication", c.name, "--table", c.table)
			if code == 0 || !strings.Contains(out, "FAIL publication") || !strings.Contains(strings.ToLower(out), strings.ToLower(tc.keywords[1])) {
				t.Errorf("doctor: exit %d, want a FAIL publication line with %q:\n%s", code, tc.keywords[1], out)
			}
			t.Logf("scenario=harden/publication_%s refused=%v doctor_exit=%d line=%s", tc.name, line != "", code, line)
		})
	}
	t.Run("for_all_tables", func(t *testing.T) {
		dsn := c.createDatabase(c.name + "_all")
		c.migrate(dsn, c.table)
		pgExec(t, dsn, "CREATE PUBLICATION "+pub+" FOR ALL TABLES")
		code, out := hardenCommand(t, nil, "doctor", "--postgres-dsn", dsn, "--kafka-brokers", env.kafka,
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
				id, tx := hardenInsert(t, conn, c.table)
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
			got := hardenDelivered(t, env, prefix, ids...)
			for _, id := range ids {
				if !got[id] {
					t.Errorf("event %s not delivered through publication %q", id, pub)
				}
			}
			t.Logf("scenario=harden/publication_name_%s publication=%q delivered=%d/%d", tc.name, pub, len(ids), len(ids))
		})
	}
	t.Run("mixed_case_slot_refused", func(t *testing.T) {
		c := newContract(t, env, "hmix")
		c.migrate(env.pgDSN, c.table)
		args := append(c.runArgs(), "--slot", "WalRelay")
		line := hardenRefused(t, c, []string{"slot", "WalRelay", "lower case", "--slot walrelay"}, args...)
		t.Logf("refused: %s", line)
	})
}
