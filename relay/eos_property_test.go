package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/replication"
	"github.com/walrelay/walrelay/sink"
)

// The property test of exactly-once delivery without services: the real
// decoder, pipeline, tracker and txnProducer over a generated WAL, against a
// fake transactional Kafka that answers records late and in any order,
// fails records (retriable and permanent), fails and times out commits
// (also after committing: an unknown outcome), aborts, InitProducerId and
// checkpoint reads, while the stream is cut mid-transaction and the process
// restarts. The invariant, for a read_committed reader: every event of every
// Postgres transaction appears exactly once, in commit order per aggregate;
// no Kafka transaction commits while one of its records failed; and the slot
// is never confirmed past an event that is not committed in Kafka.

// eosRec is a record sent to the fake Kafka.
type eosRec struct {
	lsn        pglogrepl.LSN // the event's position; 0 for a checkpoint
	cp         sink.Checkpoint
	done       func(error)
	err        error // its answer, once given
	answered   bool
	checkpoint bool
}

// eosKafka is the fake transactional Kafka of the property test. The
// pipeline's goroutine calls the eosSink methods; the test's goroutine
// answers records. Faults are drawn from its own generator under mu.
type eosKafka struct {
	t        *testing.T
	mu       sync.Mutex
	rng      *rand.Rand
	faults   bool // inject faults (off for the final, liveness phase)
	tp       func() *txnProducer
	prepared []pglogrepl.LSN

	clientInTxn bool      // franz-go's view: a transaction is open
	brokerOpen  []*eosRec // the broker's open transaction (records sent in it)
	pending     []*eosRec // records awaiting an answer

	log        []pglogrepl.LSN // what a read_committed reader sees, in order
	cp         sink.Checkpoint
	hasCP      bool
	violations []string
	commits    int
	aborts     int
	failures   int
}

var errPermanentRecord = kerr.InvalidRecord     // stops walrelay
var errRetriableRecord = kerr.NotEnoughReplicas // restarts the session

func (k *eosKafka) chance(pct int) bool { return k.faults && k.rng.IntN(100) < pct }

func (k *eosKafka) Prepare(_ context.Context, ev *decoder.Event) (sink.Record, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.prepared = append(k.prepared, ev.LSN)
	return sink.Record{}, nil
}

func (k *eosKafka) PrepareDeadLetter(ctx context.Context, ev *decoder.Event, _, _ string, _ error) (sink.Record, error) {
	return k.Prepare(ctx, ev)
}

func (k *eosKafka) Topic(*decoder.Event) (string, error) { return "t", nil }

// Send takes the position of the record the pipeline prepared last; a Send
// without one is the txnProducer's checkpoint record (same goroutine).
func (k *eosKafka) Send(_ context.Context, _ sink.Record, done func(error)) {
	k.mu.Lock()
	r := &eosRec{done: done}
	if len(k.prepared) > 0 {
		r.lsn, k.prepared = k.prepared[0], k.prepared[1:]
	} else {
		tp := k.tp()
		r.checkpoint, r.cp = true, sink.Checkpoint{LSN: tp.lastEnd, Timeline: tp.timeline}
	}
	if !k.clientInTxn {
		k.mu.Unlock()
		done(errors.New("fake: produce outside a transaction"))
		return
	}
	k.pending = append(k.pending, r)
	k.brokerOpen = append(k.brokerOpen, r)
	k.mu.Unlock()
}

// answer answers a random pending record (fail: with an error); false when
// none is pending.
func (k *eosKafka) answer(rng *rand.Rand, fail bool) bool {
	k.mu.Lock()
	if len(k.pending) == 0 {
		k.mu.Unlock()
		return false
	}
	var open []*eosRec
	for _, r := range k.pending {
		if !r.answered {
			open = append(open, r)
		}
	}
	if len(open) == 0 {
		k.mu.Unlock()
		return false
	}
	r := open[rng.IntN(len(open))]
	r.answered = true
	if fail {
		r.err = errRetriableRecord
		if rng.IntN(3) == 0 {
			r.err = errPermanentRecord
		}
		k.failures++
	}
	k.mu.Unlock()
	// As franz-go: the promise runs before the record stops counting as
	// buffered, so a Flush that returns has seen every answer.
	r.done(r.err)
	k.unbuffer(r)
	return true
}

// unbuffer removes the answered record r from the pending ones.
func (k *eosKafka) unbuffer(r *eosRec) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if i := slices.Index(k.pending, r); i >= 0 {
		k.pending = slices.Delete(k.pending, i, i+1)
	}
}

