package operator

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/walrelay/walrelay/internal/testwait"
	"github.com/walrelay/walrelay/relay"
	"github.com/walrelay/walrelay/sink"
	"github.com/walrelay/walrelay/test/pgtest"
	"github.com/walrelay/walrelay/test/relaytest"
)

// stopAndDropSlot stops f's relay and drops its slot: the slot is lost
// while walrelay is down. The walsender may hold the slot a moment after
// the relay stopped.
func (f *replayFixture) stopAndDropSlot(t *testing.T) {
	t.Helper()
	f.Cancel()
	f.Done <- <-f.Done // stopped; the cleanup's stop finds it so
	testwait.Eventually(t, 30*time.Second, "the slot to be dropped", func() bool {
		_, err := f.PG.Conn.Exec(context.Background(), "SELECT pg_drop_replication_slot($1)", f.Name)
		return err == nil
	})
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
	if _, err := rec.CreateSlot(ctx, recovery(f.opts, time.Minute)); err != nil {
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

// lostSlotSetup is an outbox whose slot is gone, with one event delivered to
// Kafka at commit time delivered (before now) and gap rows whose
// created_at is gapAge ago, committed after it and never delivered; its
// options name kfake and the outbox as walrelay run's would.
type lostSlotSetup struct {
	opts    relay.Options
	pg      *pgtest.Conn
	table   string
	cluster *kfake.Cluster
	gap     []string
}

func newLostSlot(t *testing.T, name string, delivered, gapAge time.Duration, gapRows int) *lostSlotSetup {
	t.Helper()
	dsn, pg := relaytest.Database(t)
	table := "public." + name + "_outbox"
	relaytest.CreateOutbox(t, dsn, table)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	now := serverNow(t, pg)
	deliveredAt(t, cluster, name+".order", "delivered", now.Add(-delivered))
	s := &lostSlotSetup{opts: testOptions(dsn, cluster.ListenAddrs(), name), pg: pg, table: table, cluster: cluster}
	s.opts.Logger = slog.New(slog.DiscardHandler)
	rows, err := pg.Conn.Query(context.Background(), `INSERT INTO `+table+` (aggregate_type, aggregate_id, event_type, payload, created_at)
		SELECT 'order', 'gap', 'e', '{}', now() - make_interval(secs => $1::float8) FROM generate_series(1, $2) RETURNING id::text`, gapAge.Seconds(), gapRows)
	if err != nil {
		t.Fatal(err)
	}
	if s.gap, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	return s
}

// prune runs prune --older-than 1h on the outbox as the command does
// (slot, Kafka settings of walrelay run, default margin).
func (s *lostSlotSetup) prune(t *testing.T) PruneResult {
	t.Helper()
	d := delivered(s.opts)
	res, err := Prune(context.Background(), PruneOptions{DSN: s.opts.Replication.DSN, Table: s.table, OlderThan: time.Hour, BatchSize: 100,
		TimeColumn: "created_at", Slot: s.opts.Replication.Slot, Delivered: &d, RecoveryMargin: 10 * time.Minute}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestInterruptedRecoveryThenPruneKeepsTheGap: a recovery interrupted after
// it made its slot and before its replay sent the gap, then prune
// --older-than, then the recovery again: prune deletes none of the gap's
// rows, and the retried recovery replays every one of them.
func TestInterruptedRecoveryThenPruneKeepsTheGap(t *testing.T) {
	s := newLostSlot(t, "recover_pause", 3*time.Hour, 2*time.Hour, 3)
	ctx := context.Background()
	ropts := recovery(s.opts, 10*time.Minute)
	rec, err := PlanRecovery(ctx, ropts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rec.CreateSlot(ctx, ropts); err != nil {
		t.Fatal(err)
	}
	// Interrupted here: the replay never ran.
	res := s.prune(t)
	if n := s.pg.Count("SELECT count(*) FROM " + s.table); n != len(s.gap) {
		t.Fatalf("prune after an interrupted recovery deleted %d rows, left %d of the %d rows of the gap: %s", res.Rows, n, len(s.gap), res.KeptWhy)
	}
	if !strings.Contains(res.KeptWhy, "unfinished") {
		t.Errorf("prune kept the rows, saying %q: want it to name the unfinished recovery", res.KeptWhy)
	}

	// The recovery again: the same start, the same slot, every gap row.
	again, err := PlanRecovery(ctx, ropts)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Since.Equal(rec.Since) {
		t.Errorf("the retried recovery starts at %v, the first at %v", again.Since, rec.Since)
	}
	if reused, err := again.CreateSlot(ctx, ropts); err != nil || !reused {
		t.Fatalf("CreateSlot of the retried recovery: reused %v, %v", reused, err)
	}
	rr, err := replay(ctx, s.opts, ReplayOptions{Selection: ReplaySelection{Since: again.Since}})
	if err != nil || !rr.Complete {
		t.Fatalf("replay since %v: %+v, %v", again.Since, rr, err)
	}
	if err := again.HandOver(ctx, ropts); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, r := range relaytest.ConsumeAll(t, s.cluster.ListenAddrs(), s.opts.Replication.Slot+".order", 1+len(s.gap)) {
		got[relaytest.HeaderValue(r, sink.HeaderID)] = true
	}
	for _, id := range s.gap {
		if !got[id] {
			t.Errorf("gap event %s is not in Kafka after the retried recovery", id)
		}
	}
	// Handed over, the slot vouches for what it confirms again.
	g, err := ReadPruneGuard(ctx, s.pg.Conn, s.opts.Replication.Slot)
	if err != nil || !g.Slot.Exists || g.recovering() {
		t.Fatalf("guard after the hand-over: %+v, %v", g, err)
	}
}

// TestReplayRefusesNullTimeColumn: a row whose time column is NULL cannot
// be selected or ordered by time: a replay (a recovery's too) refuses up
// front, naming the rows and the fix, instead of failing midway or
// finishing without the row.
func TestReplayRefusesNullTimeColumn(t *testing.T) {
	s := newLostSlot(t, "replay_null", time.Hour, 10*time.Minute, 2)
	s.pg.Exec("ALTER TABLE " + s.table + " ALTER COLUMN created_at DROP NOT NULL")
	s.pg.Exec("INSERT INTO " + s.table + " (aggregate_type, aggregate_id, event_type, payload, created_at) VALUES ('order', 'null', 'e', '{}', NULL)")
	ctx := context.Background()
	rec, err := PlanRecovery(ctx, recovery(s.opts, 10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for _, sel := range []ReplaySelection{{}, {Since: rec.Since}} {
		res, err := replay(ctx, s.opts, ReplayOptions{Selection: sel})
		var null *NullTimeError
		if !errors.As(err, &null) || null.Rows != 1 || res.Acked != 0 {
			t.Errorf("replay since %v of a table with a NULL created_at: %+v, %v; want a NullTimeError before sending anything", sel.Since, res, err)
		}
	}
}
