package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/walrelay/walrelay/checkpoint"
	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/replication"
	"github.com/walrelay/walrelay/sink"
)

// FencedError stops a relay whose transactional producer another instance
// fenced: that instance owns the slot now.
type FencedError struct{ Err error }

func (e *FencedError) Error() string {
	return "exactly-once: this walrelay was fenced by another instance with the same transactional id (it took over the slot); stopping: " + e.Err.Error()
}
func (e *FencedError) Unwrap() error { return e.Err }

// fencedRetry ends a session whose producer was fenced. Fencing means that
// another instance took over only if that instance now holds the slot: the
// relay reconnects, and stops with the FencedError if the slot is in use
// (txnProducer.stopIfFenced); if it gets the slot, the epoch was only stale
// and initSession starts a new producer.
type fencedRetry struct{ fe *FencedError }

func (e *fencedRetry) Error() string {
	return "exactly-once: producer fenced; checking whether another instance holds the slot: " + e.fe.Err.Error()
}

// eosRestartError ends a session in exactly-once mode after the Kafka
// transaction was aborted (a record failed, or the commit did): the relay
// reconnects and restarts from the slot and the last committed checkpoint.
type eosRestartError struct{ err error }

func (e *eosRestartError) Error() string {
	return "exactly-once: restarting from the last committed checkpoint: " + e.err.Error()
}
func (e *eosRestartError) Unwrap() error { return e.err }

// eosSink is the sink calls the exactly-once producer makes.
type eosSink interface {
	producer
	Flush(ctx context.Context) error
	InitProducer(ctx context.Context) error
	ResetProducer() error
	BeginTxn() error
	EndTxn(ctx context.Context, commit bool) error
	EnsureCheckpointTopic(ctx context.Context, topic string, rf int16) error
	ReadCheckpoint(ctx context.Context, topic, key string) (sink.Checkpoint, bool, error)
}

// txnBatch is one Kafka transaction: the done callbacks of its acknowledged
// records run only once it committed, so the tracker's watermark moves only
// then. A transaction in which a record failed is never committed.
type txnBatch struct {
	mu      sync.Mutex
	pending []func(error)
	failed  error // the first record failure
}

func (b *txnBatch) failure() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.failed
}

// txnProducer is the pipeline's producer in exactly-once mode. Send, commit
// and the session hooks run on the pipeline's goroutine (or between
// sessions); record callbacks run on franz-go's.
type txnProducer struct {
	sink        eosSink
	obs         Observer
	log         *slog.Logger
	topic       string // checkpoint topic
	rf          int16
	slot        string
	interval    time.Duration
	maxRecords  int
	maxInFlight int
	produceCtx  context.Context
	timeout     time.Duration // bounds ending a transaction

	txnID      string                       // transactional.id, for messages
	slotStart  pglogrepl.LSN                // the slot's position at session start
	key        string                       // checkpoint key of the cluster and slot
	timeline   int32                        // the session's timeline, stored with each checkpoint
	history    []replication.TimelineSwitch // the timeline's ancestors
	walEnd     pglogrepl.LSN                // the server's WAL end at session start (0: unknown)
	checkpoint pglogrepl.LSN                // what the last committed checkpoint covers of this history
	created    bool                         // checkpoint topic ensured
	needReset  bool                         // franz-go's client may still be in a transaction: replace it
	release    func()                       // ends the session's failure context

	batch   *txnBatch // open Kafka transaction, nil if none
	records int       // records in batch
	units   int       // tracker units batch holds (transactions + records)
	lastEnd pglogrepl.LSN
	wakeT   *time.Timer   // see wake
	opened  time.Time     // when batch began
	lastDur time.Duration // how long the last commit took
	fenced  *FencedError  // the last session ended fenced (see fencedRetry)
	skipped int           // events skipped this session (covered by the checkpoint)
	overdue bool          // the interval passed inside a Postgres transaction

	// A Postgres transaction too large to share a Kafka transaction with
	// the ones before it (see reserve) gets one of its own: the session
	// restarts, and the open Kafka transaction is committed when its Begin
	// is read again.
	curCommit    pglogrepl.LSN // commit LSN of the Postgres transaction being read
	earlier      int           // units of earlier Postgres transactions in the open Kafka transaction at its Begin
	commitBefore pglogrepl.LSN // commit LSN of the transaction that needs a Kafka transaction of its own
}

