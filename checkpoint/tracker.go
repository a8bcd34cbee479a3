package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
)

// DefaultMaxInFlight is the default cap on tracked units.
const DefaultMaxInFlight = 10000

// ErrNoOpenTxn is returned by Add and Commit when no transaction is open.
var ErrNoOpenTxn = errors.New("checkpoint: no open transaction")

// ErrTxnOpen is returned by Begin when the previous transaction is still open.
var ErrTxnOpen = errors.New("checkpoint: transaction already open")

// Config configures a Tracker.
type Config struct {
	// MaxInFlight caps the units held at once: one per transaction not yet
	// released and one per unacknowledged record. Must be at least 2.
	// Default DefaultMaxInFlight.
	MaxInFlight int
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.MaxInFlight < 2 {
		return fmt.Errorf("checkpoint: max in-flight must be at least 2, got %d", c.MaxInFlight)
	}
	return nil
}

type txn struct {
	end     pglogrepl.LSN
	at      time.Time // commit time, zero when not given
	pending int       // records added and not yet acknowledged
	closed  bool      // commit read (or transaction abandoned)
	aborted bool      // abandoned: never moves the watermark
}

// Tracker tracks transactions and their unacknowledged records. Begin, Add,
// Commit and Abort are called by one reader goroutine in stream order; Ack.Done
// and the query methods are safe to call concurrently from any goroutine.
type Tracker struct {
	sem chan struct{} // one token per held unit

	mu        sync.Mutex
	queue     []*txn // unreleased transactions in stream order
	open      *txn
	inFlight  int
	watermark pglogrepl.LSN
	last      pglogrepl.LSN // end of the last transaction released
	lastAt    time.Time     // its commit time
}

// New returns a Tracker whose watermark starts at start (the slot's
// confirmed position; zero when unknown).
func New(cfg Config, start pglogrepl.LSN) (*Tracker, error) {
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Tracker{
		sem:       make(chan struct{}, cfg.MaxInFlight),
		watermark: start,
	}, nil
}

func (t *Tracker) acquire(ctx context.Context) error {
	select {
	case t.sem <- struct{}{}:
		return nil
	default:
	}
	select {
	case t.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Begin opens a transaction. It blocks while the cap is reached, until a unit
// frees or ctx is done.
func (t *Tracker) Begin(ctx context.Context) error {
	t.mu.Lock()
	isOpen := t.open != nil
	t.mu.Unlock()
	if isOpen {
		return ErrTxnOpen
	}
	if err := t.acquire(ctx); err != nil {
		return err
	}
	x := &txn{}
	t.mu.Lock()
	t.open = x
	t.queue = append(t.queue, x)
	t.mu.Unlock()
	return nil
}

// Ack acknowledges one record. Its zero value is not usable.
type Ack struct {
	t *Tracker
	x *txn
}

// Done marks the record as durably handled (acknowledged by Kafka or
// dead-lettered). Call it exactly once, and never for a record that failed.
// Safe to call from any goroutine.
func (a Ack) Done() {
	t := a.t
	t.mu.Lock()
	a.x.pending--
	t.inFlight--
	released := t.releaseLocked()
	t.mu.Unlock()
	t.release(released + 1)
}

// Add registers one record of the open transaction and returns the Ack to
// call once Kafka acknowledged it. It blocks while the cap is reached.
func (t *Tracker) Add(ctx context.Context) (Ack, error) {
	t.mu.Lock()
	x := t.open
	t.mu.Unlock()
	if x == nil {
		return Ack{}, ErrNoOpenTxn
	}
	if err := t.acquire(ctx); err != nil {
		return Ack{}, err
	}
	t.mu.Lock()
	x.pending++
	t.inFlight++
	t.mu.Unlock()
	return Ack{t: t, x: x}, nil
}

// Commit closes the open transaction; end is its TransactionEndLSN. The
// watermark reaches end once this and every earlier transaction are fully
// acknowledged.
func (t *Tracker) Commit(end pglogrepl.LSN) error {
	return t.close(end, time.Time{}, false)
}

// CommitAt is Commit with the transaction's commit time, which Delivered
// reports once the transaction is released.
func (t *Tracker) CommitAt(end pglogrepl.LSN, at time.Time) error {
	return t.close(end, at, false)
}

// Delivered returns the end LSN and commit time of the last transaction
// fully acknowledged (released) in stream order, zero when none was; what
// an operator needs to recover from the outbox table after a lost slot.
// Safe to call concurrently.
func (t *Tracker) Delivered() (pglogrepl.LSN, time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last, t.lastAt
}

// Abort abandons the open transaction, if any (the stream broke before its
// commit). Its records may still be acknowledged, but it never moves the
// watermark; the transaction is read again after reconnecting.
func (t *Tracker) Abort() {
	_ = t.close(0, time.Time{}, true)
}

func (t *Tracker) close(end pglogrepl.LSN, at time.Time, aborted bool) error {
	t.mu.Lock()
	x := t.open
	if x == nil {
		t.mu.Unlock()
		if aborted {
			return nil
		}
		return ErrNoOpenTxn
	}
	x.end, x.at, x.closed, x.aborted = end, at, true, aborted
	t.open = nil
	released := t.releaseLocked()
	t.mu.Unlock()
	t.release(released)
	return nil
}

// releaseLocked pops fully acknowledged transactions from the front of the
// queue, raising the watermark. It returns how many were popped; their units
// must be returned with release after unlocking.
func (t *Tracker) releaseLocked() int {
	n := 0
	for len(t.queue) > 0 {
		x := t.queue[0]
		if !x.closed || x.pending > 0 {
			break
		}
		t.queue[0] = nil
		t.queue = t.queue[1:]
		n++
		if !x.aborted && x.end > t.watermark {
			t.watermark = x.end
		}
		if !x.aborted && x.end > t.last {
			t.last, t.lastAt = x.end, x.at
		}
	}
	return n
}

func (t *Tracker) release(n int) {
	for i := 0; i < n; i++ {
		<-t.sem
	}
}

// AdvanceIdle raises the watermark to lsn (a keepalive's ServerWALEnd) when
// nothing is tracked: no transaction open, none waiting for acks, no record
// in flight. It reports whether the tracker was idle. The caller must only
// pass a position the stream has delivered everything up to, and must have
// handed every message received before it to the Tracker.
func (t *Tracker) AdvanceIdle(lsn pglogrepl.LSN) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.open != nil || len(t.queue) > 0 || t.inFlight > 0 {
		return false
	}
	if lsn > t.watermark {
		t.watermark = lsn
	}
	return true
}

// Watermark returns the highest LSN that is safe to confirm. Safe to call
// concurrently.
func (t *Tracker) Watermark() pglogrepl.LSN {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.watermark
}

// InFlight returns the number of records not yet acknowledged.
func (t *Tracker) InFlight() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.inFlight
}

// pending returns the number of transactions tracked and not yet released
// (including an open one); the tests check it drains.
func (t *Tracker) pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.queue)
}
