package sink_test

import (
	"context"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/walrelay/walrelay/sink"
)

// txnSink is a transactional sink on a fresh kfake cluster's brokers.
func txnSink(t *testing.T, brokers []string, id string) *sink.Sink {
	t.Helper()
	return newSink(t, sink.Config{Brokers: brokers}, fastRetries, sink.WithTransactionalID(id))
}

func sendCheckpoint(t *testing.T, ctx context.Context, s *sink.Sink, topic, key string, lsn pglogrepl.LSN, commit bool) error {
	t.Helper()
	if err := s.BeginTxn(); err != nil {
		t.Fatalf("begin: %v", err)
	}
	errc := make(chan error, 1)
	s.Send(ctx, sink.CheckpointRecord(topic, key, sink.Checkpoint{LSN: lsn, Timeline: 1}), func(err error) { errc <- err })
	if err := s.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	if err := <-errc; err != nil {
		return err
	}
	return s.EndTxn(ctx, commit)
}

// The checkpoint read is read_committed: an aborted checkpoint is invisible,
// the last committed one of the key is returned, other keys are ignored; a
// second producer with the same transactional id fences the first.
func TestCheckpointRoundTrip(t *testing.T) {
	c := newCluster(t)
	ctx := testCtx(t)
	brokers := c.ListenAddrs()
	const topic = "walrelay.checkpoints"
	s := txnSink(t, brokers, "walrelay-s")
	if err := s.InitProducer(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureCheckpointTopic(ctx, topic, -1); err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureCheckpointTopic(ctx, topic, -1); err != nil {
		t.Fatalf("second ensure (topic exists): %v", err)
	}
	if _, ok, err := s.ReadCheckpoint(ctx, topic, "1/s"); err != nil || ok {
		t.Fatalf("empty topic: ok=%v err=%v, want none", ok, err)
	}
	for _, step := range []struct {
		key    string
		lsn    pglogrepl.LSN
		commit bool
	}{{"1/s", 0x100, true}, {"1/s", 0x200, true}, {"1/other", 0x900, true}, {"1/s", 0x300, false}} {
		if err := sendCheckpoint(t, ctx, s, topic, step.key, step.lsn, step.commit); err != nil {
			t.Fatalf("checkpoint %v: %v", step, err)
		}
	}
	lsn, ok, err := readCheckpoint(ctx, s, topic, "1/s")
	if err != nil || !ok || lsn != 0x200 {
		t.Fatalf("ReadCheckpoint = %s, %v, %v; want 0/200 (0/300 was aborted)", lsn, ok, err)
	}

	// A second instance with the same id fences the first.
	s2 := txnSink(t, brokers, "walrelay-s")
	if err := s2.InitProducer(ctx); err != nil {
		t.Fatal(err)
	}
	err = sendCheckpoint(t, ctx, s, topic, "1/s", 0x400, true)
	if err == nil || !sink.IsFenced(err) {
		t.Fatalf("zombie commit: %v, want a fenced error", err)
	}
	if lsn, _, _ := readCheckpoint(ctx, s2, topic, "1/s"); lsn != 0x200 {
		t.Fatalf("after the fenced commit: checkpoint %s, want 0/200", lsn)
	}

	// The fenced sink recovers only with a new client, which fences s2.
	if err := s.ResetProducer(); err != nil {
		t.Fatal(err)
	}
	if err := s.InitProducer(ctx); err != nil {
		t.Fatalf("init after reset: %v", err)
	}
	if err := sendCheckpoint(t, ctx, s, topic, "1/s", 0x500, true); err != nil {
		t.Fatalf("commit after reset: %v", err)
	}
	if err := sendCheckpoint(t, ctx, s2, topic, "1/s", 0x600, true); !sink.IsFenced(err) {
		t.Fatalf("s2 after s's reset: %v, want fenced", err)
	}
	if lsn, _, _ := readCheckpoint(ctx, s, topic, "1/s"); lsn != 0x500 {
		t.Fatalf("after reset: checkpoint %s, want 0/500", lsn)
	}
}