func newTxnProducer(opts Options, s eosSink, produceCtx context.Context, obs Observer, log *slog.Logger) *txnProducer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	x := opts.ExactlyOnce
	return &txnProducer{sink: s, log: log, topic: x.CheckpointTopic, rf: x.CheckpointReplicationFactor,
		slot: opts.Replication.Slot, interval: x.CommitInterval, maxRecords: x.MaxRecords, maxInFlight: opts.trackerCap(),
		produceCtx: produceCtx, timeout: opts.KafkaTimeout, wakeT: t, txnID: x.TransactionalID, obs: obs}
}

// startSession (mode) reads the timeline's history from conn and starts a
// session with a tracker of its own (newSession) and a failure context of
// its own: a failed Kafka transaction ends this session only.
func (t *txnProducer) startSession(ctx context.Context, conn *replication.Conn) (session, error) {
	hist, err := conn.History(ctx)
	if err != nil {
		return session{}, err
	}
	t.walEnd = conn.WALEnd
	tr, err := t.newSession(conn.System, conn.Start, hist)
	if err != nil {
		return session{}, err
	}
	failed, fail := context.WithCancelCause(context.Background())
	t.release = func() { fail(nil) }
	return session{delivery: t, tr: tr, failed: failed, fail: fail}, nil
}

// stopIfFenced (mode) returns the FencedError that ended the last session
// when err says that another process holds the slot.
func (t *txnProducer) stopIfFenced(err error) error {
	if t.fenced == nil || !errors.Is(err, replication.ErrSlotInUse) {
		return nil
	}
	return t.fenced
}

// open (delivery) is initSession.
func (t *txnProducer) open(ctx context.Context) error { return t.initSession(ctx) }

// event (delivery) counts a skipped event, and reserves room for one to
// produce.
func (t *txnProducer) event(skipped bool) error {
	if skipped {
		t.skipped++
		return nil
	}
	return t.reserve()
}

// ready (delivery) is idleCommitAllowed; idle commits.
func (t *txnProducer) ready() bool                    { return t.idleCommitAllowed() }
func (t *txnProducer) idle(ctx context.Context) error { return t.commit(ctx) }

// wake (delivery) fires when the open Kafka transaction reaches the commit
// interval, or, earlier, when an idle commit becomes allowed (the loop then
// sees ready). Nothing to wait for: nil.
func (t *txnProducer) wake() <-chan time.Time {
	if t.batch == nil || t.overdue {
		return nil
	}
	at := t.opened.Add(t.interval)
	if idleAt := t.opened.Add(t.lastDur); t.records > 0 && idleAt.Before(at) {
		at = idleAt
	}
	t.wakeT.Reset(time.Until(at))
	return t.wakeT.C
}

// woken (delivery): once the commit interval passed, the open Kafka
// transaction is committed, at once between Postgres transactions, else at
// the end of the one being read.
func (t *txnProducer) woken(ctx context.Context, inTxn bool) error {
	if t.batch == nil || time.Since(t.opened) < t.interval {
		return nil
	}
	if inTxn {
		t.overdue = true
		return nil
	}
	return t.commit(ctx)
}

