package operator

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walrelay/walrelay/internal/testwait"
	"github.com/walrelay/walrelay/sink"
	"github.com/walrelay/walrelay/test/relaytest"
)

// The redrive's progress against the real Kafka of WALRELAY_TEST_KAFKA
// (kfake without it): dead letters written straight to a dead-letter topic
// of one partition, in and out of transactions, of no configured table (so
// each goes back as the stored record, to the topic its walrelay.dlq.topic
// names).

// dlqFixture is a dead-letter topic of one partition and the topic its
// dead letters were meant for.
type dlqFixture struct {
	brokers     []string
	dlq, target string
	plain       *kgo.Client
	opts        RedriveOptions
}

func newDLQFixture(t *testing.T, name string) *dlqFixture {
	t.Helper()
	brokers := strings.Split(os.Getenv("WALRELAY_TEST_KAFKA"), ",")
	if brokers[0] == "" {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cluster.Close)
		brokers = cluster.ListenAddrs()
	}
	name = fmt.Sprintf("%s_%d", name, time.Now().UnixNano())
	f := &dlqFixture{brokers: brokers, dlq: name + ".dlq", target: name + ".target"}
	plain, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(f.dlq), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(plain.Close)
	f.plain = plain
	ctx := context.Background()
	if _, err := kadm.NewClient(plain).CreateTopic(ctx, 1, -1, nil, f.dlq); err != nil {
		t.Fatal(err)
	}
	_, sc, dc := relaytest.Configs("", brokers, name) // dead letters of no configured table: Postgres is not asked
	sc.DLQTopic = f.dlq
	f.opts = RedriveOptions{Sink: sc, Decoder: dc, KafkaTimeout: 15 * time.Second, Logger: slog.New(slog.DiscardHandler), Group: name}
	return f
}

// deadLetter is a dead letter of reason, meant for the fixture's target.
func (f *dlqFixture) deadLetter(id, reason string) *kgo.Record {
	return &kgo.Record{Topic: f.dlq, Key: []byte("agg-" + id), Value: []byte(`{"id": "` + id + `"}`), Headers: []kgo.RecordHeader{
		{Key: sink.HeaderID, Value: []byte(id)}, {Key: sink.HeaderDLQReason, Value: []byte(reason)},
		{Key: sink.HeaderDLQTopic, Value: []byte(f.target)}, {Key: sink.HeaderDLQError, Value: []byte("refused")}}}
}

