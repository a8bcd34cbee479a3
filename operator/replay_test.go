package operator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/internal/testwait"
	"github.com/walrelay/walrelay/relay"
	"github.com/walrelay/walrelay/sink"
	"github.com/walrelay/walrelay/test/relaytest"
)

// replayFixture is a relay over kfake whose outbox holds rows the relay
// delivered, for replays to publish again.
type replayFixture struct {
	*relayFixture
	opts  relay.Options
	table string // quoted
}

func newReplayFixture(t *testing.T, name string, mods ...func(*relay.Options)) *replayFixture {
	t.Helper()
	return newReplayFixtureWith(t, name, relaytest.CreateOutbox, mods...)
}

func newReplayFixtureWith(t *testing.T, name string, create func(t *testing.T, dsn, table string), mods ...func(*relay.Options)) *replayFixture {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	return newReplayFixtureOn(t, name, cluster, create, mods...)
}

// newReplayFixtureOn is newReplayFixtureWith on a given cluster.
func newReplayFixtureOn(t *testing.T, name string, cluster *kfake.Cluster, create func(t *testing.T, dsn, table string), mods ...func(*relay.Options)) *replayFixture {
	t.Helper()
	var opts relay.Options
	f := startRelayWith(t, name, cluster, create, append(mods, func(o *relay.Options) { opts = *o })...)
	opts.Logger = slog.New(slog.DiscardHandler)
	return &replayFixture{relayFixture: f, opts: opts, table: pgx.Identifier{"public", name + "_outbox"}.Sanitize()}
}

// txn inserts rows (aggregate id, event type, payload SQL, headers SQL) in
// one transaction and returns their ids in insertion order.
func (f *replayFixture) txn(t *testing.T, rows ...[4]string) []string {
	t.Helper()
	ctx := context.Background()
	tx, err := f.PG.Conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var ids []string
	for _, r := range rows {
		var id string
		q := fmt.Sprintf("INSERT INTO %s (aggregate_type, aggregate_id, event_type, payload, headers) VALUES ('order', $1, $2, %s, %s) RETURNING id::text",
			f.table, r[2], r[3])
		if err := tx.QueryRow(ctx, q, r[0], r[1]).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return ids
}

// now is the server's clock: rows inserted after it have a later
// created_at.
func (f *replayFixture) now(t *testing.T) time.Time {
	t.Helper()
	var ts time.Time
	if err := f.PG.Conn.QueryRow(context.Background(), "SELECT clock_timestamp()").Scan(&ts); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	return ts
}

// createdAt returns every row's created_at by id.
func (f *replayFixture) createdAt(t *testing.T) map[string]time.Time {
	t.Helper()
	rows, err := f.PG.Conn.Query(context.Background(), "SELECT id::text, created_at FROM "+f.table)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]time.Time{}
	for rows.Next() {
		var id string
		var ts time.Time
		if err := rows.Scan(&id, &ts); err != nil {
			t.Fatal(err)
		}
		out[id] = ts
	}
	return out
}

func (f *replayFixture) topic() string { return f.Name + ".order" }

// split separates a topic's records into the relay's (by id) and the
// replays' (in log order).
func split(recs []*kgo.Record) (orig map[string]*kgo.Record, replayed []*kgo.Record) {
	orig = map[string]*kgo.Record{}
	for _, r := range recs {
		if relaytest.HeaderValue(r, sink.HeaderReplay) != "" {
			replayed = append(replayed, r)
		} else {
			orig[relaytest.HeaderValue(r, sink.HeaderID)] = r
		}
	}
	return orig, replayed
}

