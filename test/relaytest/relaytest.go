// Package relaytest gives the integration tests of the runtime (relay) and
// of the operator's tools (operator) their common fixture: an outbox table
// in a database of its own (pgtest), a run streaming it into Kafka (kfake),
// and what reads the records back. The run is passed in, so that this
// package imports neither relay nor operator and serves the tests inside
// both.
package relaytest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/internal/testwait"
	"github.com/walrelay/walrelay/migrations"
	"github.com/walrelay/walrelay/replication"
	"github.com/walrelay/walrelay/sink"
	"github.com/walrelay/walrelay/test/pgtest"
)

// Database creates a database of its own for t and returns its DSN and a
// connection to it (see pgtest.Database).
func Database(t *testing.T) (string, *pgtest.Conn) {
	t.Helper()
	dsn := pgtest.Database(t, "relay")
	return dsn, pgtest.Connect(t, dsn)
}

// Configs are the stages' configurations of one relay over
// public.<name>_outbox with the default columns, slot and publication
// <name>, topics <name>.{aggregate_type}: what walrelay's defaults map to.
func Configs(dsn string, brokers []string, name string) (replication.Config, sink.Config, decoder.Config) {
	table := "public." + name + "_outbox"
	cols := decoder.DefaultColumns()
	return replication.Config{DSN: dsn, Slot: name, Publication: name, Tables: []string{table},
			Columns: map[string][]string{table: cols.Mapped()}, StatusInterval: 100 * time.Millisecond, ShutdownTimeout: 5 * time.Second},
		sink.Config{Brokers: brokers, Topic: name + ".{aggregate_type}", Compression: "zstd", Linger: 5 * time.Millisecond,
			BatchMaxBytes: 1 << 20, MaxBufferedBytes: 64 << 20, MaxBufferedRecords: 10000, TopicPartitions: -1, TopicReplicationFactor: -1,
			DLQTopic: sink.DefaultDLQTopic},
		decoder.Config{Tables: []decoder.Table{{Schema: "public", Name: name + "_outbox", Columns: cols}}}
}

// CreateOutbox creates the outbox table (schema.name) with walrelay's
// migrations, as `walrelay migrate` does.
func CreateOutbox(t *testing.T, dsn, table string) {
	t.Helper()
	applyMigrations(t, dsn, table, migrations.All)
}

// CreatePartitionedOutbox creates the outbox table (schema.name)
// partitioned by day, as `walrelay migrate --partitioned` does.
func CreatePartitionedOutbox(t *testing.T, dsn, table string) {
	t.Helper()
	applyMigrations(t, dsn, table, migrations.Partitioned)
	applyMigrations(t, dsn, table, migrations.All)
}

func applyMigrations(t *testing.T, dsn, table string, set func() ([]migrations.Migration, error)) {
	t.Helper()
	tn, err := replication.ParseTable(table)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := set()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, migrations.CreateSchema(pgx.Identifier{tn.Schema}.Sanitize())); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if _, err := conn.Exec(ctx, m.Render(tn.Quoted())); err != nil {
			t.Fatalf("apply %s: %v", m.Name, err)
		}
	}
}

// Fixture is an outbox table and a run streaming it into kfake.
type Fixture struct {
	PG      *pgtest.Conn
	DSN     string
	Cluster *kfake.Cluster
	Name    string
	Cancel  context.CancelFunc
	Done    chan error
	stopped sync.Once
	Logs    *LockedWriter // the run's log
}