// newSession returns a tracker that starts at the slot's position: anything
// an aborted transaction acknowledged is read again from the slot. It does not
// touch Kafka: a session that finds the slot held by another instance
// (standby) must not fence that instance's producer.
func (t *txnProducer) newSession(system replication.Identity, start pglogrepl.LSN, history []replication.TimelineSwitch) (*checkpoint.Tracker, error) {
	tr, err := checkpoint.New(checkpoint.Config{MaxInFlight: t.maxInFlight}, start)
	if err != nil {
		return nil, err
	}
	t.key = sink.CheckpointKey(system.SystemID, t.slot)
	t.timeline, t.history = system.Timeline, history
	t.slotStart = start
	t.skipped = 0
	return tr, nil
}

// initSession runs once the slot streams to this process (its first batch),
// before any message is handled: it fences any older producer of the
// transactional id (finishing its transaction), then reads the last
// committed checkpoint of the slot.
func (t *txnProducer) initSession(ctx context.Context) error {
	kctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	err := t.sink.InitProducer(kctx)
	if err != nil && sink.IsFenced(err) {
		// This process holds the slot, so no other instance streams it: the
		// producer's epoch is stale (an end of transaction whose answer was
		// lost with a broker). A new client takes a new epoch, fencing any
		// other producer of the id, as a restarted process would.
		t.log.Warn("exactly-once: the kafka producer epoch is stale; starting a new producer (this process holds the slot)",
			"slot", t.slot, "error", err.Error())
		if err = t.sink.ResetProducer(); err != nil {
			return err
		}
		if err = t.sink.InitProducer(kctx); err != nil && sink.IsFenced(err) {
			// A new producer refused too: not a takeover (this process holds
			// the slot) but, e.g., the transactional id not authorized.
			return fmt.Errorf("exactly-once: cannot initialise the transactional producer %q: %w", t.txnID, err)
		}
	}
	if err != nil {
		if sink.IsFenced(err) {
			return &FencedError{err}
		}
		return &eosRestartError{err}
	}
	ensured := false
	if !t.created {
		if err := t.sink.EnsureCheckpointTopic(kctx, t.topic, t.rf); err != nil {
			return &eosRestartError{err}
		}
		t.created, ensured = true, true
	}
	cp, ok, err := t.sink.ReadCheckpoint(kctx, t.topic, t.key)
	// A topic just created is not known to every broker at once: wait for it
	// quietly rather than restart the session with a warning each time.
	for wait := 50 * time.Millisecond; ensured && errors.Is(err, kerr.UnknownTopicOrPartition) && kctx.Err() == nil; wait = min(2*wait, time.Second) {
		select {
		case <-kctx.Done():
		case <-time.After(wait):
			cp, ok, err = t.sink.ReadCheckpoint(kctx, t.topic, t.key)
		}
	}
	var fe *sink.CheckpointFormatError
	if errors.As(err, &fe) {
		return fmt.Errorf("exactly-once: %w (walrelay cannot tell what was delivered; delete that record only if you know)", err)
	}
	if err != nil {
		return &eosRestartError{err}
	}
	t.checkpoint = 0
	why := "no checkpoint"
	if ok {
		t.checkpoint, why = covered(cp, t.timeline, t.history, t.walEnd)
	}
	t.fenced = nil // this process holds the slot and a current epoch
	args := []any{"slot", t.slot, "topic", t.topic, "key", t.key, "lsn", t.checkpoint.String(), "found", ok,
		"timeline", t.timeline, "slot_lsn", t.slotStart.String()}
	if ok && t.checkpoint != cp.LSN {
		t.log.Warn("exactly-once: the last committed checkpoint belongs to another WAL history; it skips only what this history shares with it",
			append(args, "checkpoint", cp.String(), "why", why)...)
		return nil
	}
	t.log.Info("exactly-once: last committed checkpoint", args...)
	return nil
}

