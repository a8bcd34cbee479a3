package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walrelay/walrelay/internal/testwait"
	"github.com/walrelay/walrelay/sink"
	"github.com/walrelay/walrelay/test/pgtest"
)

// testDatabase creates a database of its own for t and returns its DSN and a
// connection to it (see pgtest.Database).
func testDatabase(t *testing.T) (string, *pgtest.Conn) {
	t.Helper()
	dsn := pgtest.Database(t, "relay")
	return dsn, pgtest.Connect(t, dsn)
}

// relayFixture sets up an outbox table, and runs the relay against kfake.
type relayFixture struct {
	pg      *pgtest.Conn
	cluster *kfake.Cluster
	name    string
	cancel  context.CancelFunc
	done    chan error
	stopped sync.Once
	logs    *lockedWriter // the relay's log
}

func startRelay(t *testing.T, name string, cluster *kfake.Cluster, mods ...func(*Options)) *relayFixture {
	t.Helper()
	return startRelayWith(t, name, cluster, createOutbox, mods...)
}

// startRelayWith is startRelay with the outbox table made by create (dsn,
// schema.name).
func startRelayWith(t *testing.T, name string, cluster *kfake.Cluster, create func(t *testing.T, dsn, table string), mods ...func(*Options)) *relayFixture {
	t.Helper()
	// A database of its own: logical messages (other walrelays' heartbeats)
	// and transactions of concurrent tests reach every slot of a database,
	// and the assertions below need a WAL with only this test's writes.
	dsn, pg := testDatabase(t)
	pg.Exec(fmt.Sprintf("DROP TABLE IF EXISTS public.%s_outbox", name))
	create(t, dsn, "public."+name+"_outbox")
	t.Cleanup(func() {
		pg.Exec("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active", name)
		pg.Exec(fmt.Sprintf("DROP PUBLICATION IF EXISTS %s", name))
		pg.Exec(fmt.Sprintf("DROP TABLE IF EXISTS public.%s_outbox", name))
	})
	opts := testOptions(dsn, cluster.ListenAddrs(), name)
	for _, mod := range mods {
		mod(&opts)
	}

	f := &relayFixture{pg: pg, cluster: cluster, name: name, done: make(chan error, 1), logs: &lockedWriter{b: &strings.Builder{}}}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	log := slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts.Logger = log
	go func() { f.done <- Run(ctx, opts) }()
	t.Cleanup(func() {
		f.stop()
		if t.Failed() {
			t.Logf("relay log:\n%s", f.logs.String())
		}
	})
	testwait.Eventually(t, 20*time.Second, "the slot to be streamed", func() bool {
		var active bool
		err := pg.Conn.QueryRow(context.Background(), "SELECT active FROM pg_replication_slots WHERE slot_name = $1", name).Scan(&active)
		return err == nil && active
	})
	return f
}

// stop ends Run and waits for it to return (once; later calls return at
// once).
func (f *relayFixture) stop() {
	f.cancel()
	f.stopped.Do(func() {
		select {
		case <-f.done:
		case <-time.After(20 * time.Second):
		}
	})
}

type lockedWriter struct {
	mu atomic.Bool
	b  *strings.Builder
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	for !w.mu.CompareAndSwap(false, true) {
	}
	defer w.mu.Store(false)
	return w.b.Write(p)
}

// String returns what was written so far; safe while the relay writes.
func (w *lockedWriter) String() string {
	for !w.mu.CompareAndSwap(false, true) {
	}
	defer w.mu.Store(false)
	return w.b.String()
}