// failPending fails every pending record with err (an abort or a closed
// client fails what is still buffered).
func (k *eosKafka) failPending(err error) {
	k.mu.Lock()
	var ps []*eosRec
	for _, r := range k.pending {
		if !r.answered {
			r.answered, r.err = true, err
			ps = append(ps, r)
		}
	}
	k.mu.Unlock()
	for _, r := range ps {
		r.done(err)
		k.unbuffer(r)
	}
}

func (k *eosKafka) Flush(ctx context.Context) error {
	for {
		k.mu.Lock()
		n := len(k.pending)
		k.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Microsecond):
		}
	}
}

func (k *eosKafka) InitProducer(context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.chance(5) {
		return fmt.Errorf("fake: init producer id: %w", kerr.CoordinatorNotAvailable)
	}
	// The coordinator aborts what the transactional id left open.
	k.brokerOpen = nil
	return nil
}

func (k *eosKafka) ResetProducer() error {
	k.failPending(kgo.ErrClientClosed)
	k.mu.Lock()
	k.clientInTxn = false
	k.mu.Unlock()
	return nil
}

func (k *eosKafka) BeginTxn() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.clientInTxn {
		return errors.New("fake: invalid attempt to begin a transaction while already in a transaction")
	}
	if len(k.brokerOpen) > 0 {
		k.violations = append(k.violations, "a transaction began while the broker still held an earlier one open")
	}
	k.clientInTxn = true
	return nil
}

func (k *eosKafka) EndTxn(_ context.Context, commit bool) error {
	k.mu.Lock()
	if !k.clientInTxn {
		k.mu.Unlock()
		return nil // franz-go: nothing to end
	}
	if !commit {
		if k.chance(15) {
			// AbortBufferedRecords timed out: the client stays in the
			// transaction and the broker keeps it open.
			k.mu.Unlock()
			return fmt.Errorf("fake: abort buffered records: %w", context.DeadlineExceeded)
		}
		k.clientInTxn, k.brokerOpen = false, nil
		k.aborts++
		k.mu.Unlock()
		k.failPending(kgo.ErrAborting)
		return nil
	}
	defer k.mu.Unlock()
	if len(k.pending) > 0 {
		k.violations = append(k.violations, fmt.Sprintf("commit with %d records unanswered (no flush)", len(k.pending)))
	}
	for _, r := range k.brokerOpen {
		if r.err != nil {
			k.violations = append(k.violations, fmt.Sprintf("a Kafka transaction committed although its record at %s failed (%v)", r.lsn, r.err))
		}
	}
	k.clientInTxn = false
	switch {
	case k.chance(8): // refused: not committed; the broker keeps it open until an abort or a new producer
		return fmt.Errorf("fake: end txn: %w", kerr.ConcurrentTransactions)
	case k.chance(4): // timed out, not committed
		return fmt.Errorf("fake: end txn: %w", context.DeadlineExceeded)
	}
	// Committed: what the broker accepted becomes visible.
	for _, r := range k.brokerOpen {
		if r.err != nil || !r.answered {
			continue
		}
		if r.checkpoint {
			k.cp, k.hasCP = r.cp, true
		} else {
			k.log = append(k.log, r.lsn)
		}
	}
	k.brokerOpen = nil
	k.commits++
	if k.chance(4) { // committed, but the answer was lost
		return fmt.Errorf("fake: end txn answer lost: %w", context.DeadlineExceeded)
	}
	return nil
}

func (k *eosKafka) EnsureCheckpointTopic(context.Context, string, int16) error { return nil }

func (k *eosKafka) ReadCheckpoint(context.Context, string, string) (sink.Checkpoint, bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.chance(5) {
		return sink.Checkpoint{}, false, fmt.Errorf("fake: read checkpoint: %w", context.DeadlineExceeded)
	}
	return k.cp, k.hasCP, nil
}

// committed returns a copy of the read_committed view.
func (k *eosKafka) committed() []pglogrepl.LSN {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.log)
}

func (k *eosKafka) setFaults(on bool) {
	k.mu.Lock()
	k.faults = on
	k.mu.Unlock()
}

// TestExactlyOnceProperty: for random WALs, answers, faults, cut streams and
// process restarts, a read_committed reader sees every event exactly once
// in commit order per aggregate, no Kafka transaction commits past a failed
// record, and the slot is never confirmed past an event not committed.
// WALRELAY_TEST_SEED replays one iteration.
func TestExactlyOnceProperty(t *testing.T) {
	var total eosPropStats
	n := seededIterations(t, 200, func(seed uint64) { total.add(exactlyOnceProperty(t, seed)) })
	t.Logf("%d iterations: %d events, %d sessions, %d process restarts, %d commits, %d aborts, %d record failures",
		n, total.events, total.sessions, total.restarts, total.commits, total.aborts, total.failures)
}

