package operator

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/walrelay/walrelay/sink"
)

// rowWindow holds the rows a replay sent and Kafka has not acknowledged
// yet, in cursor order, and blocks at its capacity (the replay's
// backpressure, as the checkpoint tracker's cap is the relay's). Its
// acknowledged prefix is where a replay resumes. add is called by the one
// reading goroutine; ack from any.
type rowWindow struct {
	sem chan struct{} // one token per row in the window

	mu    sync.Mutex
	keys  []string // order value of each row, indexed by seq modulo capacity
	acked []bool
	head  int64  // first row not acknowledged
	next  int64  // next row's seq
	last  string // order value of the last row of the acknowledged prefix
	any   bool   // the prefix holds a row
}

func newRowWindow(capacity int) *rowWindow {
	return &rowWindow{sem: make(chan struct{}, capacity), keys: make([]string, capacity), acked: make([]bool, capacity)}
}

// add enters a row with order value key and returns its seq, waiting while
// the window is full, until ctx ends.
func (w *rowWindow) add(ctx context.Context, key string) (int64, error) {
	select {
	case w.sem <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	seq := w.next
	i := seq % int64(len(w.keys))
	w.keys[i], w.acked[i] = key, false
	w.next++
	return seq, nil
}

// ack records the acknowledgement of row seq.
func (w *rowWindow) ack(seq int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := int64(len(w.keys))
	w.acked[seq%n] = true
	for w.head < w.next && w.acked[w.head%n] {
		w.last, w.any = w.keys[w.head%n], true
		w.head++
		<-w.sem
	}
}

// resumeFrom returns the order value a replay resumes at: the first row not
// acknowledged, or with every row sent acknowledged the last one (rows of
// the same value that were not read yet follow it); false when no row was
// sent. Rows of the same order value as the result are sent again.
func (w *rowWindow) resumeFrom() (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.head < w.next {
		return w.keys[w.head%int64(len(w.keys))], true
	}
	return w.last, w.any
}

// reset empties the window for the next table; every row must be
// acknowledged.
func (w *rowWindow) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last, w.any = "", false
}

// sender hands a replay's records to Kafka and acknowledges their rows in
// the window once they are delivered.
type sender interface {
	// send produces rec for row seq (deadLetter: it goes to the dead-letter
	// topic).
	send(ctx context.Context, rec sink.Record, seq int64, deadLetter bool) error
	// finish waits until everything sent is delivered (or failed), or ctx
	// ends.
	finish(ctx context.Context) error
}

// ackSender delivers at least once: a row counts once Kafka acknowledged
// its record.
type ackSender struct {
	s          replayProducer
	win        *rowWindow
	fail       context.CancelCauseFunc
	failed     context.Context
	produceCtx context.Context
	onAck      func(deadLetter bool)
}

func (a *ackSender) send(_ context.Context, rec sink.Record, seq int64, deadLetter bool) error {
	a.s.Send(a.produceCtx, rec, func(err error) {
		if err != nil {
			a.fail(err)
			return
		}
		a.onAck(deadLetter) // counted before the window moves past the row
		a.win.ack(seq)
	})
	return nil
}

func (a *ackSender) finish(ctx context.Context) error {
	err := a.s.Flush(ctx)
	if a.failed.Err() != nil {
		return context.Cause(a.failed)
	}
	if err != nil {
		return fmt.Errorf("wait for kafka's acknowledgements: %w", err)
	}
	return nil
}

// txnSender delivers exactly once: records go in Kafka transactions of the
// replay's own transactional id, and their rows count once the transaction
// committed. A transaction with a failed record is aborted.
//
// A transaction is committed once maxOpen passed since it began, by a timer
// when no row comes (the reader waits for --rate, or the cursor scans long
// between sparse matches): held open past the producer's transaction
// timeout, the broker would abort it and nothing would ever be
// acknowledged. A failure of the timer's commit fails the replay (fail).
type txnSender struct {
	s          replayProducer
	win        *rowWindow
	fail       context.CancelCauseFunc
	failed     context.Context
	produceCtx context.Context
	maxRecords int
	maxOpen    time.Duration // the commit interval, at most half the transaction timeout (commitAfter)
	timeout    time.Duration // bounds ending a transaction
	onAck      func(deadLetter bool)

	// mu guards the transaction between the reading goroutine (send,
	// finish) and the timer (commitDue).
	mu      sync.Mutex
	open    bool
	opened  time.Time
	gen     int // counts the transactions begun; the timer commits its own only
	timer   *time.Timer
	pending []pendingRow

	errMu    sync.Mutex
	batchErr error // the open transaction's first record failure
}

