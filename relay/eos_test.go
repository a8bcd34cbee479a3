package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/replication"
	"github.com/walrelay/walrelay/sink"
)

// fakeTxnSink acknowledges every Send at once (or fails it with sendErr) and
// records the transaction calls.
type fakeTxnSink struct {
	mu        sync.Mutex
	sendErr   error
	sendErrs  []error // the errors of the next Sends, in order (nil: acknowledged), before sendErr
	commitErr error
	abortErr  error
	begins    int
	commits   int
	aborts    int
	sent      int
	// InitProducer answers PRODUCER_FENCED fencedInits times.
	fencedInits, inits, resets int
	// As franz-go's client: a transaction is open between BeginTxn and an
	// EndTxn that reached the broker; an abort that times out in
	// AbortBufferedRecords leaves it open (abortTimeouts times), and only a
	// new client (ResetProducer) forgets it.
	inTxn         bool
	abortTimeouts int
	// deferAcks holds every Send's answer until Flush, which then returns
	// the pipeline's cancellation if an answer failed (the race in which a
	// record's failure cancels the commit's flush).
	deferAcks  bool
	deferred   []deferredAnswer
	checkpoint sink.Checkpoint // what ReadCheckpoint returns (ok when its LSN is set)
	// unknownTopicReads is how many reads still find the checkpoint topic
	// unknown (a topic just created, not yet known to every broker).
	unknownTopicReads int
}