// Start creates public.<name>_outbox with create (dsn, schema.name) in a
// database of its own, has prepare make the run from its DSN and a logger
// writing to Logs, starts the run, and waits until slot <name> is
// streamed. Cleanups stop the run and drop the slot, the publication and
// the table.
func Start(t *testing.T, name string, cluster *kfake.Cluster, create func(t *testing.T, dsn, table string),
	prepare func(dsn string, log *slog.Logger) (run func(context.Context) error)) *Fixture {
	t.Helper()
	// A database of its own: logical messages (other walrelays' heartbeats)
	// and transactions of concurrent tests reach every slot of a database,
	// and the assertions need a WAL with only this test's writes.
	dsn, pg := Database(t)
	pg.Exec(fmt.Sprintf("DROP TABLE IF EXISTS public.%s_outbox", name))
	create(t, dsn, "public."+name+"_outbox")
	t.Cleanup(func() {
		pg.Exec("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active", name)
		pg.Exec(fmt.Sprintf("DROP PUBLICATION IF EXISTS %s", name))
		pg.Exec(fmt.Sprintf("DROP TABLE IF EXISTS public.%s_outbox", name))
	})

	f := &Fixture{PG: pg, DSN: dsn, Cluster: cluster, Name: name, Done: make(chan error, 1), Logs: &LockedWriter{b: &strings.Builder{}}}
	ctx, cancel := context.WithCancel(context.Background())
	f.Cancel = cancel
	log := slog.New(slog.NewTextHandler(f.Logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	run := prepare(dsn, log)
	go func() { f.Done <- run(ctx) }()
	t.Cleanup(func() {
		f.Stop()
		if t.Failed() {
			t.Logf("relay log:\n%s", f.Logs.String())
		}
	})
	// Until the slot is streamed, a row committed now may precede its
	// consistent point and never be in its stream. Slot creation waits for
	// the transactions running on the whole server, which takes long under
	// load: 60 s only bounds a failure.
	testwait.Eventually(t, 60*time.Second, "slot "+name+" to be created and streamed", func() bool { return SlotStreamed(pg, name) })
	return f
}

// SlotStreamed reports whether slot name, of pg's database, is past its
// creation and streamed: what a test waits for before it writes rows that a
// run must stream.
func SlotStreamed(pg *pgtest.Conn, name string) bool {
	s, err := replication.ReadSlot(context.Background(), replication.NewQuerier(pg.Conn.PgConn()), name)
	return err == nil && slotStreamed(s)
}

// slotStreamed reports whether s, read in the fixture's database, is a slot
// of that database that a run streams from and that is past its creation.
// Active alone is not enough: a slot is active while it is being created,
// and until its consistent point is reached (confirmed_flush_lsn is NULL
// meanwhile) a transaction that commits is before the slot's start and never
// in its stream.
func slotStreamed(s replication.Slot) bool {
	return s.InCurrentDatabase && s.Active && s.ConfirmedFlushLSN != 0
}

// Stop ends the run and waits for it to return (once; later calls return
// at once).
func (f *Fixture) Stop() {
	f.Cancel()
	f.stopped.Do(func() {
		select {
		case <-f.Done:
		case <-time.After(20 * time.Second):
		}
	})
}

// LockedWriter collects a log that a run writes while a test reads it.
type LockedWriter struct {
	mu atomic.Bool
	b  *strings.Builder
}

func (w *LockedWriter) Write(p []byte) (int, error) {
	for !w.mu.CompareAndSwap(false, true) {
	}
	defer w.mu.Store(false)
	return w.b.Write(p)
}

// String returns what was written so far; safe while the run writes.
func (w *LockedWriter) String() string {
	for !w.mu.CompareAndSwap(false, true) {
	}
	defer w.mu.Store(false)
	return w.b.String()
}

// InsertTxn inserts n rows of aggregate agg in one transaction.
func (f *Fixture) InsertTxn(t *testing.T, agg string, n int) {
	t.Helper()
	tx, err := f.PG.Conn.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := tx.Exec(context.Background(), fmt.Sprintf(
			"INSERT INTO public.%s_outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', $1, 'created', $2)", f.Name),
			agg, fmt.Sprintf(`{"n": %d}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// ConsumeAll reads topic from its start until it has want records (fails
// t after 20 s).
func ConsumeAll(t *testing.T, brokers []string, topic string, want int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for len(recs) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records from %s", len(recs), want, topic)
		}
		fs.EachRecord(func(r *kgo.Record) { recs = append(recs, r) })
	}
	return recs
}

// HeaderValue is r's header key ("" when absent).
func HeaderValue(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