// covered returns how far checkpoint cp covers the WAL of a server on
// timeline cur whose ancestors are history and whose WAL ends at walEnd (0:
// unknown): all of cp on cur itself; on an ancestor, no further than where
// the history left it (positions past that fork were never this server's);
// nothing on a timeline outside the history (another branch of a restore),
// nor past walEnd (a server restored from a copy, on the same timeline, that
// never wrote that far). A checkpoint without a timeline (an older
// release's) is taken as it is on timeline 1, the only history a server that
// never forked has, and covers nothing elsewhere. What is not covered is sent
// again (duplicates, never a loss). why says what was decided when the
// result is not cp.LSN.
func covered(cp sink.Checkpoint, cur int32, history []replication.TimelineSwitch, walEnd pglogrepl.LSN) (lsn pglogrepl.LSN, why string) {
	if walEnd != 0 && cp.LSN > walEnd {
		return 0, fmt.Sprintf("the server's WAL ends at %s, before the checkpoint: it was restored from a copy taken earlier", walEnd)
	}
	switch {
	case cp.Timeline == cur, cp.Timeline == 0 && cur == 1:
		return cp.LSN, ""
	case cp.Timeline == 0:
		return 0, fmt.Sprintf("the checkpoint has no timeline (written by an older release) and the server is on timeline %d", cur)
	}
	for _, h := range history {
		if h.Timeline == cp.Timeline {
			if cp.LSN <= h.Switch {
				return cp.LSN, ""
			}
			return h.Switch, fmt.Sprintf("timeline %d forked from timeline %d at %s", cur, h.Timeline, h.Switch)
		}
	}
	return 0, fmt.Sprintf("timeline %d is not in the history of timeline %d", cp.Timeline, cur)
}

// skip reports whether the transaction whose commit record is at commitLSN
// is covered by the checkpoint (its end LSN is at or below it: a
// transaction's commit record starts before its end, and a later
// transaction's commit record starts at or after that end).
func (t *txnProducer) skip(commitLSN pglogrepl.LSN) bool {
	return commitLSN < t.checkpoint
}

// begin (delivery) is called with each Postgres transaction's Begin, at a
// boundary between transactions (commitLSN: its commit record). It commits
// the open Kafka transaction first when this Postgres transaction needs one
// of its own (see reserve), and counts the transaction's tracker unit; skip
// says the checkpoint covers the transaction.
func (t *txnProducer) begin(ctx context.Context, commitLSN pglogrepl.LSN) (skip bool, err error) {
	if commitLSN == t.commitBefore && t.batch != nil {
		if err := t.commit(ctx); err != nil {
			return false, err
		}
	}
	t.curCommit, t.earlier = commitLSN, 0
	if t.batch != nil {
		t.earlier = t.units
		t.units++
	}
	return t.skip(commitLSN), nil
}

// maxTxnEvents is the most events one Postgres transaction may hold in
// exactly-once mode: the tracker's cap less its own unit and reserve's margin.
func (t *txnProducer) maxTxnEvents() int { return t.maxInFlight - 3 }

// reserve checks that one more record fits in the tracker while the open
// Kafka transaction waits for its commit: acknowledgements return units only
// at commit. A Postgres transaction that does not fit beside the earlier
// ones of the open Kafka transaction restarts the session, and gets a Kafka
// transaction of its own when read again; one that cannot fit even alone
// (more than maxTxnEvents) cannot be delivered.
func (t *txnProducer) reserve() error {
	if t.units+2 < t.maxInFlight {
		return nil
	}
	if t.earlier > 0 {
		t.commitBefore = t.curCommit
		return &eosRestartError{fmt.Errorf("the Postgres transaction with commit %s does not fit beside the earlier ones in the open kafka transaction; it gets one of its own", t.curCommit)}
	}
	return &fieldsError{fmt.Errorf("exactly-once: a Postgres transaction (commit %s) has more than %d events, the most one Kafka transaction can hold (the in-flight cap plus twice the exactly-once transaction size, less 3); raise the exactly-once transaction size or the in-flight cap",
		t.curCommit, t.maxTxnEvents()), []string{"relay.Options.ExactlyOnce.MaxRecords", "relay.Options.MaxInFlight"}}
}

