package operator

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/walrelay/walrelay/relay"
	"github.com/walrelay/walrelay/sink"
	"github.com/walrelay/walrelay/test/pgtest"
	"github.com/walrelay/walrelay/test/relaytest"
)

// stopAndDropSlot stops f's relay and drops its slot: the slot is lost
// while walrelay is down.
func (f *replayFixture) stopAndDropSlot(t *testing.T) {
	t.Helper()
	f.Cancel()
	f.Done <- <-f.Done // stopped; the cleanup's stop finds it so
	f.PG.Exec("SELECT pg_drop_replication_slot($1)", f.Name)
}

// insertAt inserts n rows of aggregate agg whose occurred_at is the
// server's clock moved by ahead (a client clock ahead of the server), and
// returns their ids.
func (f *replayFixture) insertAt(t *testing.T, agg string, n int, ahead time.Duration) []string {
	t.Helper()
	rows, err := f.PG.Conn.Query(context.Background(), `INSERT INTO `+f.table+` (aggregate_type, aggregate_id, event_type, payload, occurred_at)
		SELECT 'order', $1, 'e', '{}', now() + make_interval(secs => $2::float8) FROM generate_series(1, $3) RETURNING id::text`, agg, ahead.Seconds(), n)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// withOccurredAt adds a timestamptz column occurred_at to the outbox and
// maps it as the record timestamp (--column-timestamp occurred_at).
func withOccurredAt(t *testing.T, dsn, table string) {
	t.Helper()
	relaytest.CreateOutbox(t, dsn, table)
	pgtest.Connect(t, dsn).Exec("ALTER TABLE " + table + " ADD COLUMN occurred_at timestamptz")
}

func mapOccurredAt(o *relay.Options) {
	tb := &o.Decoder.Tables[0]
	tb.Columns.Timestamp = "occurred_at"
	name := tb.Schema + "." + tb.Name
	o.Replication.Columns = map[string][]string{name: tb.Columns.Mapped()}
}

// TestRecoveryStartsFromTheCommitTime: with the record timestamp mapped to
// an application's column whose clock runs a day ahead, a recovery starts
// from the commit time of the last delivered event, not from the column's
// value, and replays every row of the gap.
func TestRecoveryStartsFromTheCommitTime(t *testing.T) {
	f := newReplayFixtureWith(t, "recover_ahead", withOccurredAt, mapOccurredAt)
	delivered := f.insertAt(t, "a", 1, 24*time.Hour)
	recs := relaytest.ConsumeAll(t, f.Cluster.ListenAddrs(), f.topic(), 1)
	if ts := recs[0].Timestamp; time.Until(ts) < 23*time.Hour {
		t.Fatalf("the delivered record's timestamp %v is not the mapped column's, a day ahead", ts)
	}
	f.stopAndDropSlot(t)
	gap := f.insertAt(t, "b", 3, 24*time.Hour)

	ctx := context.Background()
	rec, err := PlanRecovery(ctx, recovery(f.opts, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Delivered.Found || rec.Delivered.ID != delivered[0] || time.Until(rec.Since) > 0 {
		t.Fatalf("recovery plan: last delivered %+v, since %v: want the commit time of %s less a minute, not a time a day ahead",
			rec.Delivered, rec.Since, delivered[0])
	}
	if err := rec.CreateSlot(ctx, recovery(f.opts, time.Minute)); err != nil {
		t.Fatal(err)
	}
	res, err := replay(ctx, f.opts, ReplayOptions{Selection: ReplaySelection{Since: rec.Since}})
	if err != nil {
		t.Fatalf("replay since %v: %v", rec.Since, err)
	}
	replayed := map[string]bool{}
	for _, r := range relaytest.ConsumeAll(t, f.Cluster.ListenAddrs(), f.topic(), 1+int(res.Acked)) {
		if relaytest.HeaderValue(r, sink.HeaderReplay) != "" {
			replayed[relaytest.HeaderValue(r, sink.HeaderID)] = true
		}
	}
	for _, id := range gap {
		if !replayed[id] {
			t.Errorf("gap row %s not replayed (replayed %v)", id, slices.Collect(maps.Keys(replayed)))
		}
	}
}
