package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/walrelay/walrelay/checkpoint"
	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/replication"
	"github.com/walrelay/walrelay/sink"
)

// The property test of the pipeline without services: a generated WAL of
// outbox transactions (real pgoutput bytes) is fed through the real decoder,
// pipeline and checkpoint tracker by a fake replication stream, while a fake
// producer acknowledges records in random order, fails some, and the stream
// is cut at random points and resumed from the slot's position (a new
// session: new decoder, tracker.Abort, as relay.go does).

// propTxn is one transaction of the generated WAL.
type propTxn struct {
	begin, commit, end pglogrepl.LSN
	inserts            []pglogrepl.LSN // WAL positions of its outbox inserts
}

// propWAL is a generated WAL: transactions in commit order, with gaps of
// unrelated WAL between them.
type propWAL struct {
	txns  []propTxn
	txnOf map[pglogrepl.LSN]int // insert position -> transaction index
}

func genWAL(rng *rand.Rand, n int) *propWAL {
	w := &propWAL{txnOf: map[pglogrepl.LSN]int{}}
	pos := pglogrepl.LSN(0x1000000)
	for i := 0; i < n; i++ {
		pos += pglogrepl.LSN(rng.IntN(0x40)) // unrelated WAL
		t := propTxn{begin: pos}
		k := rng.IntN(5) // 0: a transaction with no outbox insert
		for j := 0; j < k; j++ {
			pos += 0x10 + pglogrepl.LSN(rng.IntN(0x20))
			t.inserts = append(t.inserts, pos)
			w.txnOf[pos] = i
		}
		pos += 0x10
		t.commit = pos
		pos += 0x8
		t.end = pos
		w.txns = append(w.txns, t)
	}
	return w
}

// propRelID is the outbox table's relation id in the generated WAL.
const propRelID = 16384

// msgs returns the pgoutput messages of transaction i; the first
// transaction of a session (relSent false) carries the relation message.
// Its inserts are events of the aggregates o-0, o-1 and o-2 in turn.
func (w *propWAL) msgs(i int, relSent *bool) []replication.Message {
	at := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	tx := w.txns[i]
	msgs := []replication.Message{{WALStart: tx.begin, ServerWALEnd: tx.end, Data: pgoBegin(tx.commit, at, uint32(1000+i))}}
	if !*relSent {
		msgs = append(msgs, replication.Message{WALStart: tx.begin, ServerWALEnd: tx.end, Data: pgoOutboxRelation(propRelID, "public", "outbox")})
		*relSent = true
	}
	for j, l := range tx.inserts {
		msgs = append(msgs, replication.Message{WALStart: l, ServerWALEnd: tx.end,
			Data: pgoOutboxInsert(propRelID, fmt.Sprintf("00000000-0000-4000-8000-%012x", uint64(l)), "order", "o-"+strconv.Itoa(j%3), "created", `{}`)})
	}
	return append(msgs, replication.Message{WALStart: tx.commit, ServerWALEnd: tx.end, Data: pgoCommit(tx.commit, tx.end, at)})
}

// keepalive is a keepalive of a server that has sent everything before
// transaction next's commit (slotPos: where a session that sent nothing
// yet started).
func (w *propWAL) keepalive(rng *rand.Rand, next int, slotPos pglogrepl.LSN) replication.Message {
	hi := w.txns[len(w.txns)-1].end + 0x100
	lo := w.txns[max(next-1, 0)].end
	if next < len(w.txns) {
		hi = w.txns[next].commit
	}
	if next == 0 {
		lo = slotPos
	}
	return replication.Message{Keepalive: true, ServerWALEnd: lo + pglogrepl.LSN(rng.Uint64N(uint64(hi-lo)))}
}

// propProducer is a fake producer: it keeps every record's callback until the
// test answers it.
type propProducer struct {
	mu       sync.Mutex
	prepared []pglogrepl.LSN // positions of prepared records not yet sent
	pending  []propRecord
}

type propRecord struct {
	lsn  pglogrepl.LSN
	done func(error)
}

// Prepare notes the event's position for the Send that follows it: the
// pipeline's one goroutine calls Send right after Prepare, and sink.Record
// keeps its fields to itself.
func (f *propProducer) Prepare(_ context.Context, ev *decoder.Event) (sink.Record, error) {
	f.mu.Lock()
	f.prepared = append(f.prepared, ev.LSN)
	f.mu.Unlock()
	return sink.Record{}, nil
}

func (f *propProducer) PrepareDeadLetter(ctx context.Context, ev *decoder.Event, _, _ string, _ error) (sink.Record, error) {
	return f.Prepare(ctx, ev)
}

func (f *propProducer) Send(_ context.Context, _ sink.Record, done func(error)) {
	f.mu.Lock()
	lsn := f.prepared[0]
	f.prepared = f.prepared[1:]
	f.pending = append(f.pending, propRecord{lsn, done})
	f.mu.Unlock()
}