// commitAfter is how long a replay's Kafka transaction stays open at most:
// the commit interval, and at most half the producer's transaction timeout
// (0: none known), well before the broker aborts it.
func commitAfter(interval, txnTimeout time.Duration) time.Duration {
	if half := txnTimeout / 2; half > 0 && half < interval {
		return half
	}
	return interval
}

type pendingRow struct {
	seq        int64
	deadLetter bool
}

func (t *txnSender) send(ctx context.Context, rec sink.Record, seq int64, deadLetter bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.open {
		if err := t.s.BeginTxn(); err != nil {
			return fmt.Errorf("exactly-once replay: begin a kafka transaction: %w", err)
		}
		t.open, t.opened = true, time.Now()
		t.gen++
		gen := t.gen
		t.timer = time.AfterFunc(t.maxOpen, func() { t.commitDue(gen) })
		t.errMu.Lock()
		t.batchErr = nil
		t.errMu.Unlock()
	}
	t.s.Send(t.produceCtx, rec, func(err error) {
		if err == nil {
			return
		}
		t.errMu.Lock()
		if t.batchErr == nil {
			t.batchErr = err
		}
		t.errMu.Unlock()
		t.fail(err)
	})
	t.pending = append(t.pending, pendingRow{seq: seq, deadLetter: deadLetter})
	if len(t.pending) >= t.maxRecords || time.Since(t.opened) >= t.maxOpen {
		return t.commit(ctx)
	}
	return nil
}

func (t *txnSender) finish(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.commit(ctx); err != nil {
		return err
	}
	if t.failed.Err() != nil { // the timer's commit failed
		return context.Cause(t.failed)
	}
	return nil
}

// commitDue is the timer's commit of transaction gen, should it still be
// open: the reader is waiting (rate, a long scan). Its flush is bounded by
// the Kafka timeout, not by the replay's context: a replay interrupted now
// still commits what it sent. A failure fails the replay.
func (t *txnSender) commitDue(gen int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.open || t.gen != gen {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), t.timeout)
	defer cancel()
	if err := t.commit(ctx); err != nil {
		t.fail(err)
	}
}

// commit flushes and commits the open transaction, then acknowledges its
// rows; a transaction with a failure (or that cannot be flushed) is
// aborted instead. t.mu must be held.
func (t *txnSender) commit(ctx context.Context) error {
	if !t.open {
		return nil
	}
	t.timer.Stop()
	flushErr := t.s.Flush(ctx)
	t.errMu.Lock()
	err := t.batchErr
	t.errMu.Unlock()
	if err == nil && flushErr != nil {
		err = fmt.Errorf("wait for kafka's acknowledgements: %w", flushErr)
	}
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.timeout)
	defer cancel()
	t.open = false
	pending := t.pending
	t.pending = nil
	if err != nil {
		if aerr := t.s.EndTxn(ectx, false); aerr != nil {
			return fmt.Errorf("exactly-once replay: %w (and aborting the kafka transaction failed: %v)", err, aerr)
		}
		return fmt.Errorf("exactly-once replay: kafka transaction aborted: %w", err)
	}
	if err := t.s.EndTxn(ectx, true); err != nil {
		if sink.IsFenced(err) {
			return fmt.Errorf("exactly-once replay: another replay with the same transactional id took over: %w", err)
		}
		return fmt.Errorf("exactly-once replay: commit the kafka transaction: %w", err)
	}
	for _, p := range pending {
		t.onAck(p.deadLetter)
		t.win.ack(p.seq)
	}
	return nil
}
