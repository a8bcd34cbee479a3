package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walrelay/walrelay/operator"
	"github.com/walrelay/walrelay/sink"
	"github.com/walrelay/walrelay/test/pgtest"
)

// confirmPast moves slot past every transaction committed so far, as
// walrelay confirming its position does: a checkpoint logs the running
// transactions that move catalog_xmin once no older one runs (other tests
// share the cluster), so it waits until the rows the query counts are
// passed.
func confirmPast(t *testing.T, pg *pgtest.Conn, slot, passedSQL string, want int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		pg.Exec("CHECKPOINT")
		pg.Exec("SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())", slot)
		n := pg.Count(passedSQL, slot)
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot %s passed %d rows after 2m, want %d", slot, n, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestPruneGuard: prune never deletes a row the slot has not confirmed,
// however old, says how many it kept and why, and deletes them with
// --force; with the slot gone it keeps everything unless Kafka tells the
// last delivered event, then keeps the rows after it less the margin.
func TestPruneGuard(t *testing.T) {
	dsn, pg := testDatabase(t)
	if err := operator.Migrate(context.Background(), operator.MigrateOptions{DSN: dsn, Table: "public.outbox"}, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	insert := func(n int, age string) {
		pg.Exec(`INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, created_at)
			SELECT 'order', i::text, 'e', now() - $1::interval FROM generate_series(1, $2) i`, age, n)
	}
	rows := func() int { return pg.Count("SELECT count(*) FROM public.outbox") }
	pg.Exec("SELECT pg_create_logical_replication_slot('guard_slot', 'pgoutput')")
	insert(5, "3 hours")
	confirmPast(t, pg, "guard_slot",
		"SELECT count(*) FROM public.outbox WHERE age(xmin) > (SELECT age(catalog_xmin) FROM pg_replication_slots WHERE slot_name = $1)", 5)
	insert(4, "3 hours") // the slot has not confirmed these
	env := map[string]string{"WALRELAY_POSTGRES_DSN": dsn, "WALRELAY_SLOT": "guard_slot"}

	code, stdout, stderr := prune(env, "--older-than", "1h", "--dry-run")
	if code != ExitOK || !strings.HasPrefix(stdout, "would prune 5 rows") || !strings.Contains(stdout, "would keep 4 rows older than the cutoff: ") ||
		!strings.Contains(stdout, `catalog_xmin`) || !strings.Contains(stdout, "--force deletes them") {
		t.Fatalf("dry run: exit %d, stdout %q\n%s", code, stdout, stderr)
	}
	code, stdout, stderr = prune(env, "--older-than", "1h", "--batch-size", "2")
	if code != ExitOK || !strings.HasPrefix(stdout, "pruned 5 rows") || !strings.Contains(stdout, "; kept 4 rows older than the cutoff: ") ||
		!strings.Contains(stdout, `replication slot "guard_slot"`) {
		t.Fatalf("exit %d, stdout %q\n%s", code, stdout, stderr)
	}
	if n := rows(); n != 4 {
		t.Fatalf("%d rows left, want the 4 the slot has not confirmed", n)
	}

	// Another slot name: missing, so nothing vouches for any row.
	code, stdout, stderr = prune(env, "--older-than", "1h", "--slot", "no_such_slot")
	if code != ExitOK || !strings.HasPrefix(stdout, "pruned 0 rows") || !strings.Contains(stdout, "kept 4 rows") ||
		!strings.Contains(stdout, `"no_such_slot" is missing`) || !strings.Contains(stdout, "set --slot") {
		t.Fatalf("missing slot: exit %d, stdout %q\n%s", code, stdout, stderr)
	}

	// The slot gone, Kafka says the last event delivered is 2h old: rows
	// older than that less the margin go.
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "outbox.event.order"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "outbox.event.order", Key: []byte("1"), Timestamp: time.Now().Add(-2 * time.Hour),
		Headers: []kgo.RecordHeader{{Key: sink.HeaderID, Value: []byte("e-1")}, {Key: sink.HeaderLSN, Value: []byte("0/1")}}}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	insert(2, "90 minutes") // newer than the last delivered event
	pg.Exec("SELECT pg_drop_replication_slot('guard_slot')")
	withKafka := []string{"--older-than", "1h", "--kafka-brokers", cluster.ListenAddrs()[0], "--recovery-margin", "30m"}
	code, stdout, stderr = prune(env, withKafka...)
	if code != ExitOK || !strings.HasPrefix(stdout, "pruned 4 rows") || !strings.Contains(stdout, "kept 2 rows") ||
		!strings.Contains(stdout, "newer than the last event delivered to Kafka") {
		t.Fatalf("slot gone, last delivered from Kafka: exit %d, stdout %q\n%s", code, stdout, stderr)
	}
	code, stdout, stderr = prune(env, "--older-than", "1h", "--force")
	if code != ExitOK || !strings.HasPrefix(stdout, "pruned 2 rows") || !strings.Contains(stdout, "--force") || rows() != 0 {
		t.Fatalf("--force: exit %d, stdout %q, %d rows left\n%s", code, stdout, rows(), stderr)
	}
}

// TestPruneGuardPartitioned: an expired daily partition holding a row the
// slot has not confirmed stays, the others are dropped one by one.
func TestPruneGuardPartitioned(t *testing.T) {
	dsn, pg := testDatabase(t)
	createPartitionedOutbox(t, pg, `"public"."outbox"`)
	dayStart := func(off int) string { return time.Now().UTC().AddDate(0, 0, off).Format("2006-01-02") + " 00:00:00+00" }
	day := func(off int) string { return time.Now().UTC().AddDate(0, 0, off).Format("20060102") }
	for _, off := range []int{-10, -8, -5} {
		pg.Exec("CREATE TABLE public.outbox_p" + day(off) + " PARTITION OF public.outbox FOR VALUES FROM ('" + dayStart(off) + "') TO ('" + dayStart(off+1) + "')")
	}
	insert := func(n int, at string) {
		pg.Exec(`INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, created_at)
			SELECT 'a', i::text, 'e', $1::timestamptz FROM generate_series(1, $2) i`, at, n)
	}
	pg.Exec("SELECT pg_create_logical_replication_slot('guard_part', 'pgoutput')")
	insert(3, dayStart(-10))
	insert(2, dayStart(-8))
	confirmPast(t, pg, "guard_part",
		"SELECT count(*) FROM public.outbox WHERE age(xmin) > (SELECT age(catalog_xmin) FROM pg_replication_slots WHERE slot_name = $1)", 5)
	insert(1, dayStart(-5)) // unconfirmed, in its own expired partition
	insert(1, dayStart(-8)) // unconfirmed, beside confirmed rows
	env := map[string]string{"WALRELAY_POSTGRES_DSN": dsn, "WALRELAY_SLOT": "guard_part"}

	code, stdout, stderr := prune(env, "--older-than", "2d", "--dry-run")
	want := "would drop 1 partitions (public.outbox_p" + day(-10) + ": 3 rows)"
	if code != ExitOK || !strings.HasPrefix(stdout, want) || !strings.Contains(stdout, "would keep 2 rows older than the cutoff (and the partitions holding them: public.outbox_p"+day(-8)+", public.outbox_p"+day(-5)+")") {
		t.Fatalf("dry run: exit %d, stdout %q, want prefix %q\n%s", code, stdout, want, stderr)
	}
	code, stdout, stderr = prune(env, "--older-than", "2d")
	if code != ExitOK || !strings.HasPrefix(stdout, "dropped 1 partitions (public.outbox_p"+day(-10)+")") || !strings.Contains(stdout, "kept 2 rows") {
		t.Fatalf("exit %d, stdout %q\n%s", code, stdout, stderr)
	}
	if n := len(logLines(t, stderr, "kept partition")); n != 2 {
		t.Errorf("%d kept partition logs, want 2:\n%s", n, stderr)
	}
	if n := pg.Count("SELECT count(*) FROM public.outbox"); n != 4 {
		t.Errorf("%d rows left, want the 4 of the kept partitions", n)
	}
	code, stdout, stderr = prune(env, "--older-than", "2d", "--force")
	if code != ExitOK || !strings.HasPrefix(stdout, "dropped 2 partitions") || pg.Count("SELECT count(*) FROM public.outbox") != 0 {
		t.Fatalf("--force: exit %d, stdout %q\n%s", code, stdout, stderr)
	}
}