// produce writes recs to the dead-letter topic with cl, in order, each
// acknowledged before the next.
func produce(t *testing.T, cl *kgo.Client, recs ...*kgo.Record) {
	t.Helper()
	for _, r := range recs {
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// transactional returns a client with a transaction begun on the
// dead-letter topic.
func (f *dlqFixture) transactional(t *testing.T, id string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.brokers...), kgo.TransactionalID(f.dlq+"-"+id), kgo.DefaultProduceTopic(f.dlq),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	return cl
}

// settled waits until a read_committed reader of the dead-letter topic
// sees every id of ids committed: EndTransaction returns before the
// transaction's commit markers are written (slowly on a loaded machine),
// and a redrive reads a transaction without its marker as still open.
func (f *dlqFixture) settled(t *testing.T, ids ...string) {
	t.Helper()
	testwait.Eventually(t, 30*time.Second, "the commit markers of "+strings.Join(ids, ","), func() bool {
		got := f.ids(t, f.dlq)
		for _, id := range ids {
			if !slices.Contains(got, id) {
				return false
			}
		}
		return true
	})
}

func endTxn(t *testing.T, cl *kgo.Client, commit kgo.TransactionEndTry) {
	t.Helper()
	if err := cl.EndTransaction(context.Background(), commit); err != nil {
		t.Fatal(err)
	}
}

// ids returns the ids of the records of topic that a read_committed
// consumer sees, sorted (the topic may have several partitions).
func (f *dlqFixture) ids(t *testing.T, topic string) []string {
	t.Helper()
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.brokers...), kgo.KeepControlRecords(), kgo.FetchIsolationLevel(kgo.ReadUncommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	ranges := map[string]map[int32]sink.OffsetRange{topic: {}}
	ends.Each(func(o kadm.ListedOffset) { ranges[topic][o.Partition] = sink.OffsetRange{From: 0, To: o.Offset} })
	var ids []string
	err = sink.ReadRanges(ctx, cl, ranges, func(r *kgo.Record, st sink.RecordState) error {
		if st == sink.RecordCommitted {
			ids = append(ids, relaytest.HeaderValue(r, sink.HeaderID))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	return ids
}

// TestRedriveNeverMarksDoneWhatItDidNotSend: a selected dead letter of a
// transaction that spans the point where a partition's progress is cut
// (more records left behind than the progress remembers) is sent before
// the progress counts it; one of a transaction still open is neither sent
// nor counted, and goes once the transaction commits.
func TestRedriveNeverMarksDoneWhatItDidNotSend(t *testing.T) {
	ctx := context.Background()
	const selected, other = string(sink.ReasonTopicRefused), string(sink.ReasonTooLarge)
	t.Run("committed transaction across the cut", func(t *testing.T) {
		f := newDLQFixture(t, "redrive_txn_cut")
		f.opts.maxLeft = 2
		produce(t, f.plain, f.deadLetter("l1", other), f.deadLetter("l2", other))
		txn := f.transactional(t, "a")
		produce(t, txn, f.deadLetter("s1", selected))
		produce(t, f.plain, f.deadLetter("l3", other))
		endTxn(t, txn, kgo.TryCommit)
		f.settled(t, "s1")
		ro := f.opts
		ro.Reasons = []string{selected}
		// A dry run first: it lists s1 for its topic and creates nothing.
		dry, listed := ro, []RedriveItem{}
		dry.DryRun, dry.OnRecord = true, func(it RedriveItem) { listed = append(listed, it) }
		if _, err := Redrive(ctx, dry); err != nil {
			t.Fatal(err)
		}
		if len(listed) != 1 || listed[0].ID != "s1" || listed[0].Outcome != RedriveWouldSend || listed[0].Target != f.target {
			t.Fatalf("dry run listed %+v, want s1 for %s", listed, f.target)
		}
		if topics, err := kadm.NewClient(f.plain).ListTopics(ctx); err != nil || topics.Has(f.target) {
			t.Fatalf("after the dry run %s exists (%v), want it not created", f.target, err)
		}
		res, err := Redrive(ctx, ro)
		if err != nil {
			t.Fatal(err)
		}
		first := f.ids(t, f.target)
		for range 2 {
			if _, err := Redrive(ctx, ro); err != nil {
				t.Fatal(err)
			}
		}
		if got := f.ids(t, f.target); strings.Join(got, ",") != "s1" {
			t.Fatalf("after three redrives %s holds %v, want s1 once (the first redrive: %+v)", f.target, got, res)
		}
		if res.Sent != 1 || len(first) != 1 {
			t.Fatalf("first redrive: %+v, %s held %v; want s1 sent", res, f.target, first)
		}
	})
	t.Run("open transaction", func(t *testing.T) {
		f := newDLQFixture(t, "redrive_txn_open")
		f.opts.maxLeft = 2
		open := f.transactional(t, "b")
		produce(t, open, f.deadLetter("o1", other), f.deadLetter("o2", other))
		txn := f.transactional(t, "a")
		produce(t, txn, f.deadLetter("s1", selected))
		produce(t, open, f.deadLetter("s2", selected), f.deadLetter("o3", other))
		endTxn(t, txn, kgo.TryCommit)
		f.settled(t, "s1")
		produce(t, f.plain, f.deadLetter("s3", selected))
		ro := f.opts
		ro.Reasons = []string{selected}
		res, err := Redrive(ctx, ro)
		if err != nil {
			t.Fatal(err)
		}
		if got := f.ids(t, f.target); res.Sent != 1 || strings.Join(got, ",") != "s1" {
			t.Fatalf("redrive with a transaction open: %+v, %s holds %v; want s1 sent (s2 open, s3 past the cut)", res, f.target, got)
		}
		endTxn(t, open, kgo.TryCommit)
		f.settled(t, "s2")
		for range 3 {
			if _, err := Redrive(ctx, ro); err != nil {
				t.Fatal(err)
			}
		}
		if got := f.ids(t, f.target); strings.Join(got, ",") != "s1,s2,s3" {
			t.Fatalf("after the transaction committed, %s holds %v; want s1,s2,s3", f.target, got)
		}
	})
}

// TestRedriveReachesEverySelectedRecord: more records left behind than the
// progress remembers (the default limit, 500) before a selected one: the
// redrive copies the oldest of them to the end of the partition and sends
// the selected one; the copies stay for a later redrive, which sends each
// once.
func TestRedriveReachesEverySelectedRecord(t *testing.T) {
	ctx := context.Background()
	f := newDLQFixture(t, "redrive_many_left")
	const selected, other = string(sink.ReasonTopicRefused), string(sink.ReasonTooLarge)
	n := maxLeft + 100
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, f.deadLetter(fmt.Sprintf("l%03d", i), other))
	}
	recs = append(recs, f.deadLetter("s1", selected))
	if err := f.plain.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	ro := f.opts
	ro.Reasons = []string{selected}
	for run := range 2 {
		res, err := Redrive(ctx, ro)
		if err != nil {
			t.Fatal(err)
		}
		if got := f.ids(t, f.target); len(got) != 1 || got[0] != "s1" {
			t.Fatalf("redrive %d: %+v, %s holds %v; want s1 sent once", run+1, res, f.target, got)
		}
		if res.Left > int64(maxLeft) {
			t.Errorf("redrive %d: %d left behind, more than the progress remembers", run+1, res.Left)
		}
	}
	// Everything else now: each left-behind dead letter goes once, the
	// originals and their copies counted once.
	res, err := Redrive(ctx, f.opts)
	if err != nil {
		t.Fatal(err)
	}
	got := f.ids(t, f.target)
	seen := map[string]int{}
	for _, id := range got {
		seen[id]++
	}
	if len(seen) != n+1 || res.Deferred != 0 || res.Left != 0 {
		t.Fatalf("redrive of the rest: %+v, %d distinct ids in %s; want all %d", res, len(seen), f.target, n+1)
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("%s sent %d times", id, c)
		}
	}
}
