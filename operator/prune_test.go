package operator

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walrelay/walrelay/internal/testwait"
	"github.com/walrelay/walrelay/replication"
	"github.com/walrelay/walrelay/sink"
	"github.com/walrelay/walrelay/test/pgtest"
	"github.com/walrelay/walrelay/test/relaytest"
)

// deliveredAt puts into cluster the record of an event walrelay delivered
// to topic at commit time at (its Kafka timestamp, and a commit time header
// when commitTime is set and differs).
func deliveredAt(t *testing.T, cluster *kfake.Cluster, topic, id string, at time.Time, hs ...kgo.RecordHeader) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	r := &kgo.Record{Topic: topic, Key: []byte("k"), Value: []byte("{}"), Timestamp: at,
		Headers: append([]kgo.RecordHeader{{Key: sink.HeaderID, Value: []byte(id)}, {Key: sink.HeaderLSN, Value: []byte("0/16B3748")}}, hs...)}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// inTokyo makes Asia/Tokyo the TimeZone of every new session of the
// database of pg.
func inTokyo(t *testing.T, pg *pgtest.Conn) {
	t.Helper()
	var db string
	if err := pg.Conn.QueryRow(context.Background(), "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	pg.Exec(fmt.Sprintf("ALTER DATABASE %s SET timezone = 'Asia/Tokyo'", pgx.Identifier{db}.Sanitize()))
}

// utcWallTable makes table's created_at a timestamp without time zone
// holding UTC wall-clock time, as the decoder and replay read such a column.
func utcWallTable(pg *pgtest.Conn, table string) {
	pg.Exec("ALTER TABLE " + table + " ALTER COLUMN created_at TYPE timestamp USING created_at AT TIME ZONE 'UTC', " +
		"ALTER COLUMN created_at SET DEFAULT (now() AT TIME ZONE 'UTC')")
}

// TestPruneTimestampWithoutTimeZoneInAnotherZone: on a server whose
// sessions run in Asia/Tokyo, a timestamp without time zone column is read
// as UTC by prune's cutoff, by its slot-gone guard and by the retained span,
// as the decoder and replay read it: prune deletes no row younger than
// --older-than nor any committed after the last delivered event, and the
// span is not 9 hours off.
func TestPruneTimestampWithoutTimeZoneInAnotherZone(t *testing.T) {
	dsn, pg := relaytest.Database(t)
	relaytest.CreateOutbox(t, dsn, "public.tz_outbox")
	utcWallTable(pg, "public.tz_outbox")
	inTokyo(t, pg)
	insert := func(agg, age string) {
		pg.Exec(`INSERT INTO public.tz_outbox (aggregate_type, aggregate_id, event_type, created_at)
			SELECT 'order', $1, 'e', (now() - $2::interval) AT TIME ZONE 'UTC' FROM generate_series(1, 3)`, agg, age)
	}
	insert("old", "3 hours")
	insert("gap", "90 minutes") // committed after the last delivered event
	insert("fresh", "30 minutes")
	ctx := context.Background()
	now := serverNow(t, pg)

	// The span: the oldest row is 3 hours old.
	conn, err := replication.OpenPgx(ctx, dsn, "span test", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	_, spans, err := ReadOutboxSpans(ctx, conn.PgConn(), []string{"public.tz_outbox"}, "created_at")
	if err != nil {
		t.Fatal(err)
	}
	if len(spans) != 1 || spans[0].Empty {
		t.Fatalf("spans %+v", spans)
	}
	if d := now.Sub(spans[0].Oldest); d < 175*time.Minute || d > 185*time.Minute {
		t.Errorf("the oldest row is %s old by the span, want 3h", d)
	}

	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	deliveredAt(t, cluster, "tz.order", "last", now.Add(-2*time.Hour))
	_, sc, _ := relaytest.Configs(dsn, cluster.ListenAddrs(), "tz")
	opts := PruneOptions{DSN: dsn, Table: "public.tz_outbox", OlderThan: time.Hour, BatchSize: 100, TimeColumn: "created_at",
		Slot: "tz_missing", Delivered: &DeliveredOptions{Sink: sc, DSN: dsn, Slot: "tz_missing"}, RecoveryMargin: 10 * time.Minute}
	log := slog.New(slog.DiscardHandler)

	// The cutoff alone (--force, dry run): the rows older than an hour.
	forced := opts
	forced.Force, forced.DryRun = true, true
	res, err := Prune(ctx, forced, log)
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 6 {
		t.Errorf("prune --force --older-than 1h --dry-run would delete %d rows, want the 6 older than an hour", res.Rows)
	}
	// The guard: the slot is gone, the last delivered event is 2 hours old.
	if res, err = Prune(ctx, opts, log); err != nil {
		t.Fatal(err)
	}
	if n := pg.Count("SELECT count(*) FROM public.tz_outbox WHERE aggregate_id = 'gap'"); res.Rows != 3 || n != 3 {
		t.Errorf("prune deleted %d rows and left %d of the 3 committed after the last delivered event, want 3 deleted (the older ones) and 3 left (%s)",
			res.Rows, n, res.KeptWhy)
	}

}

// serverNow is the server's clock.
func serverNow(t *testing.T, pg *pgtest.Conn) time.Time {
	t.Helper()
	var now time.Time
	if err := pg.Conn.QueryRow(context.Background(), "SELECT now()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

// TestPruneRefusesAnotherDatabasesSlot: slot names are cluster-wide; a slot
// of database A, however far it confirmed, vouches for no row of database
// B's outbox: pruning B naming it keeps every row, and says why.
func TestPruneRefusesAnotherDatabasesSlot(t *testing.T) {
	_, pgA := relaytest.Database(t)
	dsnB, pgB := relaytest.Database(t)
	relaytest.CreateOutbox(t, dsnB, "public.other_outbox")
	pgB.Exec(`INSERT INTO public.other_outbox (aggregate_type, aggregate_id, event_type, created_at)
		SELECT 'order', i::text, 'e', now() - interval '3 hours' FROM generate_series(1, 5) i`)
	slot := "shared_" + fmt.Sprint(time.Now().UnixNano()%1e6)
	pgA.Exec("SELECT pg_create_logical_replication_slot($1, 'pgoutput')", slot)
	// A's slot confirms past B's rows (catalog_xmin is a cluster-wide id).
	testwait.Eventually(t, 2*time.Minute, "the slot's catalog_xmin to pass B's rows", func() bool {
		pgA.Exec("CHECKPOINT")
		pgA.Exec("SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())", slot)
		return pgB.Count("SELECT count(*) FROM public.other_outbox WHERE age(xmin) > (SELECT age(catalog_xmin) FROM pg_replication_slots WHERE slot_name = $1)", slot) == 5
	})
	res, err := Prune(context.Background(), PruneOptions{DSN: dsnB, Table: "public.other_outbox", OlderThan: time.Hour, BatchSize: 100,
		TimeColumn: "created_at", Slot: slot}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if n := pgB.Count("SELECT count(*) FROM public.other_outbox"); res.Rows != 0 || n != 5 {
		t.Fatalf("prune of database B naming database A's slot deleted %d rows (%d left of 5): %s", res.Rows, n, res.KeptWhy)
	}
	if !strings.Contains(res.KeptWhy, "another database") {
		t.Errorf("prune kept the rows, saying %q: want it to say the slot is another database's", res.KeptWhy)
	}
}