func (f *fakeTxnSink) Prepare(context.Context, *decoder.Event) (sink.Record, error) {
	return sink.Record{}, nil
}
func (f *fakeTxnSink) PrepareDeadLetter(context.Context, *decoder.Event, string, string, error) (sink.Record, error) {
	return sink.Record{}, nil
}
func (f *fakeTxnSink) Topic(*decoder.Event) (string, error) { return "t", nil }
func (f *fakeTxnSink) Send(_ context.Context, _ sink.Record, done func(error)) {
	f.mu.Lock()
	f.sent++
	err := f.sendErr
	if len(f.sendErrs) > 0 {
		err, f.sendErrs = f.sendErrs[0], f.sendErrs[1:]
	}
	if f.deferAcks {
		f.deferred = append(f.deferred, deferredAnswer{done, err})
		f.mu.Unlock()
		return
	}
	f.mu.Unlock()
	done(err)
}
func (f *fakeTxnSink) Flush(ctx context.Context) error {
	f.mu.Lock()
	answers := f.deferred
	f.deferred = nil
	f.mu.Unlock()
	failed := false
	for _, a := range answers {
		failed = failed || a.err != nil
		a.done(a.err)
	}
	if failed {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return nil
}
func (f *fakeTxnSink) InitProducer(context.Context) error {
	f.inits++
	if f.fencedInits > 0 {
		f.fencedInits--
		return kerr.ProducerFenced
	}
	return nil
}
func (f *fakeTxnSink) ResetProducer() error { f.resets++; f.inTxn = false; return nil }
func (f *fakeTxnSink) BeginTxn() error {
	if f.inTxn {
		return errors.New("invalid attempt to begin a transaction while already in a transaction")
	}
	f.begins++
	f.inTxn = true
	return nil
}
func (f *fakeTxnSink) EnsureCheckpointTopic(context.Context, string, int16) error { return nil }
func (f *fakeTxnSink) ReadCheckpoint(context.Context, string, string) (sink.Checkpoint, bool, error) {
	if f.unknownTopicReads > 0 {
		f.unknownTopicReads--
		return sink.Checkpoint{}, false, fmt.Errorf("kafka: read checkpoint topic: list end offsets: %w", kerr.UnknownTopicOrPartition)
	}
	return f.checkpoint, f.checkpoint.LSN != 0, nil
}
func (f *fakeTxnSink) EndTxn(_ context.Context, commit bool) error {
	if commit {
		f.commits++
		if f.commitErr == nil {
			f.inTxn = false
		}
		return f.commitErr
	}
	f.aborts++
	if f.abortTimeouts > 0 {
		f.abortTimeouts--
		return fmt.Errorf("kafka: abort buffered records: %w", context.DeadlineExceeded)
	}
	if f.abortErr == nil {
		f.inTxn = false
	}
	return f.abortErr
}

type deferredAnswer struct {
	done func(error)
	err  error
}

func newTestTxnProducer(f *fakeTxnSink, maxRecords int) *txnProducer {
	opts := Options{Replication: replication.Config{Slot: "s"}, MaxInFlight: 10000, KafkaTimeout: 15 * time.Second,
		ExactlyOnce: &ExactlyOnce{TransactionalID: "walrelay-s", CheckpointTopic: sink.DefaultCheckpointTopic, CheckpointReplicationFactor: -1,
			CommitInterval: time.Hour, MaxRecords: maxRecords}}
	return newTxnProducer(opts, f, context.Background(), newMetrics(prometheus.NewRegistry(), "s"), slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// Records are acknowledged (their done runs) only after the Kafka
// transaction committed, together with the checkpoint record.
func TestTxnProducerAcksAtCommit(t *testing.T) {
	f := &fakeTxnSink{}
	tp := newTestTxnProducer(f, 3)
	var acked int
	done := func(err error) {
		if err != nil {
			t.Errorf("done(%v)", err)
		}
		acked++
	}
	ctx := context.Background()
	tp.Send(ctx, sink.Record{}, done)
	tp.Send(ctx, sink.Record{}, done)
	if err := tp.end(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if acked != 0 || f.commits != 0 {
		t.Fatalf("after 2 records (max 3): acked=%d commits=%d, want 0 and 0", acked, f.commits)
	}
	tp.Send(ctx, sink.Record{}, done)
	if err := tp.end(ctx, 200); err != nil {
		t.Fatal(err)
	}
	if acked != 3 || f.commits != 1 || f.begins != 1 || f.sent != 4 {
		t.Fatalf("after 3 records: acked=%d commits=%d begins=%d sent=%d, want 3 1 1 4 (3 records + checkpoint)", acked, f.commits, f.begins, f.sent)
	}
	if tp.batch != nil {
		t.Fatal("a transaction is still open after the commit")
	}
}

// TestTxnProducerIdleCommit: an open Kafka transaction with a record may be
// committed when the stream is idle once it has been open as long as the
// last commit took (at once after a fast commit), and wake fires then; it
// fires at the commit interval otherwise, and woken commits between
// Postgres transactions or marks the commit for the end of the open one.
func TestTxnProducerIdleCommit(t *testing.T) {
	f := &fakeTxnSink{}
	tp := newTestTxnProducer(f, 1000)
	reg := prometheus.NewRegistry()
	tp.obs = newMetrics(reg, "s")
	ctx := context.Background()
	if tp.ready() || tp.wake() != nil {
		t.Fatal("idle commit allowed, or a wake-up, without an open transaction")
	}
	tp.Send(ctx, sink.Record{}, func(error) {})
	if !tp.ready() {
		t.Fatal("first transaction: an idle commit must be allowed at once")
	}
	if err := tp.idle(ctx); err != nil {
		t.Fatal(err)
	}
	if got := gather(t, reg)["walrelay_txn_total{outcome=committed}"]; got != 1 {
		t.Fatalf("walrelay_txn_total{outcome=committed} = %v, want 1", got)
	}
	tp.lastDur = 50 * time.Millisecond // as if the commit took 50 ms
	tp.Send(ctx, sink.Record{}, func(error) {})
	if tp.ready() {
		t.Fatal("idle commit allowed before the transaction was open as long as the last commit took")
	}
	c := tp.wake()
	if c == nil {
		t.Fatal("no wake-up for the idle commit")
	}
	select {
	case <-c:
	case <-time.After(time.Second):
		t.Fatal("the idle commit wake-up did not fire")
	}
	if !tp.ready() {
		t.Fatal("idle commit not allowed after the wake-up fired")
	}

	// The commit interval (1h here) passed inside a Postgres transaction:
	// committed at its end, not before.
	tp.opened = time.Now().Add(-2 * time.Hour)
	if err := tp.woken(ctx, true); err != nil || f.commits != 1 || !tp.overdue || tp.wake() != nil {
		t.Fatalf("woken inside a transaction: err %v, commits %d, overdue %v; want no commit yet, overdue, no wake-up", err, f.commits, tp.overdue)
	}
	if err := tp.end(ctx, 0x200); err != nil || f.commits != 2 {
		t.Fatalf("at the transaction's end: err %v, commits %d, want the commit", err, f.commits)
	}
	tp.Send(ctx, sink.Record{}, func(error) {})
	tp.opened = time.Now().Add(-2 * time.Hour)
	if err := tp.woken(ctx, false); err != nil || f.commits != 3 {
		t.Fatalf("woken between transactions: err %v, commits %d, want the commit", err, f.commits)
	}
}

func TestTxnProducerCommitFailure(t *testing.T) {
	for _, tc := range []struct {
		name      string
		commitErr error
		fenced    bool
	}{
		{"unknown outcome", errors.New("broker connection lost"), false},
		{"fenced", kerr.ProducerFenced, true},
		{"epoch", kerr.InvalidProducerEpoch, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeTxnSink{commitErr: tc.commitErr}
			tp := newTestTxnProducer(f, 1)
			acked := 0
			tp.Send(context.Background(), sink.Record{}, func(error) { acked++ })
			err := tp.end(context.Background(), 100)
			if acked != 0 {
				t.Fatalf("a record was acknowledged although the commit failed")
			}
			var fe *FencedError
			if errors.As(err, &fe) != tc.fenced {
				t.Fatalf("error %v: fenced=%v, want %v", err, errors.As(err, &fe), tc.fenced)
			}
			if !tc.fenced && !reconnectable(&deliveryError{err}) {
				t.Fatalf("error %v is not reconnectable", err)
			}
			if tc.fenced && reconnectable(&deliveryError{err}) {
				t.Fatalf("fenced error %v is reconnectable", err)
			}
			got := tp.endSession(err)
			var retry *fencedRetry
			if tc.fenced && !errors.As(got, &retry) || !tc.fenced && got != err {
				t.Fatalf("endSession = %v, want %v (fenced: a fencedRetry)", got, err)
			}
			if f.aborts != 1 {
				t.Fatalf("aborts=%d, want 1", f.aborts)
			}
		})
	}
}

// A record that fails reports the failure (never an ack); a fenced one says so.
func TestTxnProducerRecordFailure(t *testing.T) {
	f := &fakeTxnSink{sendErr: kerr.ProducerFenced}
	tp := newTestTxnProducer(f, 10)
	var got error
	tp.Send(context.Background(), sink.Record{}, func(err error) { got = err })
	var fe *FencedError
	if !errors.As(got, &fe) {
		t.Fatalf("done(%v), want a *FencedError", got)
	}
	f.sendErr = kerr.TransactionAbortable
	tp.Send(context.Background(), sink.Record{}, func(err error) { got = err })
	var re *eosRestartError
	if !errors.As(got, &re) || !reconnectable(&deliveryError{got}) {
		t.Fatalf("done(%v), want a reconnectable *eosRestartError", got)
	}
	// A permanent record error stops walrelay, as in at-least-once mode.
	f.sendErr = kerr.TopicAuthorizationFailed
	tp.Send(context.Background(), sink.Record{}, func(err error) { got = err })
	if errors.As(got, &re) || errors.As(got, &fe) || reconnectable(&deliveryError{got}) {
		t.Fatalf("done(%v), want a permanent error", got)
	}
}

func TestTxnProducerSkip(t *testing.T) {
	tp := newTestTxnProducer(&fakeTxnSink{}, 10)
	tp.checkpoint = 0x200
	for _, tc := range []struct {
		commit pglogrepl.LSN
		skip   bool
	}{{0x100, true}, {0x1ff, true}, {0x200, false}, {0x300, false}} {
		if got := tp.skip(tc.commit); got != tc.skip {
			t.Errorf("skip(%s) with checkpoint %s = %v, want %v", tc.commit, tp.checkpoint, got, tc.skip)
		}
	}
}

// A Postgres transaction larger than the tracker's cap cannot wait in one
// Kafka transaction: a clear error, not a deadlock.
func TestTxnProducerReserve(t *testing.T) {
	f := &fakeTxnSink{}
	tp := newTestTxnProducer(f, 0)
	tp.maxInFlight = 10
	var err error
	for i := 0; i < 20 && err == nil; i++ {
		if err = tp.reserve(); err == nil {
			tp.Send(context.Background(), sink.Record{}, func(error) {})
		}
	}
	if err == nil {
		t.Fatal("no error for a transaction larger than max-in-flight")
	}
	if fields := fieldsOf(err); !slices.Equal(fields, []string{"relay.Options.ExactlyOnce.MaxRecords", "relay.Options.MaxInFlight"}) || !strings.Contains(err.Error(), "raise the exactly-once transaction size") {
		t.Errorf("%v: Fields() = %q, want the transaction size and the in-flight cap", err, fields)
	}
}

// A stale epoch at session start (the process holds the slot) is cured by a
// new producer; refused again, walrelay stops.
func TestTxnProducerInitStaleEpoch(t *testing.T) {
	f := &fakeTxnSink{fencedInits: 1}
	tp := newTestTxnProducer(f, 10)
	if err := tp.initSession(context.Background()); err != nil || f.resets != 1 || f.inits != 2 {
		t.Fatalf("initSession = %v (resets=%d inits=%d), want nil after one reset", err, f.resets, f.inits)
	}
	f = &fakeTxnSink{fencedInits: 2}
	tp = newTestTxnProducer(f, 10)
	err := tp.initSession(context.Background())
	var fe *FencedError
	if err == nil || errors.As(err, &fe) || reconnectable(&deliveryError{err}) {
		t.Fatalf("initSession = %v, want a permanent error (a new producer refused while holding the slot)", err)
	}
}

// The first exactly-once run creates the checkpoint topic and waits until it
// can read it (a new topic is not known to every broker at once), instead of
// restarting the session with a warning each time.
func TestTxnProducerWaitsForNewCheckpointTopic(t *testing.T) {
	f := &fakeTxnSink{unknownTopicReads: 3}
	tp := newTestTxnProducer(f, 10)
	if err := tp.initSession(context.Background()); err != nil || f.unknownTopicReads != 0 {
		t.Fatalf("initSession = %v (%d unknown-topic reads left), want nil after waiting for the new topic", err, f.unknownTopicReads)
	}
}

// A fenced session is retried once: walrelay stops with the FencedError only
// if another process holds the slot.
func TestStopIfFenced(t *testing.T) {
	fe := &FencedError{kerr.ProducerFenced}
	tp := newTestTxnProducer(&fakeTxnSink{}, 10)
	inUse := fmt.Errorf("start replication: %w", replication.ErrSlotInUse)
	if err := tp.stopIfFenced(inUse); err != nil {
		t.Fatalf("not fenced: stopIfFenced = %v, want nil (standby)", err)
	}
	if err := tp.endSession(fe); !reconnectable(err) {
		t.Fatalf("a fenced session is not retried: endSession = %v", err)
	}
	if err := tp.stopIfFenced(errors.New("connection refused")); err != nil {
		t.Fatalf("fenced, slot not known in use: %v, want nil", err)
	}
	if err := tp.stopIfFenced(inUse); err != fe {
		t.Fatalf("fenced and the slot in use: %v, want the FencedError", err)
	}
	if (&atLeastOnce{}).stopIfFenced(inUse) != nil {
		t.Fatal("at-least-once: stopIfFenced must be nil")
	}
}
