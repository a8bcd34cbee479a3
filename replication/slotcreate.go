package replication

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
)

// Creating a logical slot waits until every transaction with a transaction
// id that runs when it starts has ended (on a standby, until the primary
// logs a standby snapshot after them): a session idle in transaction makes it
// wait for as long as it stays open. createSlot says what it waits for, every
// few seconds, and gives up after Config.SlotCreateTimeout with one error
// naming them.

// SlotWait is what a slot creation waits for, reported to
// Config.SlotCreateWait while it waits.
type SlotWait struct {
	Slot   string
	Waited time.Duration
	// Blockers are the open transactions with a transaction id (the oldest
	// first, at most ten), read on the server the slot is created on, or on
	// the primary (Config.PrimaryDSN) when that is a standby.
	Blockers []Session
	// Standby reports a creation on a standby: it also waits for the
	// primary to log a standby snapshot after the blockers end.
	Standby bool
	// Err is why the blockers could not be read; nil when they were.
	Err error
}

// String says in one line what the creation waits for.
func (w SlotWait) String() string {
	var b strings.Builder
	switch {
	case w.Err != nil:
		fmt.Fprintf(&b, "transactions running when it started (cannot list them: %v)", w.Err)
	case len(w.Blockers) == 0 && w.Standby:
		b.WriteString("a standby snapshot from the primary (no transaction open there now)")
	case len(w.Blockers) == 0:
		b.WriteString("transactions running when it started (none open now: it ends at once)")
	default:
		for i, s := range w.Blockers {
			if i > 0 {
				b.WriteString("; ")
			}
			b.WriteString(s.String())
		}
		if w.Standby {
			b.WriteString(" (on the primary; then a standby snapshot)")
		}
	}
	return b.String()
}

// slotWaitFirst and slotWaitEvery are when a waiting creation is reported:
// first after slotWaitFirst, then every slotWaitEvery.
const (
	slotWaitFirst = 2 * time.Second
	slotWaitEvery = 5 * time.Second
)

// createSlot runs create (the CREATE_REPLICATION_SLOT command on c's
// connection) while a watcher reports what it waits for and, past
// Config.SlotCreateTimeout, cancels it: the error is then a *PrereqError
// naming the blockers.
func (c *Conn) createSlot(ctx context.Context, create func(context.Context) (pglogrepl.CreateReplicationSlotResult, error)) (pglogrepl.CreateReplicationSlotResult, error) {
	wctx, stopWatch := context.WithCancel(ctx)
	w := &slotWatch{c: c, start: time.Now()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.run(wctx)
	}()
	res, err := create(ctx)
	stopWatch()
	<-done
	if err != nil && w.timedOut() {
		last := w.lastWait()
		return res, &PrereqError{Check: "slot",
			Problem: fmt.Sprintf("creating replication slot %q gave up after %s waiting for %s", c.cfg.Slot, c.cfg.SlotCreateTimeout, last),
			Fix:     "end those transactions (COMMIT or ROLLBACK them, or SELECT pg_terminate_backend(<pid>)) and start walrelay again, or allow the slot creation more time",
			Config:  []string{"SlotCreateTimeout"}, Err: err}
	}
	return res, err
}

// slotWatch reports a waiting slot creation and cancels it at the timeout.
type slotWatch struct {
	c     *Conn
	start time.Time

	mu       sync.Mutex
	last     SlotWait
	canceled bool // the timeout canceled the creation
}

// run reports until ctx ends (the creation returned) and cancels the
// creation at Config.SlotCreateTimeout.
func (w *slotWatch) run(ctx context.Context) {
	var deadline <-chan time.Time
	if t := w.c.cfg.SlotCreateTimeout; t > 0 {
		timer := time.NewTimer(t)
		defer timer.Stop()
		deadline = timer.C
	}
	next := time.NewTimer(slotWaitFirst)
	defer next.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-next.C:
			wait := w.readWait(ctx)
			if ctx.Err() != nil {
				return
			}
			if w.c.cfg.SlotCreateWait != nil {
				w.c.cfg.SlotCreateWait(wait)
			}
			next.Reset(slotWaitEvery)
		case <-deadline:
			w.readWait(ctx) // the give-up line names who blocks now
			w.mu.Lock()
			w.canceled = true
			w.mu.Unlock()
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = w.c.conn.CancelRequest(cctx)
			cancel()
			return
		}
	}
}

// readWait reads the blockers on an ordinary connection (to the primary when
// the slot is created on a standby and its DSN is known) and keeps them.
func (w *slotWatch) readWait(ctx context.Context) SlotWait {
	wait := SlotWait{Slot: w.c.cfg.Slot, Waited: time.Since(w.start), Standby: w.c.Standby}
	dsn := w.c.cfg.DSN
	if w.c.Standby {
		dsn = w.c.cfg.PrimaryDSN
	}
	if dsn != "" {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := Connect(cctx, dsn, w.c.cfg.PasswordSource)
		if err == nil {
			wait.Blockers, err = RunningTransactions(cctx, NewQuerier(conn))
			_ = conn.Close(context.Background())
		}
		wait.Err = err
		cancel()
	}
	w.mu.Lock()
	w.last = wait
	w.mu.Unlock()
	return wait
}

func (w *slotWatch) timedOut() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.canceled
}

func (w *slotWatch) lastWait() SlotWait {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}
