package operator

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walrelay/walrelay/internal/testwait"
	"github.com/walrelay/walrelay/test/relaytest"
)

// deletable counts the rows of table the guard lets go.
func deletable(t *testing.T, conn *pgx.Conn, table string, g PruneGuard) int {
	t.Helper()
	cond, args := g.Condition("created_at", 1)
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM "+table+" WHERE "+cond, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// deletableOf counts the rows of table with aggregate id agg that the
// guard lets go.
func deletableOf(t *testing.T, conn *pgx.Conn, table, agg string, g PruneGuard) int {
	t.Helper()
	cond, args := g.Condition("created_at", 2)
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM "+table+" WHERE aggregate_id = $1 AND "+cond,
		append([]any{agg}, args...)...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPruneGuardFollowsTheSlot: rows written after the slot's position
// (also in a subtransaction) are kept until the slot confirms past them,
// then they may go; without the slot, the last delivered event decides,
// and with nothing delivered no row goes.
func TestPruneGuardFollowsTheSlot(t *testing.T) {
	dsn, pg := relaytest.Database(t)
	relaytest.CreateOutbox(t, dsn, "public.guard_outbox")
	ctx := context.Background()
	insert := func(agg string, n int, savepoint bool) {
		tx, err := pg.Conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if savepoint {
			if _, err := tx.Exec(ctx, "SAVEPOINT s"); err != nil {
				t.Fatal(err)
			}
		}
		for range n {
			if _, err := tx.Exec(ctx, "INSERT INTO public.guard_outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('o', $1, 'e', '{}')", agg); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	insert("before", 3, false)
	pg.Exec("SELECT pg_create_logical_replication_slot('guard', 'pgoutput')")
	insert("after", 2, false)
	insert("after", 2, true)
	g, err := ReadPruneGuard(ctx, pg.Conn, "guard")
	if err != nil {
		t.Fatal(err)
	}
	if g.NeedsDelivered() || g.Slot.CatalogXmin == 0 {
		t.Fatalf("guard %+v: want the slot's catalog_xmin", g)
	}
	// Rows written before the slot go only if no older transaction ran
	// meanwhile (other tests share the cluster); those after it never.
	if n := deletableOf(t, pg.Conn, "public.guard_outbox", "after", g); n != 0 {
		t.Fatalf("%d rows written after the slot's position may go (%s)", n, g.Reason())
	}
	// The slot confirms past the rows: a checkpoint logs the running
	// transactions that move catalog_xmin, once no older one runs.
	testwait.Eventually(t, 3*time.Minute, "the slot's catalog_xmin to pass the rows", func() bool {
		pg.Exec("CHECKPOINT")
		pg.Exec("SELECT pg_replication_slot_advance('guard', pg_current_wal_lsn())")
		if g, err = ReadPruneGuard(ctx, pg.Conn, "guard"); err != nil {
			t.Fatal(err)
		}
		return deletableOf(t, pg.Conn, "public.guard_outbox", "after", g) == 4 && deletableOf(t, pg.Conn, "public.guard_outbox", "before", g) == 3
	})

	pg.Exec("SELECT pg_drop_replication_slot('guard')")
	if g, err = ReadPruneGuard(ctx, pg.Conn, "guard"); err != nil {
		t.Fatal(err)
	}
	if !g.NeedsDelivered() || deletable(t, pg.Conn, "public.guard_outbox", g) != 0 {
		t.Fatalf("without the slot and a delivered event, rows may go: %+v", g)
	}
	var newest time.Time
	if err := pg.Conn.QueryRow(ctx, "SELECT max(created_at) FROM public.guard_outbox").Scan(&newest); err != nil {
		t.Fatal(err)
	}
	g.Delivered, g.Margin = &LastDelivery{Found: true, Time: newest}, 0
	if n := deletable(t, pg.Conn, "public.guard_outbox", g); n == 0 || n == 7 {
		t.Fatalf("%d rows may go before the last delivered event at %v, want those older", n, newest)
	}
	g.Margin = time.Hour
	if n := deletable(t, pg.Conn, "public.guard_outbox", g); n != 0 {
		t.Fatalf("%d rows may go within the margin before the last delivered event", n)
	}
}