// sameRecord fails t unless replayed is orig published again: same topic,
// key, value, headers (but walrelay.lsn and walrelay.xid, which give way to
// the replay marker id, and without commit timestamps a dead letter's
// commit time, which is the row's created_at) and, with commit timestamps,
// timestamp.
func sameRecord(t *testing.T, replayed, orig *kgo.Record, id string, commitTimes bool, createdAt map[string]time.Time) {
	t.Helper()
	ev := relaytest.HeaderValue(orig, sink.HeaderID)
	if replayed.Topic != orig.Topic || !bytes.Equal(replayed.Key, orig.Key) || !bytes.Equal(replayed.Value, orig.Value) ||
		(replayed.Value == nil) != (orig.Value == nil) {
		t.Errorf("event %s: replayed %s key %q value %q, original %s key %q value %q", ev, replayed.Topic, replayed.Key, replayed.Value,
			orig.Topic, orig.Key, orig.Value)
	}
	var want []kgo.RecordHeader
	for _, h := range orig.Headers {
		switch {
		case h.Key == sink.HeaderLSN || h.Key == sink.HeaderXID:
		case h.Key == sink.HeaderDLQCommitTime && !commitTimes:
			// Without commit timestamps a replay knows the row's time
			// column only, and says so as the record timestamp does.
			want = append(want, kgo.RecordHeader{Key: h.Key, Value: []byte(createdAt[ev].UTC().Format(time.RFC3339Nano))})
		default:
			want = append(want, h)
		}
	}
	want = append(want, kgo.RecordHeader{Key: sink.HeaderReplay, Value: []byte(id)})
	if !slices.EqualFunc(replayed.Headers, want, func(a, b kgo.RecordHeader) bool { return a.Key == b.Key && bytes.Equal(a.Value, b.Value) }) {
		t.Errorf("event %s: replayed headers %v, want %v", ev, replayed.Headers, want)
	}
	switch {
	case commitTimes && !replayed.Timestamp.Equal(orig.Timestamp):
		t.Errorf("event %s: replayed timestamp %v, original (commit time) %v", ev, replayed.Timestamp, orig.Timestamp)
	case !commitTimes && !replayed.Timestamp.Equal(createdAt[ev].Truncate(time.Millisecond)):
		t.Errorf("event %s: replayed timestamp %v, want the row's created_at %v (no commit timestamps)", ev, replayed.Timestamp, createdAt[ev])
	}
}

// TestReplaySameRecords: a replay of a time range publishes every row in it
// once more as the record the relay made of its INSERT (dead letters
// included), marked as a replay, in the rows' order per aggregate, and
// nothing outside the range.
func TestReplaySameRecords(t *testing.T) {
	f := newReplayFixture(t, "replay_same")
	f.txn(t, [4]string{"a-1", "created", `'{"before": true}'`, `'{}'`})
	since := f.now(t)
	var in []string
	in = append(in, f.txn(t,
		[4]string{"a-1", "created", `'{"n": 1}'`, `'{"traceparent": "00-1", "n": 2, "id": "shadowed"}'`},
		[4]string{"a-1", "updated", `'{"n": 2}'`, `'{}'`},
		[4]string{"a-2", "created", `NULL`, `'{"tenant": "t1"}'`})...)
	in = append(in, f.txn(t, [4]string{"a-2", "updated", `'"just a string"'`, `'{}'`}, [4]string{"a-1", "deleted", `'[1, 2]'`, `'{}'`})...)
	dl := f.txn(t, [4]string{"", "created", `'{"empty": "key"}'`, `'{}'`}) // empty_aggregate_id: dead-lettered
	in = append(in, dl...)
	in = append(in, f.txn(t, [4]string{"a-3", "created", `'{"n": 3}'`, `'{}'`})...)
	until := f.now(t)
	f.txn(t, [4]string{"a-1", "created", `'{"after": true}'`, `'{}'`})
	relaytest.ConsumeAll(t, f.Cluster.ListenAddrs(), f.topic(), 8)
	relaytest.ConsumeAll(t, f.Cluster.ListenAddrs(), sink.DefaultDLQTopic, 1)

	res, err := replay(context.Background(), f.opts, ReplayOptions{Selection: ReplaySelection{Since: since, Until: until}, ID: "r1"})
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if !res.Complete || res.Acked != int64(len(in)) || res.DeadLettered != 1 || res.ResumeToken != "" {
		t.Fatalf("replay result %+v, want %d rows acknowledged, 1 dead-lettered, complete", res, len(in))
	}
	recs := relaytest.ConsumeAll(t, f.Cluster.ListenAddrs(), f.topic(), 8+len(in)-1)
	orig, replayed := split(recs)
	if len(replayed) != len(in)-1 {
		t.Fatalf("%d replayed records on %s, want %d", len(replayed), f.topic(), len(in)-1)
	}
	createdAt := f.createdAt(t)
	t.Logf("commit timestamps recorded: %v", res.CommitTimes)
	seen := map[string]bool{}
	byKey := map[string][]string{}
	for _, r := range replayed {
		id := relaytest.HeaderValue(r, sink.HeaderID)
		if seen[id] || !slices.Contains(in, id) {
			t.Errorf("replayed event %s: twice, or not in the range", id)
		}
		seen[id] = true
		sameRecord(t, r, orig[id], "r1", res.CommitTimes, createdAt)
		byKey[string(r.Key)] = append(byKey[string(r.Key)], id)
	}
	// Per aggregate, the rows' order: created_at (transaction start), then
	// their order within the transaction.
	want := map[string][]string{"a-1": {in[0], in[1], in[4]}, "a-2": {in[2], in[3]}, "a-3": {in[6]}}
	for k, ids := range want {
		if !slices.Equal(byKey[k], ids) {
			t.Errorf("aggregate %s replayed in the order %v, want %v", k, byKey[k], ids)
		}
	}
	dlq := relaytest.ConsumeAll(t, f.Cluster.ListenAddrs(), sink.DefaultDLQTopic, 2)
	dorig, dre := split(dlq)
	if len(dre) != 1 || relaytest.HeaderValue(dre[0], sink.HeaderDLQReason) != string(sink.ReasonEmptyAggregateID) {
		t.Fatalf("dead-letter topic: %d replayed records, want 1 with reason %s", len(dre), sink.ReasonEmptyAggregateID)
	}
	sameRecord(t, dre[0], dorig[dl[0]], "r1", res.CommitTimes, createdAt)
}

