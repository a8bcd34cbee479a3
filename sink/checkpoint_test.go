package sink_test

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walrelay/walrelay/sink"
)

// Another walrelay's open transaction on the shared checkpoint topic holds
// the last stable offset back; the checkpoint read must still return the last
// checkpoint this slot committed after it, not an older one.
func TestReadCheckpointPastAnotherProducersOpenTxn(t *testing.T) {
	c, ctx, s := checkpointSink(t)
	if err := sendCheckpoint(t, ctx, s, topic, "1/s", 0x100, true); err != nil {
		t.Fatal(err)
	}
	// Another slot's walrelay opens a transaction and does not end it.
	other, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("walrelay-other"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	if err := other.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := other.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("1/other"), Value: make([]byte, 8)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for _, lsn := range []uint64{0x200, 0x300} {
		if err := sendCheckpoint(t, ctx, s, topic, "1/s", pglogLSN(lsn), true); err != nil {
			t.Fatal(err)
		}
	}
	cp, ok, err := readCheckpoint(ctx, s, topic, "1/s")
	if err != nil || !ok || cp != 0x300 {
		t.Fatalf("ReadCheckpoint = %s, %v, %v; want 0/300 (committed after the other producer's open transaction)", cp, ok, err)
	}
}

// A fetch slower than any poll interval is no reason to say that there is
// no checkpoint: unread offsets never mean "not found".
func TestReadCheckpointSlowBroker(t *testing.T) {
	c, ctx, s := checkpointSink(t)
	if err := sendCheckpoint(t, ctx, s, topic, "1/s", 0x100, true); err != nil {
		t.Fatal(err)
	}
	// Every fetch is answered 3.5 s late.
	c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		time.Sleep(3500 * time.Millisecond)
		return nil, nil, false
	})
	cp, ok, err := readCheckpoint(ctx, s, topic, "1/s")
	if err != nil || !ok || cp != 0x100 {
		t.Fatalf("ReadCheckpoint with slow fetches = %s, %v, %v; want 0/100", cp, ok, err)
	}
}

const topic = sink.DefaultCheckpointTopic

// checkpointSink is the transactional sink of slot "1/s" on a fresh kfake
// cluster, its producer initialised and the checkpoint topic created.
func checkpointSink(t *testing.T) (*kfake.Cluster, context.Context, *sink.Sink) {
	t.Helper()
	c := newCluster(t)
	ctx := testCtx(t)
	s := txnSink(t, c.ListenAddrs(), "walrelay-s")
	if err := s.InitProducer(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureCheckpointTopic(ctx, topic, -1); err != nil {
		t.Fatal(err)
	}
	return c, ctx, s
}

func pglogLSN(v uint64) pglogrepl.LSN { return pglogrepl.LSN(v) }

// readCheckpoint reads key's checkpoint and returns its LSN.
func readCheckpoint(ctx context.Context, s *sink.Sink, topic, key string) (pglogrepl.LSN, bool, error) {
	cp, ok, err := s.ReadCheckpoint(ctx, topic, key)
	return cp.LSN, ok, err
}

// legacyCheckpoint commits key's checkpoint as releases before timelines
// were stored wrote it: the LSN alone, 8 bytes big-endian, in a transaction
// of the slot's transactional id.
func legacyCheckpoint(t *testing.T, ctx context.Context, brokers []string, topic, key string, value []byte) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID("walrelay-legacy"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(key), Value: value}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
}

// A checkpoint written by an older release (8 bytes, no timeline) is read
// as its LSN with the timeline unknown; a newer one of the same key wins.
func TestReadCheckpointLegacyValue(t *testing.T) {
	c, ctx, s := checkpointSink(t)
	legacyCheckpoint(t, ctx, c.ListenAddrs(), topic, "1/s", binary.BigEndian.AppendUint64(nil, 0x1234))
	cp, ok, err := s.ReadCheckpoint(ctx, topic, "1/s")
	if err != nil || !ok || cp != (sink.Checkpoint{LSN: 0x1234}) {
		t.Fatalf("legacy value: ReadCheckpoint = %v, %v, %v; want 0/1234 with timeline 0", cp, ok, err)
	}
	if err := sendCheckpoint(t, ctx, s, topic, "1/s", 0x2000, true); err != nil {
		t.Fatal(err)
	}
	cp, ok, err = s.ReadCheckpoint(ctx, topic, "1/s")
	if err != nil || !ok || cp != (sink.Checkpoint{LSN: 0x2000, Timeline: 1}) {
		t.Fatalf("after a new checkpoint: ReadCheckpoint = %v, %v, %v; want 0/2000 on timeline 1", cp, ok, err)
	}
}

// A record of the slot's key that is no checkpoint stops the read with an
// error naming it; it is never taken for "no checkpoint".
func TestReadCheckpointFormatError(t *testing.T) {
	c, ctx, s := checkpointSink(t)
	legacyCheckpoint(t, ctx, c.ListenAddrs(), topic, "1/s", []byte("not a checkpoint"))
	_, ok, err := s.ReadCheckpoint(ctx, topic, "1/s")
	var fe *sink.CheckpointFormatError
	if !errors.As(err, &fe) || ok || fe.Offset != 0 {
		t.Fatalf("ReadCheckpoint = ok %v, %v; want a *CheckpointFormatError at offset 0", ok, err)
	}
}

// A broker that does not answer makes the read fail when its context ends:
// an error, never "no checkpoint".
func TestReadCheckpointUnansweredFetchIsAnError(t *testing.T) {
	c, ctx, s := checkpointSink(t)
	if err := sendCheckpoint(t, ctx, s, topic, "1/s", 0x100, true); err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	t.Cleanup(func() { close(gate) })
	c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		c.SleepControl(func() { <-gate })
		return nil, nil, false
	})
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, ok, err := s.ReadCheckpoint(rctx, topic, "1/s")
	if err == nil || ok || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ReadCheckpoint with unanswered fetches = ok %v, %v; want a deadline error", ok, err)
	}
}