type eosPropStats struct{ events, sessions, restarts, commits, aborts, failures int }

func (s *eosPropStats) add(o eosPropStats) {
	s.events += o.events
	s.sessions += o.sessions
	s.restarts += o.restarts
	s.commits += o.commits
	s.aborts += o.aborts
	s.failures += o.failures
}

func exactlyOnceProperty(t *testing.T, seed uint64) eosPropStats {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	wal := genWAL(rng, 5+rng.IntN(30))
	var tp *txnProducer
	k := &eosKafka{t: t, rng: rand.New(rand.NewPCG(seed^0x51, seed)), faults: true, tp: func() *txnProducer { return tp }}
	ident := replication.Identity{SystemID: "7300000000000000009", Timeline: 1}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	newProcess := func() {
		m := newMetrics(prometheus.NewRegistry(), "prop")
		opts := Options{Replication: replication.Config{Slot: "prop"}, MaxInFlight: 4 + rng.IntN(40), KafkaTimeout: time.Second,
			ExactlyOnce: &ExactlyOnce{TransactionalID: "walrelay-prop", CheckpointTopic: sink.DefaultCheckpointTopic,
				CheckpointReplicationFactor: -1, CommitInterval: time.Duration(1+rng.IntN(20)) * time.Millisecond, MaxRecords: 1 + rng.IntN(12)}}
		tp = newTxnProducer(opts, k, context.Background(), m, log)
		tp.timeout = 20 * time.Millisecond
	}
	newProcess()
	slotPos := wal.txns[0].begin - 1
	var st eosPropStats

	// The slot must never pass the end of a transaction holding an event
	// that is not committed in Kafka.
	check := func(w pglogrepl.LSN, when string) {
		t.Helper()
		in := map[pglogrepl.LSN]bool{}
		for _, l := range k.committed() {
			in[l] = true
		}
		for _, tx := range wal.txns {
			if tx.end > w {
				break
			}
			for _, l := range tx.inserts {
				if !in[l] {
					t.Fatalf("seed %d, %s: position %s confirmable past the end %s of a transaction whose event at %s is not committed in Kafka",
						seed, when, w, tx.end, l)
				}
			}
		}
	}

	var (
		src     propSource
		cancel  context.CancelFunc
		errc    chan error
		next    int
		relSent bool
		over    bool
		runErr  error
		cur     func() pglogrepl.LSN
	)
	answerSome := func() {
		k.mu.Lock()
		fail := k.chance(3)
		k.mu.Unlock()
		k.answer(rng, fail)
	}
	// await answers records until the pipeline returned (into runErr).
	await := func(what string) {
		deadline := time.Now().Add(10 * time.Second)
		for !over {
			select {
			case runErr = <-errc:
				over = true
			case <-time.After(20 * time.Microsecond):
				answerSome()
			}
			if !over && time.Now().After(deadline) {
				t.Fatalf("seed %d: the pipeline did not return %s", seed, what)
			}
		}
	}
	startSession := func() {
		tr, err := tp.newSession(ident, slotPos, nil)
		if err != nil {
			t.Fatal(err)
		}
		cur = tr.Watermark
		dec, err := decoder.New(decoder.Config{Tables: []decoder.Table{{Schema: "public", Name: "outbox"}}, HeartbeatPrefix: HeartbeatPrefix})
		if err != nil {
			t.Fatal(err)
		}
		failed, fail := context.WithCancelCause(context.Background())
		var walEnd atomic.Uint64
		p := &pipeline{dec: dec, tr: tr, d: tp, onPoison: OnPoisonDLQ, log: log, obs: tp.obs, produceCtx: context.Background(),
			walEnd: &walEnd, failed: failed, fail: fail}
		src = propSource{ch: make(chan *replication.Batch)}
		var ctx context.Context
		ctx, cancel = context.WithCancel(context.Background())
		errc = make(chan error, 1)
		over, runErr = false, nil
		go func() {
			err := p.run(ctx, src)
			fail(nil)
			errc <- err
		}()
		next = 0
		for next < len(wal.txns) && wal.txns[next].end <= slotPos {
			next++
		}
		relSent = false
		st.sessions++
	}
	// endSession cuts the stream, waits for the pipeline while answering
	// records, ends the session as relay.go does, and starts the next one
	// (a new process when the error stops walrelay).
	endSession := func() {
		cancel()
		close(src.ch)
		await("after its stream was cut")
		var err error
		if runErr != nil {
			err = &deliveryError{runErr}
		}
		err = tp.endSession(err)
		w := cur()
		check(w, "after a session")
		if rng.IntN(2) == 0 {
			slotPos = max(slotPos, w) // the stream confirmed the watermark
		}
		var fe *FencedError
		if err != nil && (!reconnectable(err) || errors.As(err, &fe)) {
			// walrelay stops; the operator (or Kubernetes) starts it again,
			// with a new client whose initialisation fences the old one.
			st.restarts++
			_ = k.ResetProducer()
			newProcess()
		}
		startSession()
	}
	send := func(msgs []replication.Message) bool {
		b := &replication.Batch{Msgs: msgs}
		deadline := time.Now().Add(10 * time.Second)
		for {
			if time.Now().After(deadline) {
				t.Fatalf("seed %d: the pipeline took no batch for 10s (blocked)", seed)
			}
			select {
			case src.ch <- b:
				return true
			case runErr = <-errc:
				over = true
				return false
			case <-time.After(50 * time.Microsecond):
				answerSome()
			}
		}
	}

	startSession()
	for steps := 0; steps < 300 && st.restarts < 8; steps++ {
		switch r := rng.IntN(100); {
		case r < 45 && next < len(wal.txns):
			msgs := wal.msgs(next, &relSent)
			if rng.IntN(10) == 0 { // the connection breaks inside the transaction
				if cut := msgs[:rng.IntN(len(msgs))]; len(cut) > 0 {
					send(cut)
				}
				endSession()
				break
			}
			for len(msgs) > 0 {
				n := 1 + rng.IntN(len(msgs))
				if !send(msgs[:n]) {
					break
				}
				msgs = msgs[n:]
			}
			if len(msgs) > 0 || over {
				endSession()
				break
			}
			next++
		case r < 52:
			if !send([]replication.Message{wal.keepalive(rng, next, slotPos)}) {
				endSession()
			}
		case r < 58:
			endSession()
		default:
			answerSome()
			time.Sleep(time.Duration(rng.IntN(30)) * time.Microsecond)
		}
		if over {
			endSession()
		}
		check(cur(), "after a step")
	}

	// Liveness: no more faults; the rest of the WAL is delivered.
	k.setFaults(false)
	endSession()
	last := wal.txns[len(wal.txns)-1].end
	for attempt := 0; cur() < last; attempt++ {
		if attempt == 20 {
			t.Fatalf("seed %d: the WAL was not delivered without faults (watermark %s, want %s): %v", seed, cur(), last, runErr)
		}
		for ; next < len(wal.txns); next++ {
			if !send(wal.msgs(next, &relSent)) {
				break
			}
		}
		deadline := time.Now().Add(5 * time.Second)
		for cur() < last && !over && time.Now().Before(deadline) {
			select {
			case runErr = <-errc:
				over = true
			case <-time.After(50 * time.Microsecond):
				answerSome()
			}
		}
		if cur() < last {
			endSession()
		}
	}
	check(cur(), "at the end")
	cancel()
	close(src.ch)
	await("at the end")
	if err := tp.endSession(runErr); err != nil {
		t.Fatalf("seed %d: the last session ended with %v", seed, err)
	}

	// Exactly once, in commit order per aggregate.
	got := k.committed()
	seen := map[pglogrepl.LSN]int{}
	for _, l := range got {
		seen[l]++
	}
	lastOf := map[string]pglogrepl.LSN{}
	for _, l := range got {
		tx := wal.txns[wal.txnOf[l]]
		agg := "o-" + strconv.Itoa(slices.Index(tx.inserts, l)%3)
		if l < lastOf[agg] {
			t.Fatalf("seed %d: event at %s of aggregate %s committed after its later event at %s", seed, l, agg, lastOf[agg])
		}
		lastOf[agg] = l
	}
	for i, tx := range wal.txns {
		for _, l := range tx.inserts {
			if seen[l] != 1 {
				t.Fatalf("seed %d: event at %s of transaction %d seen %d times by a read_committed reader, want once", seed, l, i, seen[l])
			}
			st.events++
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.violations) > 0 {
		t.Fatalf("seed %d: %s", seed, k.violations[0])
	}
	st.commits, st.aborts, st.failures = k.commits, k.aborts, k.failures
	return st
}
