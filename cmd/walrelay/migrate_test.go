package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/walrelay/walrelay/test/pgtest"
)

// testDatabase creates a database of its own for t and returns its DSN and a
// connection to it. walrelay.emit and the partition functions exist once per
// database, and other tests migrate concurrently, so tests of them do not
// share one. The database and its replication slots are dropped when t ends.
func testDatabase(t *testing.T) (string, *pgtest.Conn) {
	t.Helper()
	dsn := pgtest.Database(t, "h5_relay")
	return dsn, pgtest.Connect(t, dsn)
}

func runMain(args ...string) (code int, stdout, stderr string) {
	var out, errw bytes.Buffer
	code = Main(context.Background(), args, func(string) string { return "" }, &out, &errw)
	return code, out.String(), errw.String()
}

func TestMigrateIdempotent(t *testing.T) {
	dsn, pg := testDatabase(t)
	// h5_schema does not exist: migrate creates it.
	for _, table := range []string{"public.outbox", "h5_schema.outbox"} {
		for i := range 2 {
			code, _, stderr := runMain("migrate", "--postgres-dsn", dsn, "--table", table)
			if code != ExitOK {
				t.Fatalf("migrate %s, run %d: exit %d\n%s", table, i+1, code, stderr)
			}
			for _, m := range []string{"001_outbox.sql", "002_emit.sql"} {
				if !strings.Contains(stderr, `"migration":"`+m+`"`) {
					t.Errorf("migrate %s, run %d: no log of %s:\n%s", table, i+1, m, stderr)
				}
			}
		}
		// walrelay.emit writes to the table migrated last.
		var id string
		if err := pg.Conn.QueryRow(context.Background(), `SELECT walrelay.emit('order', 'o-1', 'OrderCreated', '{"n": 1}')::text`).Scan(&id); err != nil {
			t.Fatal(err)
		}
		if n := pg.Count(fmt.Sprintf("SELECT count(*) FROM %s WHERE id = $1::uuid AND payload = '{\"n\": 1}'", table), id); n != 1 {
			t.Errorf("after migrating %s, walrelay.emit's row %s is not in it", table, id)
		}
	}
	if n := pg.Count("SELECT count(*) FROM pg_proc WHERE proname = 'emit' AND pronamespace = 'walrelay'::regnamespace"); n != 1 {
		t.Errorf("%d walrelay.emit functions, want 1", n)
	}
}

func TestMigrateConcurrent(t *testing.T) {
	dsn, _ := testDatabase(t)
	var wg sync.WaitGroup
	errs := make([]string, 6)
	for i := range errs {
		wg.Go(func() {
			// Half of them into a schema that none of them finds in place.
			schema := []string{"public", "h5_conc"}[i%2]
			if code, _, stderr := runMain("migrate", "--postgres-dsn", dsn, "--table", fmt.Sprintf("%s.outbox_%d", schema, i)); code != ExitOK {
				errs[i] = stderr
			}
		})
	}
	wg.Wait()
	for i, e := range errs {
		if e != "" {
			t.Errorf("concurrent migrate %d failed:\n%s", i, e)
		}
	}
}

func TestMigratePartitionedCommand(t *testing.T) {
	dsn, pg := testDatabase(t)
	for i := 0; i < 2; i++ { // idempotent
		if code, _, stderr := runMain("migrate", "--postgres-dsn", dsn, "--partitioned"); code != ExitOK {
			t.Fatalf("migrate --partitioned (run %d): exit %d: %s", i+1, code, stderr)
		}
	}
	if kind := pg.Count("SELECT CASE relkind WHEN 'p' THEN 1 ELSE 0 END FROM pg_class WHERE oid = 'public.outbox'::regclass"); kind != 1 {
		t.Fatal("public.outbox is not partitioned")
	}
	if n := pg.Count("SELECT walrelay.outbox_create_partitions(2)"); n < 0 {
		t.Fatalf("create partitions: %d", n)
	}
	pg.Exec("SELECT walrelay.emit('order', 'o-1', 'created', '{}')")
	if n := pg.Count("SELECT count(*) FROM public.outbox"); n != 1 {
		t.Fatalf("rows after emit: %d", n)
	}
}