func (f *propProducer) Topic(*decoder.Event) (string, error) { return "t", nil }

// take removes a random pending record.
func (f *propProducer) take(rng *rand.Rand) (propRecord, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.pending) == 0 {
		return propRecord{}, false
	}
	i := rng.IntN(len(f.pending))
	r := f.pending[i]
	f.pending[i] = f.pending[len(f.pending)-1]
	f.pending = f.pending[:len(f.pending)-1]
	return r, true
}

func (f *propProducer) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.pending)
}

// propSource is the fake replication stream of one session.
type propSource struct{ ch chan *replication.Batch }

func (s propSource) Batches() <-chan *replication.Batch { return s.ch }
func (s propSource) Release(*replication.Batch)         {}

// TestPipelineConfirmedNeverPassesUnacked: for random WALs, ack orders,
// produce failures and reconnects, the tracker's watermark (the only position
// ever confirmed) never passes a transaction with a record Kafka has not
// acknowledged, never goes back, and, when nothing failed, reaches the end of
// the last transaction once everything is acknowledged.
// WALRELAY_TEST_SEED replays one iteration.
func TestPipelineConfirmedNeverPassesUnacked(t *testing.T) {
	var failures, reconnects, acks int
	n := seededIterations(t, 200, func(seed uint64) {
		st := pipelineProperty(t, seed)
		failures += st.failures
		reconnects += st.reconnects
		acks += st.acks
	})
	t.Logf("%d iterations: %d acks, %d reconnects, %d runs ended by a produce failure", n, acks, reconnects, failures)
}

