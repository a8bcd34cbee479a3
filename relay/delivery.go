package relay

import (
	"context"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walrelay/walrelay/checkpoint"
	"github.com/walrelay/walrelay/replication"
)

// A delivery mode decides when the positions of delivered events may be
// confirmed. at-least-once (this file) confirms a Postgres transaction once
// Kafka acknowledged each of its records; exactly-once (eos.go) produces
// whole Postgres transactions in Kafka transactions with a checkpoint record
// and confirms them once the Kafka transaction committed. The pipeline and
// the reconnect loop only see these two interfaces.

// delivery is a session's half of a delivery mode: the pipeline produces
// through it, and calls its hooks in stream order from its one goroutine.
type delivery interface {
	producer
	// open is called with the first batch the session receives: the slot
	// now streams to this process (a standby never gets here).
	open(ctx context.Context) error
	// begin is called with each Postgres transaction's Begin (commitLSN:
	// its commit record), between transactions. skip reports that its
	// events were delivered before: the pipeline reads past them.
	begin(ctx context.Context, commitLSN pglogrepl.LSN) (skip bool, err error)
	// event is called before each event of the open transaction is
	// produced, or with skipped true for one that is read past.
	event(skipped bool) error
	// end is called after each Postgres transaction's commit (end: its end
	// LSN), once the tracker has it.
	end(ctx context.Context, end pglogrepl.LSN) error
	// ready reports that the mode acts (idle) as soon as the stream has
	// nothing buffered between transactions.
	ready() bool
	idle(ctx context.Context) error
	// wake returns a channel that fires when the mode wants woken called,
	// or nil; inTxn tells woken whether the stream is inside a transaction.
	wake() <-chan time.Time
	woken(ctx context.Context, inTxn bool) error
}

// mode is a delivery mode's half in the reconnect loop.
type mode interface {
	// startSession returns what a new session over conn delivers with: the
	// delivery, the tracker of the positions it may confirm, and the
	// context its records' failures cancel (with fail).
	startSession(ctx context.Context, conn *replication.Conn) (session, error)
	// endSession is called with what ended the session once both of its
	// goroutines returned, and returns what the loop acts on.
	endSession(err error) error
	// stopIfFenced returns the error walrelay stops with when err (a
	// session's or a reconnect's) shows that another instance took over.
	stopIfFenced(err error) error
}

// session is what one replication session delivers with.
type session struct {
	delivery delivery
	tr       *checkpoint.Tracker
	failed   context.Context
	fail     context.CancelCauseFunc
}

// atLeastOnce is the at-least-once mode: records go to Kafka as they come,
// and a transaction is confirmed once each of its records was acknowledged.
// Its tracker and failure context are the runner's, and outlive a session:
// records of a session may still be acknowledged, or fail, after it ended.
type atLeastOnce struct {
	producer
	r *runner
}

func (a *atLeastOnce) startSession(context.Context, *replication.Conn) (session, error) {
	return session{delivery: a, tr: a.r.tr, failed: a.r.failed, fail: a.r.fail}, nil
}
func (a *atLeastOnce) endSession(err error) error        { return err }
func (a *atLeastOnce) stopIfFenced(error) error          { return nil }
func (a *atLeastOnce) open(context.Context) error        { return nil }
func (a *atLeastOnce) event(bool) error                  { return nil }
func (a *atLeastOnce) ready() bool                       { return false }
func (a *atLeastOnce) idle(context.Context) error        { return nil }
func (a *atLeastOnce) wake() <-chan time.Time            { return nil }
func (a *atLeastOnce) woken(context.Context, bool) error { return nil }
func (a *atLeastOnce) begin(context.Context, pglogrepl.LSN) (bool, error) {
	return false, nil
}
func (a *atLeastOnce) end(context.Context, pglogrepl.LSN) error { return nil }