// Prepare, PrepareDeadLetter and Topic are the sink's.
func (t *txnProducer) Prepare(ctx context.Context, ev *decoder.Event) (sink.Record, error) {
	return t.sink.Prepare(ctx, ev)
}

func (t *txnProducer) PrepareDeadLetter(ctx context.Context, ev *decoder.Event, intended, reason string, cause error) (sink.Record, error) {
	return t.sink.PrepareDeadLetter(ctx, ev, intended, reason, cause)
}

func (t *txnProducer) Topic(ev *decoder.Event) (string, error) { return t.sink.Topic(ev) }

// Send produces r in the open Kafka transaction, beginning one if none is
// open. done runs with nil only after that transaction committed.
func (t *txnProducer) Send(ctx context.Context, r sink.Record, done func(error)) {
	if t.batch == nil {
		if err := t.sink.BeginTxn(); err != nil {
			t.needReset = true // franz-go's client is still in an earlier transaction
			done(&eosRestartError{fmt.Errorf("begin: %w", err)})
			return
		}
		t.batch = &txnBatch{}
		t.records, t.units = 0, 1 // the open Postgres transaction
		t.opened = time.Now()
	}
	t.records++
	t.units++
	b := t.batch
	t.sink.Send(ctx, r, func(err error) {
		if err != nil {
			b.mu.Lock()
			if b.failed == nil {
				b.failed = err
			}
			b.mu.Unlock()
			done(t.wrap(err))
			return
		}
		b.mu.Lock()
		b.pending = append(b.pending, done)
		b.mu.Unlock()
	})
}

// wrap classifies a record failure: fenced (stop), cured by aborting and
// restarting from the checkpoint, or permanent (stop with the error, as in
// at-least-once mode; the session's end aborts the transaction).
func (t *txnProducer) wrap(err error) error {
	if sink.IsFenced(err) {
		return &FencedError{err}
	}
	if sink.IsTxnAbortable(err) {
		return &eosRestartError{err}
	}
	return err
}

// idleCommitAllowed reports whether the open Kafka transaction may be
// committed as soon as the stream is idle (the pipeline commits it then,
// between Postgres transactions): it holds a record and has been open at
// least as long as the last commit took, so that commits cost at most about
// half of the time under load, and a quiet stream's events wait about two
// commits, not the commit interval.
func (t *txnProducer) idleCommitAllowed() bool {
	return t.batch != nil && t.records > 0 && time.Since(t.opened) >= t.lastDur
}

// end (delivery) is called after each Postgres transaction (end: its end
// LSN): the open Kafka transaction is committed when it is old or large
// enough.
func (t *txnProducer) end(ctx context.Context, end pglogrepl.LSN) error {
	t.lastEnd = end
	if t.batch == nil {
		return nil
	}
	if t.overdue || t.records >= t.maxRecords || t.units >= t.maxInFlight/2 {
		return t.commit(ctx)
	}
	return nil
}