// TestReplayResume: a replay stopped in the middle returns a token; the
// replay resumed with it sends every row the first did not get
// acknowledged, and the two together cover the selection.
func TestReplayResume(t *testing.T) {
	f := newReplayFixture(t, "replay_resume")
	since := f.now(t)
	var all []string
	for i := range 40 {
		var rows [][4]string
		for j := range 1 + i%4 {
			rows = append(rows, [4]string{fmt.Sprintf("a-%d", (i+j)%7), "e", fmt.Sprintf(`'{"i": %d}'`, i), `'{}'`})
		}
		all = append(all, f.txn(t, rows...)...)
	}
	relaytest.ConsumeAll(t, f.Cluster.ListenAddrs(), f.topic(), len(all))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var progressToken string
	first, err := replay(ctx, f.opts, ReplayOptions{Selection: ReplaySelection{Since: since}, Rate: 200, ProgressInterval: 20 * time.Millisecond,
		Progress: func(p ReplayProgress) {
			progressToken = p.ResumeToken
			if p.Acked >= 25 {
				cancel()
			}
		}})
	if err != nil {
		t.Fatalf("first replay: %v", err)
	}
	if first.Complete || first.ResumeToken == "" || first.Acked < 25 || first.Acked >= int64(len(all)) {
		t.Fatalf("first replay %+v: want it stopped in the middle with a token", first)
	}
	if tok, err := parseReplayToken(progressToken); err != nil || tok.ID != first.ID || tok.From == "" {
		t.Fatalf("the progress reports' resume token %q: %+v, %v", progressToken, tok, err)
	}
	second, err := replay(context.Background(), f.opts, ReplayOptions{Resume: first.ResumeToken})
	if err != nil {
		t.Fatalf("resumed replay: %v", err)
	}
	if !second.Complete || second.ID != first.ID || !second.Since.Equal(first.Since) || second.Resumed != first.Acked {
		t.Fatalf("resumed replay %+v, first %+v", second, first)
	}
	recs := relaytest.ConsumeAll(t, f.Cluster.ListenAddrs(), f.topic(), len(all)+int(first.Acked+second.Acked))
	_, replayed := split(recs)
	got := map[string]int{}
	for _, r := range replayed {
		got[relaytest.HeaderValue(r, sink.HeaderID)]++
	}
	missing := 0
	for _, id := range all {
		if got[id] == 0 {
			missing++
		}
	}
	dup := len(replayed) - len(got)
	if missing > 0 || len(got) != len(all) {
		t.Fatalf("after the resume %d of %d rows were never replayed (%d distinct replayed)", missing, len(all), len(got))
	}
	// Sent twice: at most the rows of the transaction at the resume point
	// (their created_at is the same).
	if dup > 4 {
		t.Errorf("%d rows replayed twice; want at most one transaction's (4)", dup)
	}
	t.Logf("first run %d rows, resumed run %d, %d sent twice", first.Acked, second.Acked, dup)

	if _, err := replay(context.Background(), f.opts, ReplayOptions{Resume: first.ResumeToken,
		Selection: ReplaySelection{AggregateIDs: []string{"a-1"}}}); !errors.Is(err, ErrBadResumeToken) {
		t.Errorf("resume with another selection: %v, want ErrBadResumeToken", err)
	}
}

