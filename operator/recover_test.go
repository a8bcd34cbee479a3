package operator

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walrelay/walrelay/relay"
	"github.com/walrelay/walrelay/sink"
	"github.com/walrelay/walrelay/test/relaytest"
)

// TestLastDeliveredReadsBack: the newest event delivered is the newest
// committed record of the outbox topics; an aborted transaction's newer
// records and replays' records do not count, nor do topics of other
// templates.
func TestLastDeliveredReadsBack(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.SeedTopics(3, "lr.order", "lr.invoice", "other.order"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	base := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	rec := func(topic, id string, at time.Duration, hs ...kgo.RecordHeader) *kgo.Record {
		return &kgo.Record{Topic: topic, Key: []byte("k-" + id), Value: []byte("{}"), Timestamp: base.Add(at),
			Headers: append([]kgo.RecordHeader{{Key: sink.HeaderID, Value: []byte(id)}, {Key: sink.HeaderLSN, Value: []byte("0/" + id)}}, hs...)}
	}
	plain, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	// Many records in one partition so that the newest is outside the
	// first window only when the reader mishandles offsets.
	var recs []*kgo.Record
	for i := range 200 {
		r := rec("lr.order", fmt.Sprint(i), time.Duration(i)*time.Second)
		r.Partition = 0
		recs = append(recs, r)
	}
	recs = append(recs, rec("lr.invoice", "inv", 150*time.Second), rec("other.order", "other", time.Hour),
		rec("lr.invoice", "replayed", time.Hour, kgo.RecordHeader{Key: sink.HeaderReplay, Value: []byte("r")}))
	if err := plain.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	txn, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("lr-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	for _, commit := range []bool{false, true} {
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		id, at := "aborted", 2*time.Hour
		if commit {
			id, at = "committed", 250*time.Second
		}
		if err := txn.ProduceSync(ctx, rec("lr.invoice", id, at)).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := txn.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	opts := testOptions("postgres://unused", c.ListenAddrs(), "lr")
	last, err := LastDelivered(ctx, delivered(opts))
	if err != nil {
		t.Fatal(err)
	}
	if !last.Found || last.ID != "committed" || !last.Time.Equal(base.Add(250*time.Second)) || last.Topic != "lr.invoice" || last.LSN != "0/committed" {
		t.Errorf("last delivered %+v, want the committed transaction's record at +250s", last)
	}
	if last.Topics != 2 {
		t.Errorf("read %d topics, want lr.order and lr.invoice (no dead-letter topic yet)", last.Topics)
	}
	// Without the transaction's record, the newest is the 200th of lr.order.
	opts.Sink.Topic = "lr.order"
	if last, err = LastDelivered(ctx, delivered(opts)); err != nil || last.ID != "199" {
		t.Errorf("last delivered on lr.order: %+v, %v; want event 199", last, err)
	}
}

// TestPlanRecovery: a recovery refuses while the slot is valid; once it is
// gone, it starts a margin before the last delivered event, and its new
// slot is in place before the replay reads, under a name of its own until
// the hand-over (a second plan meanwhile is the same and keeps that slot).
func TestPlanRecovery(t *testing.T) {
	f := newReplayFixture(t, "recover_plan")
	f.txn(t, [4]string{"a", "e", `'{}'`, `'{}'`})
	ids := f.txn(t, [4]string{"b", "e", `'{}'`, `'{}'`})
	relaytest.ConsumeAll(t, f.Cluster.ListenAddrs(), f.topic(), 2)
	ctx := context.Background()
	_, err := PlanRecovery(ctx, recovery(f.opts, time.Minute))
	var inUse *SlotInUseError
	if !errors.As(err, &inUse) {
		t.Fatalf("recovery with the slot in place: %v, want a SlotInUseError", err)
	}
	f.stopAndDropSlot(t)
	rec, err := PlanRecovery(ctx, recovery(f.opts, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if rec.Slot.Exists || !rec.Delivered.Found || rec.Delivered.ID != ids[0] || !rec.Since.Equal(rec.Delivered.Time.Add(-time.Minute)) {
		t.Fatalf("recovery plan %+v, want the last row %s delivered and a start a minute before it", rec, ids[0])
	}
	if reused, err := rec.CreateSlot(ctx, recovery(f.opts, time.Minute)); err != nil || reused {
		t.Fatalf("CreateSlot: reused %v, %v", reused, err)
	}
	// Until the hand-over, the new slot has a name of its own: the slot
	// itself stays missing, and a second plan is the same.
	if n := f.PG.Count("SELECT count(*) FROM pg_replication_slots WHERE slot_name IN ($1, $2)", f.Name, RecoveringSlot(f.Name)); n != 1 || !rec.Pending.Exists {
		t.Fatalf("%d slots named %s or %s after CreateSlot, want the latter only (%+v)", n, f.Name, RecoveringSlot(f.Name), rec.Pending)
	}
	again, err := PlanRecovery(ctx, recovery(f.opts, time.Minute))
	if err != nil || !again.Since.Equal(rec.Since) || !again.Pending.Exists {
		t.Fatalf("recovery planned again before the hand-over: %+v, %v; want the same start, the pending slot found", again, err)
	}
	if reused, err := again.CreateSlot(ctx, recovery(f.opts, time.Minute)); err != nil || !reused {
		t.Fatalf("CreateSlot again: reused %v, %v; want the pending slot kept", reused, err)
	}
	if err := again.HandOver(ctx, recovery(f.opts, time.Minute)); err != nil {
		t.Fatal(err)
	}
	if n := f.PG.Count("SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", f.Name); n != 1 || !again.Slot.Exists || again.Pending.Exists {
		t.Fatalf("%d slots named %s after HandOver, want 1 (%+v)", n, f.Name, again)
	}
	if n := f.PG.Count("SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", RecoveringSlot(f.Name)); n != 0 {
		t.Fatalf("the recovery's slot is left after HandOver")
	}
	if _, err := PlanRecovery(ctx, recovery(f.opts, time.Minute)); !errors.As(err, &inUse) {
		t.Fatalf("recovery after the new slot: %v, want a SlotInUseError", err)
	}
}

// TestLastDeliveredExactlyOnce: with exactly-once delivery the slot's
// checkpoint is read too, and covers the newest record.
func TestLastDeliveredExactlyOnce(t *testing.T) {
	f := newReplayFixture(t, "recover_eos", func(o *relay.Options) {
		o.ExactlyOnce = &relay.ExactlyOnce{TransactionalID: "walrelay-recover-eos", CheckpointTopic: "recover_eos.checkpoints",
			CommitInterval: 50 * time.Millisecond, MaxRecords: 100}
	})
	ids := f.txn(t, [4]string{"a", "e", `'{}'`, `'{}'`}, [4]string{"b", "e", `'{}'`, `'{}'`})
	relaytest.ConsumeAll(t, f.Cluster.ListenAddrs(), f.topic(), 2)
	last, err := LastDelivered(context.Background(), delivered(f.opts))
	if err != nil {
		t.Fatal(err)
	}
	if !last.Found || last.Checkpoint == nil || (last.ID != ids[0] && last.ID != ids[1]) {
		t.Fatalf("last delivered %+v, want one of %v and the checkpoint", last, ids)
	}
	at, err := pglogrepl.ParseLSN(last.LSN)
	if err != nil || at >= last.Checkpoint.LSN {
		t.Errorf("newest record at %s (%v), checkpoint %s: the checkpoint must cover it", last.LSN, err, last.Checkpoint)
	}
}