// seededIterations runs one iteration of a property test per seed, n of
// them (a quarter with -short) from a seed of the clock, or the one of
// WALRELAY_TEST_SEED; it stops at the first failing iteration, naming its
// seed, and returns how many ran.
func seededIterations(t *testing.T, n int, iteration func(seed uint64)) int {
	t.Helper()
	if testing.Short() {
		n /= 4
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("WALRELAY_TEST_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seed, n = v, 1
	}
	t.Logf("seed=%d (replay one iteration with WALRELAY_TEST_SEED=<seed of the iteration>)", seed)
	for i := 0; i < n; i++ {
		iteration(seed + uint64(i))
		if t.Failed() {
			t.Fatalf("iteration %d failed: replay with WALRELAY_TEST_SEED=%d", i, seed+uint64(i))
		}
	}
	return n
}

type propStats struct{ failures, reconnects, acks int }

func pipelineProperty(t *testing.T, seed uint64) propStats {
	rng := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
	wal := genWAL(rng, 5+rng.IntN(40))
	dcfg := decoder.Config{Tables: []decoder.Table{{Schema: "public", Name: "outbox"}}, HeartbeatPrefix: HeartbeatPrefix}
	slotPos := wal.txns[0].begin - 1
	tr, err := checkpoint.New(checkpoint.Config{MaxInFlight: 2 + rng.IntN(12)}, slotPos)
	if err != nil {
		t.Fatal(err)
	}
	prod := &propProducer{}
	m := newMetrics(prometheus.NewRegistry(), "prop")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var walEnd atomic.Uint64
	failed, fail := context.WithCancelCause(context.Background())
	defer fail(nil)
	errInjected := errors.New("injected produce failure")

	// acked holds the positions of the records Kafka acknowledged at least
	// once (a record sent again after a reconnect has the same position).
	var ackedMu sync.Mutex
	acked := map[pglogrepl.LSN]bool{}
	var st propStats
	var last pglogrepl.LSN // watermark at the previous check
	passed := 0            // transactions at the front already checked as passed
	check := func(when string) {
		t.Helper()
		w := tr.Watermark()
		if w < last {
			t.Fatalf("seed %d, %s: watermark went back from %s to %s", seed, when, last, w)
		}
		last = w
		ackedMu.Lock()
		defer ackedMu.Unlock()
		for ; passed < len(wal.txns) && wal.txns[passed].end <= w; passed++ {
			for _, l := range wal.txns[passed].inserts {
				if !acked[l] {
					t.Fatalf("seed %d, %s: watermark %s passed the end %s of transaction %d, whose record at %s Kafka has not acknowledged",
						seed, when, w, wal.txns[passed].end, passed, l)
				}
			}
		}
	}
	answer := func(fail bool) bool {
		r, ok := prod.take(rng)
		if !ok {
			return false
		}
		check("before an answer")
		if fail {
			r.done(errInjected)
		} else {
			ackedMu.Lock()
			acked[r.lsn] = true
			ackedMu.Unlock()
			r.done(nil)
			st.acks++
		}
		check("after an answer")
		return true
	}

	// session state
	var (
		src     propSource
		cancel  context.CancelFunc
		errc    chan error
		next    int // next transaction to send
		relSent bool
		over    bool  // the session's pipeline returned
		runErr  error // what it returned
	)
	startSession := func() {
		dec, err := decoder.New(dcfg)
		if err != nil {
			t.Fatal(err)
		}
		p := &pipeline{dec: dec, tr: tr, d: &atLeastOnce{producer: prod}, onPoison: OnPoisonDLQ, log: log, obs: m,
			produceCtx: context.Background(), walEnd: &walEnd, failed: failed, fail: fail}
		src = propSource{ch: make(chan *replication.Batch)}
		var ctx context.Context
		ctx, cancel = context.WithCancel(context.Background())
		errc = make(chan error, 1)
		over, runErr = false, nil
		go func() { errc <- p.run(ctx, src) }()
		// The slot resends every transaction that ends after its position.
		next = 0
		for next < len(wal.txns) && wal.txns[next].end <= slotPos {
			next++
		}
		relSent = false
	}
	// endSession cuts the stream (the errgroup cancels the pipeline when the
	// stream fails) and returns what the pipeline returned.
	endSession := func() error {
		cancel()
		close(src.ch)
		for !over {
			select {
			case runErr = <-errc:
				over = true
			default:
				answer(false)
				time.Sleep(50 * time.Microsecond)
			}
		}
		tr.Abort() // as relay.go: the half-read transaction is read again
		check("after a reconnect")
		return runErr
	}
	// send hands one batch to the pipeline, answering records while it is
	// blocked at the in-flight cap; false when the pipeline ended.
	send := func(msgs []replication.Message) bool {
		b := &replication.Batch{Msgs: msgs}
		for {
			select {
			case src.ch <- b:
				return true
			case runErr = <-errc:
				over = true
				return false
			case <-time.After(100 * time.Microsecond):
				answer(false)
			}
		}
	}
	txnMsgs := func(i int) []replication.Message { return wal.msgs(i, &relSent) }
	keepalive := func() replication.Message { return wal.keepalive(rng, next, slotPos) }

	startSession()
	stopped := false // a produce failure ended the run
	for steps := 0; !stopped && steps < 400; steps++ {
		switch r := rng.IntN(100); {
		case r < 40 && next < len(wal.txns):
			// The next transaction, whole or cut off by a lost connection.
			msgs := txnMsgs(next)
			if rng.IntN(8) == 0 {
				msgs = msgs[:rng.IntN(len(msgs))]
				if len(msgs) > 0 && !send(msgs) {
					stopped = true
					break
				}
				st.reconnects++
				if err := endSession(); err != nil {
					stopped = true
					break
				}
				if rng.IntN(2) == 0 {
					slotPos = max(slotPos, tr.Watermark()) // the stream confirmed the watermark
				}
				startSession()
				break
			}
			// Split into random batches.
			for len(msgs) > 0 && !stopped {
				k := 1 + rng.IntN(len(msgs))
				if !send(msgs[:k]) {
					stopped = true
				}
				msgs = msgs[k:]
			}
			next++
		case r < 50:
			if !send([]replication.Message{keepalive()}) {
				stopped = true
			}
		case r < 51 && rng.IntN(4) == 0:
			answer(true)
		case r < 57:
			st.reconnects++
			if err := endSession(); err != nil {
				stopped = true
				break
			}
			if rng.IntN(2) == 0 {
				slotPos = max(slotPos, tr.Watermark())
			}
			startSession()
		default:
			answer(false)
		}
		check("after a step")
		if next == len(wal.txns) && prod.count() == 0 && rng.IntN(4) == 0 {
			break
		}
	}
	if failed.Err() != nil {
		// The relay stops on a produce failure; whatever Kafka still
		// answers must not move the watermark past the failed record.
		st.failures++
		cancel()
		if !over {
			runErr, over = <-errc, true
		}
		if err := runErr; !errors.Is(err, errInjected) && err != nil {
			t.Fatalf("seed %d: pipeline returned %v after a produce failure, want the failure", seed, err)
		}
		tr.Abort()
		for answer(rng.IntN(10) == 0) {
		}
		check("after the run stopped")
		return st
	}
	// Liveness: the rest of the WAL, everything acknowledged, and the
	// watermark reaches the end of the last transaction.
	for ; next < len(wal.txns); next++ {
		if !send(txnMsgs(next)) {
			t.Fatalf("seed %d: pipeline stopped without a produce failure: %v", seed, runErr)
		}
	}
	close(src.ch)
	for {
		select {
		case err := <-errc:
			if err != nil {
				t.Fatalf("seed %d: pipeline returned %v", seed, err)
			}
			for answer(false) {
			}
			check("at the end")
			if w, end := tr.Watermark(), wal.txns[len(wal.txns)-1].end; w < end {
				t.Fatalf("seed %d: watermark %s after every record was acknowledged, want the last transaction's end %s", seed, w, end)
			}
			cancel()
			return st
		default:
			answer(false)
			time.Sleep(50 * time.Microsecond)
		}
	}
}