// TestReplayExactlyOnce: in exactly-once mode the replay's records are
// committed in Kafka transactions of its own transactional id.
func TestReplayExactlyOnce(t *testing.T) {
	f := newReplayFixture(t, "replay_eos")
	since := f.now(t)
	var ids []string
	for i := range 10 {
		ids = append(ids, f.txn(t, [4]string{fmt.Sprintf("a-%d", i%3), "e", fmt.Sprintf(`'{"i": %d}'`, i), `'{}'`})...)
	}
	relaytest.ConsumeAll(t, f.Cluster.ListenAddrs(), f.topic(), len(ids))
	opts := f.opts
	opts.ExactlyOnce = &relay.ExactlyOnce{TransactionalID: "walrelay-" + f.Name, CheckpointTopic: "cp", CommitInterval: time.Second, MaxRecords: 4}
	res, err := replay(context.Background(), opts, ReplayOptions{Selection: ReplaySelection{Since: since}})
	if err != nil || !res.Complete || res.Acked != int64(len(ids)) {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.Cluster.ListenAddrs()...), kgo.ConsumeTopics(f.topic()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var replayed int
	for replayed < len(ids) && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			if relaytest.HeaderValue(r, sink.HeaderReplay) == "" {
				return
			}
			replayed++
			if !r.Attrs.IsTransactional() {
				t.Errorf("replayed record of %s outside a kafka transaction", relaytest.HeaderValue(r, sink.HeaderID))
			}
		})
	}
	if replayed != len(ids) {
		t.Fatalf("a read_committed consumer saw %d replayed records, want %d", replayed, len(ids))
	}
}

// TestReplayNothing: a replay that has nothing to send says why before it
// sends anything.
func TestReplayNothing(t *testing.T) {
	f := newReplayFixture(t, "replay_nothing")
	ctx := context.Background()

	tableless := f.opts
	tableless.Decoder = decoder.Config{MessagePrefix: "walrelay.outbox"}
	_, err := replay(ctx, tableless, ReplayOptions{})
	var nr *NothingToReplayError
	if !errors.As(err, &nr) || !strings.Contains(err.Error(), "tableless") {
		t.Errorf("tableless outbox: %v, want a NothingToReplayError naming it", err)
	}

	f.txn(t, [4]string{"a", "e", `'{}'`, `'{}'`})
	_, err = replay(ctx, f.opts, ReplayOptions{Selection: ReplaySelection{AggregateIDs: []string{"nobody"}}})
	if !errors.As(err, &nr) || !strings.Contains(err.Error(), "no row of public.replay_nothing_outbox matches") {
		t.Errorf("no row matches: %v", err)
	}

	// The application deletes its rows in the transaction that writes them.
	f.PG.Exec("DELETE FROM " + f.table)
	tx, err := f.PG.Conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		var id string
		if err := tx.QueryRow(ctx, "INSERT INTO "+f.table+" (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', 'a', 'e', '{}') RETURNING id::text").Scan(&id); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "DELETE FROM "+f.table+" WHERE id = $1", id); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 20*time.Second, "the table statistics to count the deletes", func() bool {
		var ins, del int64
		_ = f.PG.Conn.QueryRow(ctx, "SELECT n_tup_ins, n_tup_del FROM pg_stat_user_tables WHERE relid = to_regclass($1)", f.table).Scan(&ins, &del)
		return ins > 0 && del >= ins
	})
	_, err = replay(ctx, f.opts, ReplayOptions{})
	if !errors.As(err, &nr) || !strings.Contains(err.Error(), "deletes the rows it writes") {
		t.Errorf("rows deleted as written: %v", err)
	}
}