func (f *relayFixture) insertTxn(t *testing.T, agg string, n int) {
	t.Helper()
	tx, err := f.pg.Conn.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := tx.Exec(context.Background(), fmt.Sprintf(
			"INSERT INTO public.%s_outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', $1, 'created', $2)", f.name),
			agg, fmt.Sprintf(`{"n": %d}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func consumeAll(t *testing.T, brokers []string, topic string, want int) []*kgo.Record {
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

func headerValue(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// TestAckDisciplineKfake holds every produce request in kfake and shows that
// the slot's confirmed_flush_lsn does not pass the held records; once Kafka
// answers, it advances to (at least) the end of the last transaction.
func TestAckDisciplineKfake(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	release := make(chan struct{})
	var held atomic.Int32
	cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		select {
		case <-release:
		default:
			held.Add(1)
			cluster.SleepControl(func() { <-release })
		}
		return nil, nil, false // then let kfake handle it normally
	})

	f := startRelay(t, "relay_ack", cluster)
	pg := f.pg
	// Caught up before the writes: the idle stream confirms the WAL end.
	start := pg.InsertLSN()
	testwait.Eventually(t, 15*time.Second, "the idle slot to reach the WAL end", func() bool { return pg.Confirmed(f.name) >= start })
	before := pg.Confirmed(f.name)

	for i := 0; i < 5; i++ {
		f.insertTxn(t, fmt.Sprintf("agg-%d", i%2), 3)
	}
	after := pg.InsertLSN()
	testwait.Eventually(t, 15*time.Second, "a produce request to be held", func() bool { return held.Load() > 0 })

	// While Kafka has acknowledged nothing, the slot must not move past the
	// first transaction's first insert (nothing else writes WAL here; the
	// transaction ends after it, so reaching the insert position is allowed).
	var maxSeen pglogrepl.LSN
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		if c := pg.Confirmed(f.name); c > maxSeen {
			maxSeen = c
		}
		time.Sleep(100 * time.Millisecond)
	}
	close(release)

	recs := consumeAll(t, cluster.ListenAddrs(), f.name+".order", 15)
	firstInsert := pglogrepl.LSN(1<<64 - 1)
	for _, r := range recs {
		l, err := pglogrepl.ParseLSN(headerValue(r, sink.HeaderLSN))
		if err != nil {
			t.Fatalf("record without a valid %s header: %v", sink.HeaderLSN, err)
		}
		firstInsert = min(firstInsert, l)
	}
	if maxSeen > firstInsert {
		t.Fatalf("confirmed_flush_lsn reached %v while the records starting at %v were unacknowledged (before writes: %v)", maxSeen, firstInsert, before)
	}
	testwait.Eventually(t, 15*time.Second, fmt.Sprintf("confirmed_flush_lsn to reach %v after Kafka acknowledged", after), func() bool {
		return pg.Confirmed(f.name) >= after
	})
	t.Logf("held %d produce requests; confirmed stayed at %v (<= first insert %v) while held, reached %v after (last commit %v)",
		held.Load(), maxSeen, firstInsert, pg.Confirmed(f.name), after)
}

// TestPermanentProduceErrorStops makes Kafka refuse records for good: the
// relay must stop with an error naming the event, and the slot must not pass
// the refused transaction.
func TestPermanentProduceErrorStops(t *testing.T) {
	for _, tc := range []struct {
		name        string
		maxInFlight int
		events      int
	}{
		{"below the cap", 10000, 2},
		// Every unit held by a failed record: the reader is blocked at the
		// cap when the failures arrive and must still stop.
		{"blocked at the cap", 3, 20},
	} {
		t.Run(tc.name, func(t *testing.T) { permanentProduceErrorStops(t, tc.maxInFlight, tc.events) })
	}
}

func permanentProduceErrorStops(t *testing.T, maxInFlight, events int) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		return produceErrorResponse(req.(*kmsg.ProduceRequest), kerr.InvalidRecord.Code), nil, true
	})
	f := startRelay(t, "relay_poison", cluster, func(o *Options) { o.MaxInFlight, o.Sink.MaxBufferedRecords = maxInFlight, maxInFlight })
	pg := f.pg
	start := pg.InsertLSN()
	testwait.Eventually(t, 15*time.Second, "the idle slot to reach the WAL end", func() bool { return pg.Confirmed(f.name) >= start })
	f.insertTxn(t, "agg-x", events)
	var runErr error
	select {
	case runErr = <-f.done:
	case <-time.After(30 * time.Second):
		t.Fatal("relay kept running after Kafka refused a record for good")
	}
	if runErr == nil || !errors.Is(runErr, kerr.InvalidRecord) || !strings.Contains(runErr.Error(), "event id=") {
		t.Fatalf("relay returned %v; want an error naming the event and wrapping INVALID_RECORD", runErr)
	}
	f.done <- runErr // for the cleanup's stop
	// The refused transaction must still be ahead of the slot: a restart
	// reads it again. (The confirmed position itself may pass start: WAL is
	// cluster-wide, and a keepalive's WAL end from before the transaction's
	// commit is a safe position to confirm.) Only this test writes to the
	// outbox of its own database, so every insert still in the slot is one
	// of the refused transaction's.
	testwait.Eventually(t, 15*time.Second, "the walsender to release the slot", func() bool {
		return pg.Count("SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active", f.name) == 1
	})
	if n := pg.Count(`SELECT count(*) FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
		'proto_version', '1', 'publication_names', $2) WHERE substr(data, 1, 1) = 'I'::bytea`, f.name, f.name); n != events {
		t.Fatalf("the slot still holds %d inserts of the refused transaction, want %d: it was confirmed past it (confirmed %v, start %v)",
			n, events, pg.Confirmed(f.name), start)
	}
}

func produceErrorResponse(req *kmsg.ProduceRequest, code int16) *kmsg.ProduceResponse {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.ErrorCode = code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}
