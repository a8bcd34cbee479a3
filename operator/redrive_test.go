package operator

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walrelay/walrelay/relay"
	"github.com/walrelay/walrelay/sink"
	"github.com/walrelay/walrelay/test/relaytest"
)

// refuseTopics makes cluster refuse to create topics with suffix (policy
// violation: the relay dead-letters their events as topic_refused) until
// the returned function is called.
func refuseTopics(cluster *kfake.Cluster, suffix string) (allow func()) {
	var mu sync.Mutex
	refusing := true
	cluster.ControlKey(int16(kmsg.CreateTopics), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		mu.Lock()
		defer mu.Unlock()
		req := kreq.(*kmsg.CreateTopicsRequest)
		if !refusing || len(req.Topics) != 1 || !strings.HasSuffix(req.Topics[0].Topic, suffix) {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic, rt.ErrorCode = req.Topics[0].Topic, kerr.PolicyViolation.Code
		resp.Topics = append(resp.Topics, rt)
		return resp, nil, true
	})
	return func() { mu.Lock(); refusing = false; mu.Unlock() }
}

// TestRedrive: dead-lettered events go to their topics once the cause is
// gone, from their rows when the rows are there (a fixed row included),
// else from the stored records; those that still fail are dead-lettered
// again with an attempt count; a second redrive sends nothing again; a
// selection leaves the rest for later.
func TestRedrive(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	allow := refuseTopics(cluster, ".refused")
	f := newReplayFixtureOn(t, "redrive", cluster, relaytest.CreateOutbox, func(o *relay.Options) { o.Sink.Topic = "redrive.{event_type}" })
	ctx := context.Background()
	f.txn(t, [4]string{"a", "ok", `'{}'`, `'{}'`})
	refusedKept := f.txn(t, [4]string{"a", "refused", `'{"kept": true}'`, `'{"traceparent": "t1"}'`}, [4]string{"b", "refused", `'{"n": 2}'`, `'{}'`})
	refusedGone := f.txn(t, [4]string{"c", "refused", `'{"gone": true}'`, `'{"traceparent": "t2"}'`})
	emptyFixed := f.txn(t, [4]string{"", "ok", `'{"fixed": true}'`, `'{}'`})
	emptyGone := f.txn(t, [4]string{"", "ok", `'{"fixed": false}'`, `'{}'`})
	dlq := relaytest.ConsumeAll(t, cluster.ListenAddrs(), sink.DefaultDLQTopic, 5)
	relaytest.ConsumeAll(t, cluster.ListenAddrs(), "redrive.ok", 1)
	byID := map[string]*kgo.Record{}
	for _, r := range dlq {
		byID[relaytest.HeaderValue(r, sink.HeaderID)] = r
	}

	// The causes: the topic policy is lifted, one empty key fixed in its
	// row; two rows are gone.
	allow()
	f.PG.Exec("UPDATE "+f.table+" SET aggregate_id = 'fixed' WHERE id = $1", emptyFixed[0])
	f.PG.Exec("DELETE FROM "+f.table+" WHERE id = ANY($1::uuid[])", []string{refusedGone[0], emptyGone[0]})

	// A dry run lists, sends and commits nothing.
	var listed []RedriveItem
	dry, err := redrive(ctx, f.opts, RedriveOptions{DryRun: true, OnRecord: func(it RedriveItem) { listed = append(listed, it) }})
	if err != nil || dry.Selected != 5 || dry.Sent != 0 || len(listed) != 5 {
		t.Fatalf("dry run %+v (%v), listed %d: want 5 selected, nothing sent", dry, err, len(listed))
	}
	for _, it := range listed {
		if it.ID == emptyGone[0] && it.Outcome != RedriveDeadLettered || it.ID == refusedGone[0] && (it.Outcome != RedriveWouldSend || it.FromRow) {
			t.Errorf("dry run item %+v", it)
		}
	}

	// Only topic_refused first: the empty keys are left for later.
	res, err := redrive(ctx, f.opts, RedriveOptions{Reasons: []string{string(sink.ReasonTopicRefused)}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Selected != 3 || res.Sent != 3 || res.FromRow != 2 || res.Left != 2 || res.DeadLettered != 0 {
		t.Fatalf("redrive of topic_refused: %+v, want 3 sent (2 from rows), 2 left", res)
	}
	got := relaytest.ConsumeAll(t, cluster.ListenAddrs(), "redrive.refused", 3)
	for _, r := range got {
		id := relaytest.HeaderValue(r, sink.HeaderID)
		d := byID[id]
		if d == nil || string(r.Value) != string(d.Value) || string(r.Key) != string(d.Key) || relaytest.HeaderValue(r, sink.HeaderLSN) != relaytest.HeaderValue(d, sink.HeaderLSN) ||
			relaytest.HeaderValue(r, sink.HeaderXID) != relaytest.HeaderValue(d, sink.HeaderXID) || relaytest.HeaderValue(r, sink.HeaderDLQReason) != "" || !r.Timestamp.Equal(d.Timestamp) {
			t.Errorf("redriven %s: key %q value %q headers %v; dead letter key %q value %q headers %v", id, r.Key, r.Value, r.Headers, d.Key, d.Value, d.Headers)
		}
		if id == refusedKept[0] && relaytest.HeaderValue(r, "traceparent") != "t1" || id == refusedGone[0] && relaytest.HeaderValue(r, "traceparent") != "t2" {
			t.Errorf("redriven %s lost its traceparent header: %v", id, r.Headers)
		}
	}

	// The rest: the fixed row goes out, the gone one is dead-lettered again.
	res, err = redrive(ctx, f.opts, RedriveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Selected != 2 || res.Sent != 1 || res.FromRow != 1 || res.DeadLettered != 1 || res.Left != 0 {
		t.Fatalf("second redrive: %+v, want 1 sent from its row and 1 dead-lettered again", res)
	}
	fixed := relaytest.ConsumeAll(t, cluster.ListenAddrs(), "redrive.ok", 2)
	if k := fixed[1].Key; string(k) != "fixed" || relaytest.HeaderValue(fixed[1], sink.HeaderID) != emptyFixed[0] {
		t.Errorf("redrive.ok holds %s with key %q, want the fixed row %s", relaytest.HeaderValue(fixed[1], sink.HeaderID), k, emptyFixed[0])
	}
	var again *kgo.Record
	for _, r := range relaytest.ConsumeAll(t, cluster.ListenAddrs(), sink.DefaultDLQTopic, 6) {
		if relaytest.HeaderValue(r, sink.HeaderDLQAttempts) != "" {
			again = r
		}
	}
	if again == nil {
		t.Fatal("no record dead-lettered again")
	}
	if relaytest.HeaderValue(again, sink.HeaderID) != emptyGone[0] || relaytest.HeaderValue(again, sink.HeaderDLQAttempts) != "1" ||
		relaytest.HeaderValue(again, sink.HeaderDLQReason) != string(sink.ReasonEmptyAggregateID) {
		t.Errorf("dead-lettered again: %s attempts %q reason %q", relaytest.HeaderValue(again, sink.HeaderID), relaytest.HeaderValue(again, sink.HeaderDLQAttempts),
			relaytest.HeaderValue(again, sink.HeaderDLQReason))
	}

	// Nothing is sent twice; the one still failing is tried once more.
	res, err = redrive(ctx, f.opts, RedriveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != 0 || res.Selected != 1 || res.DeadLettered != 1 {
		t.Fatalf("third redrive: %+v, want nothing sent and the dead letter tried again", res)
	}
	if n := len(relaytest.ConsumeAll(t, cluster.ListenAddrs(), "redrive.refused", 3)); n != 3 {
		t.Errorf("redrive.refused holds %d records after three redrives, want 3", n)
	}
}

func TestProgressMetadata(t *testing.T) {
	for _, p := range []partProgress{{committed: 7, end: 7}, {committed: 10, end: 300, left: []int64{10, 11, 250}}, {committed: 0, end: 5, left: []int64{0}}} {
		got := parseProgress(p.committed, p.String())
		if got.committed != p.committed || got.end != p.end || len(got.left) != len(p.left) {
			t.Errorf("round trip of %+v: %+v (%s)", p, got, p.String())
		}
		for i := range p.left {
			if got.left[i] != p.left[i] {
				t.Errorf("round trip of %+v: %+v", p, got)
			}
		}
	}
	if p := parseProgress(42, "something else"); p.end != 42 || len(p.left) != 0 {
		t.Errorf("foreign metadata: %+v, want nothing known above 42", p)
	}
	big := partProgress{committed: 1 << 40, end: 1<<40 + 10_000_000}
	for i := range maxLeft {
		big.left = append(big.left, big.committed+int64(i)*19_997)
	}
	if n := len(big.String()); n > 3500 {
		t.Errorf("metadata of %d left offsets is %d bytes; Kafka's default limit is 4096", maxLeft, n)
	}
}

// TestRedriveWaitsForTheGroupCoordinator: a group coordinator that is not
// available yet (a fresh cluster creating __consumer_offsets, a moved
// coordinator) is waited for, as the relay waits for Kafka, not a failure.
func TestRedriveWaitsForTheGroupCoordinator(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	allow := refuseTopics(cluster, ".refused")
	f := newReplayFixtureOn(t, "redrive_coord", cluster, relaytest.CreateOutbox, func(o *relay.Options) { o.Sink.Topic = "redrive_coord.{event_type}" })
	f.txn(t, [4]string{"a", "refused", `'{}'`, `'{}'`})
	relaytest.ConsumeAll(t, cluster.ListenAddrs(), sink.DefaultDLQTopic, 1)
	allow()
	var mu sync.Mutex
	unavailable := 0
	for _, key := range []kmsg.Key{kmsg.OffsetFetch, kmsg.OffsetCommit} {
		cluster.ControlKey(int16(key), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
			cluster.KeepControl()
			mu.Lock()
			defer mu.Unlock()
			if unavailable >= 4 {
				return nil, nil, false
			}
			unavailable++
			code := kerr.CoordinatorNotAvailable.Code
			switch req := kreq.(type) {
			case *kmsg.OffsetFetchRequest:
				resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
				resp.Version, resp.ErrorCode = req.Version, code
				for _, g := range req.Groups {
					rg := kmsg.NewOffsetFetchResponseGroup()
					rg.Group, rg.ErrorCode = g.Group, code
					resp.Groups = append(resp.Groups, rg)
				}
				return resp, nil, true
			case *kmsg.OffsetCommitRequest:
				resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
				resp.Version = req.Version
				for _, rt := range req.Topics {
					t := kmsg.NewOffsetCommitResponseTopic()
					t.Topic = rt.Topic
					for _, p := range rt.Partitions {
						tp := kmsg.NewOffsetCommitResponseTopicPartition()
						tp.Partition, tp.ErrorCode = p.Partition, code
						t.Partitions = append(t.Partitions, tp)
					}
					resp.Topics = append(resp.Topics, t)
				}
				return resp, nil, true
			}
			return nil, nil, false
		})
	}
	res, err := redrive(context.Background(), f.opts, RedriveOptions{})
	if err != nil || res.Sent != 1 {
		t.Fatalf("redrive while the coordinator is not available: %+v, %v; want it to wait and send the dead letter", res, err)
	}
	if unavailable < 4 {
		t.Fatalf("the coordinator answered 'not available' %d times, want 4: the test did not exercise the wait", unavailable)
	}
	if res, err := redrive(context.Background(), f.opts, RedriveOptions{}); err != nil || res.Sent != 0 {
		t.Fatalf("second redrive: %+v, %v; want nothing sent (the progress was committed)", res, err)
	}
}

// TestRedriveDryRunPredictsTheRedrive: for dead letters of several
// reasons, from their rows and from stored records, with the cause gone
// and still there, what a dry run lists is what the redrive then does.
func TestRedriveDryRunPredictsTheRedrive(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	refuseTopics(cluster, ".refused")
	allow := refuseTopics(cluster, ".lifted")
	f := newReplayFixtureOn(t, "redrive_dry", cluster, relaytest.CreateOutbox, func(o *relay.Options) { o.Sink.Topic = "redrive_dry.{event_type}" })
	ctx := context.Background()
	emptyStill := f.txn(t, [4]string{"", "ok", `'{}'`, `'{}'`})[0]
	emptyFixed := f.txn(t, [4]string{"", "ok", `'{}'`, `'{}'`})[0]
	refusedStill := f.txn(t, [4]string{"a", "refused", `'{}'`, `'{}'`})[0]
	lifted := f.txn(t, [4]string{"b", "lifted", `'{}'`, `'{}'`})[0]
	liftedGone := f.txn(t, [4]string{"c", "lifted", `'{}'`, `'{}'`})[0]
	emptyGone := f.txn(t, [4]string{"", "ok", `'{}'`, `'{}'`})[0]
	refusedGone := f.txn(t, [4]string{"d", "refused", `'{}'`, `'{}'`})[0]
	relaytest.ConsumeAll(t, cluster.ListenAddrs(), sink.DefaultDLQTopic, 7)
	allow()
	f.PG.Exec("UPDATE "+f.table+" SET aggregate_id = 'fixed' WHERE id = $1", emptyFixed)
	f.PG.Exec("DELETE FROM "+f.table+" WHERE id = ANY($1::uuid[])", []string{liftedGone, emptyGone, refusedGone})

	type outcome struct {
		Outcome RedriveOutcome
		Target  string
		FromRow bool
	}
	dlq := sink.DefaultDLQTopic
	want := map[string]outcome{
		emptyStill:   {RedriveDeadLettered, dlq, true},
		emptyFixed:   {RedriveSent, "redrive_dry.ok", true},
		refusedStill: {RedriveDeadLettered, dlq, true},
		lifted:       {RedriveSent, "redrive_dry.lifted", true},
		liftedGone:   {RedriveSent, "redrive_dry.lifted", false},
		emptyGone:    {RedriveDeadLettered, dlq, false},
		refusedGone:  {RedriveDeadLettered, dlq, false},
	}
	run := func(dryRun bool) map[string]outcome {
		got := map[string]outcome{}
		_, err := redrive(ctx, f.opts, RedriveOptions{DryRun: dryRun, OnRecord: func(it RedriveItem) {
			o := outcome{it.Outcome, it.Target, it.FromRow}
			if o.Outcome == RedriveWouldSend {
				o.Outcome = RedriveSent
			}
			got[it.ID] = o
		}})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	dry := run(true)
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	topics, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if topics.Has("redrive_dry.lifted") {
		t.Errorf("the dry run created redrive_dry.lifted")
	}
	real := run(false)
	for id, w := range want {
		if dry[id] != real[id] {
			t.Errorf("%s: the dry run said %+v, the redrive did %+v", id, dry[id], real[id])
		}
		if real[id] != w {
			t.Errorf("%s: the redrive did %+v, want %+v", id, real[id], w)
		}
	}
}

// TestRedriveKeepsTheCommitTime: an event made again from its row keeps its
// transaction's commit time to the microsecond (the dead letter's Kafka
// timestamp has milliseconds only): its ce_time is that of a record of the
// same transaction that went to its topic at once.
func TestRedriveKeepsTheCommitTime(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	allow := refuseTopics(cluster, ".refused")
	f := newReplayFixtureOn(t, "redrive_time", cluster, relaytest.CreateOutbox, func(o *relay.Options) {
		o.Sink.Topic, o.Sink.CloudEvents = "redrive_time.{event_type}", true
	})
	ids := f.txn(t, [4]string{"a", "ok", `'{}'`, `'{}'`}, [4]string{"b", "refused", `'{}'`, `'{}'`})
	live := relaytest.ConsumeAll(t, cluster.ListenAddrs(), "redrive_time.ok", 1)[0]
	relaytest.ConsumeAll(t, cluster.ListenAddrs(), sink.DefaultDLQTopic, 1)
	allow()
	res, err := redrive(context.Background(), f.opts, RedriveOptions{})
	if err != nil || res.Sent != 1 || res.FromRow != 1 {
		t.Fatalf("redrive: %+v, %v; want the dead letter sent from its row", res, err)
	}
	redriven := relaytest.ConsumeAll(t, cluster.ListenAddrs(), "redrive_time.refused", 1)[0]
	lt, rt := relaytest.HeaderValue(live, sink.HeaderCETime), relaytest.HeaderValue(redriven, sink.HeaderCETime)
	if relaytest.HeaderValue(redriven, sink.HeaderID) != ids[1] || lt == "" || rt != lt {
		t.Fatalf("redriven %s has ce_time %q; the live record of its transaction %q", relaytest.HeaderValue(redriven, sink.HeaderID), rt, lt)
	}
	t.Logf("ce_time %s", lt)
}