// TestReplayDryRun counts the rows, their span and topics, and creates
// nothing in Kafka.
func TestReplayDryRun(t *testing.T) {
	f := newReplayFixture(t, "replay_dry")
	since := f.now(t)
	f.txn(t, [4]string{"a", "e", `'{}'`, `'{}'`}, [4]string{"b", "e", `'{}'`, `'{}'`})
	relaytest.ConsumeAll(t, f.Cluster.ListenAddrs(), f.topic(), 2)
	f.PG.Exec("INSERT INTO " + f.table + " (aggregate_type, aggregate_id, event_type, payload) VALUES ('inv@lid', 'c', 'e', '{}')")
	opts := f.opts
	opts.Sink.Topic = "dry.{aggregate_type}"
	res, err := replay(context.Background(), opts, ReplayOptions{DryRun: true, Selection: ReplaySelection{Since: since}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tables) != 1 || res.Tables[0].Rows != 3 || res.Tables[0].Oldest.Before(since) || res.Tables[0].Newest.Before(res.Tables[0].Oldest) {
		t.Fatalf("dry run %+v", res.Tables)
	}
	if tp := res.Tables[0].Topics; len(tp) != 2 || tp["dry.order"] != 2 || tp[sink.DefaultDLQTopic] != 1 {
		t.Errorf("dry run topics %v, want dry.order 2 and the dead-letter topic 1", tp)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.Cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	topics, err := kadm.NewClient(cl).ListTopics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if topics.Has("dry.order") {
		t.Error("the dry run created topic dry.order")
	}
}

// TestReplayRate paces the rows.
func TestReplayRate(t *testing.T) {
	f := newReplayFixture(t, "replay_rate")
	since := f.now(t)
	for i := range 30 {
		f.txn(t, [4]string{fmt.Sprint(i), "e", `'{}'`, `'{}'`})
	}
	start := time.Now()
	res, err := replay(context.Background(), f.opts, ReplayOptions{Selection: ReplaySelection{Since: since}, Rate: 100})
	if err != nil || res.Acked != 30 {
		t.Fatalf("replay %+v, %v", res, err)
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("30 rows at 100 rows/s took %v", d)
	}
}

// TestReplayPartitioned replays rows of an outbox partitioned by day (the
// daily partitions and the default one) as the relay published them
// through the partition root.
func TestReplayPartitioned(t *testing.T) {
	f := newReplayFixtureWith(t, "replay_part", relaytest.CreatePartitionedOutbox)
	// Rows of today's daily partition, and one of two days ago in the
	// default partition.
	f.PG.Exec("SELECT walrelay.outbox_create_partitions(1, to_regclass($1))", f.table)
	in := f.txn(t, [4]string{"a-1", "created", `'{"n": 1}'`, `'{}'`}, [4]string{"a-2", "created", `'{"n": 2}'`, `'{"k": "v"}'`})
	var old string
	if err := f.PG.Conn.QueryRow(context.Background(), "INSERT INTO "+f.table+
		" (aggregate_type, aggregate_id, event_type, payload, created_at) VALUES ('order', 'a-1', 'old', '{}', now() - interval '2 days') RETURNING id::text").Scan(&old); err != nil {
		t.Fatal(err)
	}
	in = append(in, old)
	if n := f.PG.Count("SELECT count(DISTINCT tableoid) FROM " + f.table); n != 2 {
		t.Fatalf("rows in %d partitions, want 2", n)
	}
	relaytest.ConsumeAll(t, f.Cluster.ListenAddrs(), f.topic(), len(in))
	res, err := replay(context.Background(), f.opts, ReplayOptions{ID: "rp"})
	if err != nil || !res.Complete || res.Acked != int64(len(in)) {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	orig, replayed := split(relaytest.ConsumeAll(t, f.Cluster.ListenAddrs(), f.topic(), 2*len(in)))
	createdAt := f.createdAt(t)
	for _, r := range replayed {
		sameRecord(t, r, orig[relaytest.HeaderValue(r, sink.HeaderID)], "rp", res.CommitTimes, createdAt)
	}
	if len(replayed) != len(in) {
		t.Fatalf("%d replayed records, want %d", len(replayed), len(in))
	}
}

// TestReplayFiltered: rows the table's filter does not publish are not
// replayed either.
func TestReplayFiltered(t *testing.T) {
	f := newReplayFixture(t, "replay_filter", func(o *relay.Options) {
		o.Decoder.Tables[0].Filter = decoder.Filter{ExcludeEventTypes: []string{"internal.*"}}
	})
	since := f.now(t)
	ids := f.txn(t, [4]string{"a", "created", `'{}'`, `'{}'`}, [4]string{"a", "internal.audit", `'{}'`, `'{}'`}, [4]string{"a", "updated", `'{}'`, `'{}'`})
	relaytest.ConsumeAll(t, f.Cluster.ListenAddrs(), f.topic(), 2)
	res, err := replay(context.Background(), f.opts, ReplayOptions{Selection: ReplaySelection{Since: since}})
	if err != nil || !res.Complete || res.Acked != 2 || res.Filtered != 1 {
		t.Fatalf("replay %+v, %v: want 2 rows sent and 1 filtered", res, err)
	}
	_, replayed := split(relaytest.ConsumeAll(t, f.Cluster.ListenAddrs(), f.topic(), 4))
	for _, r := range replayed {
		if relaytest.HeaderValue(r, sink.HeaderID) == ids[1] {
			t.Errorf("the filtered row %s was replayed", ids[1])
		}
	}
}

// TestReplayOrderWithinTransaction: one transaction's rows of one aggregate
// share their time column's value; they are replayed in the order they were
// inserted, also when the heap put a later row on an earlier page (free
// space left by a delete and VACUUM), so that ctid order is not insertion
// order.
func TestReplayOrderWithinTransaction(t *testing.T) {
	f := newReplayFixture(t, "replay_order")
	// Rows as large as their payload: no compression, no TOAST.
	f.PG.Exec("ALTER TABLE " + f.table + " ALTER COLUMN payload SET STORAGE PLAIN")
	var filler [][4]string
	for range 30 {
		filler = append(filler, [4]string{"filler", "e", `jsonb_build_object('pad', repeat('f', 1000))`, `'{}'`})
	}
	f.txn(t, filler...)
	// Free space on the first page, and only there.
	f.PG.Exec("DELETE FROM " + f.table + " WHERE ctid IN ('(0,1)', '(0,2)')")
	f.PG.Exec("VACUUM " + f.table)
	since := f.now(t)
	// The first row fills a new page; the next ones do not fit beside it
	// and go to the first page's free space.
	ids := f.txn(t,
		[4]string{"a", "first", `jsonb_build_object('pad', repeat('a', 7600))`, `'{}'`},
		[4]string{"a", "second", `jsonb_build_object('pad', repeat('b', 1000))`, `'{}'`},
		[4]string{"a", "third", `jsonb_build_object('pad', repeat('c', 1000))`, `'{}'`},
		[4]string{"a", "fourth", `'{"n": 4}'`, `'{}'`})
	var byCtid []string
	rows, err := f.PG.Conn.Query(context.Background(), "SELECT id::text FROM "+f.table+" WHERE created_at >= $1 ORDER BY ctid", since)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		byCtid = append(byCtid, id)
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if slices.Equal(byCtid, ids) {
		t.Fatalf("setup: the heap kept the transaction's rows in insertion order (%v); the test needs them out of it", byCtid)
	}
	relaytest.ConsumeAll(t, f.Cluster.ListenAddrs(), f.topic(), len(filler)+len(ids))
	res, err := replay(context.Background(), f.opts, ReplayOptions{ID: "order", Selection: ReplaySelection{Since: since}})
	if err != nil || !res.Complete || res.Acked != int64(len(ids)) {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	_, replayed := split(relaytest.ConsumeAll(t, f.Cluster.ListenAddrs(), f.topic(), len(filler)+2*len(ids)))
	var got []string
	for _, r := range replayed {
		got = append(got, relaytest.HeaderValue(r, sink.HeaderID))
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("replayed aggregate a in the order %v, want the insertion order %v (ctid order %v)", got, ids, byCtid)
	}
}

// TestReplayDryRunDecidesAsTheReplay: a dry run makes each row's decision
// as the replay does (the table's filter, an empty aggregate id or a topic
// that cannot be rendered dead-lettered), so that what it counts is what
// the replay then sends, where.
func TestReplayDryRunDecidesAsTheReplay(t *testing.T) {
	f := newReplayFixture(t, "replay_dryfilter", func(o *relay.Options) {
		o.Decoder.Tables[0].Filter = decoder.Filter{ExcludeEventTypes: []string{"internal.*"}}
	})
	since := f.now(t)
	f.txn(t, [4]string{"a", "created", `'{}'`, `'{}'`}, [4]string{"a", "internal.audit", `'{}'`, `'{}'`},
		[4]string{"a", "updated", `'{}'`, `'{}'`}, [4]string{"", "created", `'{}'`, `'{}'`})
	f.PG.Exec("INSERT INTO " + f.table + " (aggregate_type, aggregate_id, event_type, payload) VALUES ('inv@lid', 'c', 'e', '{}')")
	opts := f.opts
	opts.Sink.Topic = "dry.{aggregate_type}"
	dry, err := replay(context.Background(), opts, ReplayOptions{DryRun: true, Selection: ReplaySelection{Since: since}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := replay(context.Background(), opts, ReplayOptions{Selection: ReplaySelection{Since: since}})
	if err != nil || !res.Complete {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	if res.Acked != 4 || res.DeadLettered != 2 || res.Filtered != 1 {
		t.Fatalf("replay: %d sent, %d of them dead-lettered, %d filtered; want 4, 2, 1", res.Acked, res.DeadLettered, res.Filtered)
	}
	if len(dry.Tables) != 1 {
		t.Fatalf("dry run: %+v", dry.Tables)
	}
	var wouldSend int64
	for _, n := range dry.Tables[0].Topics {
		wouldSend += n
	}
	if wouldSend != res.Acked || dry.Tables[0].Topics[sink.DefaultDLQTopic] != res.DeadLettered || dry.Filtered != res.Filtered ||
		dry.Tables[0].Topics["dry.order"] != res.Acked-res.DeadLettered {
		t.Fatalf("dry run: would send %d rows (%v), %d filtered; the replay sent %d, %d of them dead-lettered, %d filtered",
			wouldSend, dry.Tables[0].Topics, dry.Filtered, res.Acked, res.DeadLettered, res.Filtered)
	}
}

// TestReplayExactlyOnceCommitsWhileWaiting: an exactly-once replay commits
// its Kafka transaction on time while it waits for the next row (a slow
// --rate here; a long scan between sparse matches alike), well before the
// transaction timeout, after which the broker would abort it: every row is
// acknowledged, and a read_committed consumer sees them all.
func TestReplayExactlyOnceCommitsWhileWaiting(t *testing.T) {
	f := newReplayFixture(t, "replay_eos_wait")
	const txnTimeout = time.Second
	replaySinkHook = func(cfg sink.Config, opts ...sink.Option) (replayProducer, error) {
		return sink.New(cfg, append(opts, sink.WithClientOpts(kgo.TransactionTimeout(txnTimeout)))...)
	}
	t.Cleanup(func() { replaySinkHook = nil })
	since := f.now(t)
	var ids []string
	for i := range 3 {
		ids = append(ids, f.txn(t, [4]string{fmt.Sprintf("a-%d", i), "e", `'{}'`, `'{}'`})...)
	}
	relaytest.ConsumeAll(t, f.Cluster.ListenAddrs(), f.topic(), len(ids))
	opts := f.opts
	// A commit interval past the transaction timeout: the replay commits at
	// half the timeout all the same.
	opts.ExactlyOnce = &relay.ExactlyOnce{TransactionalID: "walrelay-" + f.Name, CheckpointTopic: "cp", CommitInterval: time.Minute, MaxRecords: 100}
	// A row every 2 s: twice the transaction timeout.
	res, err := replay(context.Background(), opts, ReplayOptions{Selection: ReplaySelection{Since: since}, Rate: 0.5})
	if err != nil || !res.Complete || res.Acked != int64(len(ids)) {
		t.Fatalf("replay at a row every 2 s with a %v transaction timeout: %+v, %v", txnTimeout, res, err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.Cluster.ListenAddrs()...), kgo.ConsumeTopics(f.topic()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	replayed := map[string]bool{}
	for len(replayed) < len(ids) && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			if relaytest.HeaderValue(r, sink.HeaderReplay) != "" {
				replayed[relaytest.HeaderValue(r, sink.HeaderID)] = true
			}
		})
	}
	if len(replayed) != len(ids) {
		t.Fatalf("a read_committed consumer saw %d replayed records, want %d", len(replayed), len(ids))
	}
}