// commit produces the checkpoint (the end LSN of the last Postgres
// transaction in the batch), flushes and commits the Kafka transaction, then
// acknowledges its records to the tracker. A transaction in which a record
// failed is not committed: commit returns that failure (classified as by
// wrap) and the session's end aborts it. Call it at a Postgres transaction
// boundary only.
func (t *txnProducer) commit(ctx context.Context) error {
	began := time.Now()
	t.wakeT.Stop()
	t.overdue = false
	b := t.batch
	if b == nil {
		return nil
	}
	if err := b.failure(); err != nil {
		return t.wrap(err)
	}
	var cpErr error
	var cpMu sync.Mutex
	t.sink.Send(t.produceCtx, sink.CheckpointRecord(t.topic, t.key, sink.Checkpoint{LSN: t.lastEnd, Timeline: t.timeline}), func(err error) {
		cpMu.Lock()
		cpErr = err
		cpMu.Unlock()
	})
	flushErr := t.sink.Flush(ctx)
	// Every record's answer came before Flush returned, unless ctx ended
	// first; a failure that ended it is in the batch by then.
	if err := b.failure(); err != nil {
		return t.wrap(err)
	}
	if flushErr != nil {
		return flushErr // shutting down: the session's end aborts the transaction
	}
	cpMu.Lock()
	err := cpErr
	cpMu.Unlock()
	if err != nil {
		return t.wrap(err)
	}
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.timeout)
	defer cancel()
	if err := t.sink.EndTxn(ectx, true); err != nil {
		// Not committed, or the outcome is unknown: the session's end
		// aborts, and the next session reads the checkpoint that is.
		if sink.IsFenced(err) {
			return &FencedError{err}
		}
		return &eosRestartError{fmt.Errorf("commit: %w", err)}
	}
	t.batch = nil
	t.records, t.units = 0, 0
	t.lastDur = min(time.Since(began), t.interval)
	t.obs.TxnCommitted(time.Since(began))
	b.mu.Lock()
	pending := b.pending
	b.pending = nil
	b.mu.Unlock()
	for _, done := range pending {
		done(nil)
	}
	return nil
}

// endSession (mode) ends the session with finish; a session that ended
// fenced is retried once to tell a takeover from a stale epoch (see
// fencedRetry).
func (t *txnProducer) endSession(err error) error {
	if t.release != nil {
		t.release()
		t.release = nil
	}
	err = t.finish(err)
	var fe *FencedError
	if errors.As(err, &fe) {
		t.fenced = fe
		return &fencedRetry{fe}
	}
	return err
}

// finish aborts a Kafka transaction left open by the session (its
// records are read again from the slot), once both of the session's
// goroutines returned. An abort that fails (its attempts time out, or the
// client is stuck in a transaction) gets a new producer: its initialisation
// in the next session fences the old one and aborts whatever it left open
// on the broker. walrelay stops only when that fails too, or err is
// permanent; a retriable err (or the failed end) restarts the session.
func (t *txnProducer) finish(err error) error {
	t.wakeT.Stop()
	t.overdue = false
	if t.skipped > 0 {
		t.obs.EventsSkipped(t.skipped)
		t.log.Info("exactly-once: skipped events already committed to kafka", "slot", t.slot, "events", t.skipped, "lsn", t.checkpoint.String())
	}
	var aerr error
	aborted := false
	if t.batch != nil {
		t.batch = nil
		t.records, t.units = 0, 0
		for attempt := 0; attempt < 3; attempt++ {
			ctx, cancel := context.WithTimeout(context.Background(), t.timeout)
			aerr = t.sink.EndTxn(ctx, false)
			cancel()
			if aerr == nil {
				t.obs.TxnAborted()
				aborted = true
				break
			}
			if sink.IsFenced(aerr) {
				return &FencedError{aerr}
			}
		}
		if aerr != nil {
			t.needReset = true
		}
	}
	var fe *FencedError
	if errors.As(err, &fe) {
		return err
	}
	if t.needReset {
		cause := aerr
		if cause == nil {
			cause = err
		}
		if rerr := t.sink.ResetProducer(); rerr != nil {
			return fmt.Errorf("exactly-once: cannot end the kafka transaction (%v) nor start a new producer: %w", cause, rerr)
		}
		t.needReset = false
		t.log.Warn("exactly-once: the kafka transaction could not be ended; a new producer fences the old one and aborts it", "slot", t.slot, "error", cause.Error())
		if err == nil || !reconnectable(err) {
			return err // a shutdown, or a permanent failure: walrelay stops with it
		}
		return &eosRestartError{fmt.Errorf("end the kafka transaction: %w", cause)}
	}
	if aborted && err != nil {
		t.log.Warn("exactly-once: kafka transaction aborted", "slot", t.slot, "error", err.Error())
	}
	return err
}
