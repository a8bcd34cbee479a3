package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"

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
// (runner.stopIfFenced); if it gets the slot, the epoch was only stale and
// initSession starts a new producer.
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
	ReadCheckpoint(ctx context.Context, topic, key string) (pglogrepl.LSN, bool, error)
}

// txnBatch is one Kafka transaction: the done callbacks of its acknowledged
// records run only once it committed, so the tracker's watermark moves only
// then.
type txnBatch struct {
	mu      sync.Mutex
	pending []func(error)
}

// txnProducer is the pipeline's producer in exactly-once mode. Send, commit
// and the session hooks run on the pipeline's goroutine (or between
// sessions); record callbacks run on franz-go's.
type txnProducer struct {
	sink        eosSink
	m           *metrics
	log         *slog.Logger
	topic       string // checkpoint topic
	rf          int16
	slot        string
	interval    time.Duration
	maxRecords  int
	maxInFlight int
	produceCtx  context.Context
	timeout     time.Duration // bounds ending a transaction

	txnID      string        // transactional.id, for messages
	slotStart  pglogrepl.LSN // the slot's position at session start
	key        string        // checkpoint key of the current WAL history
	checkpoint pglogrepl.LSN // last committed checkpoint read at session start
	created    bool          // checkpoint topic ensured

	batch   *txnBatch // open Kafka transaction, nil if none
	records int       // records in batch
	units   int       // tracker units batch holds (transactions + records)
	lastEnd pglogrepl.LSN
	timer   *time.Timer
	opened  time.Time     // when batch began
	lastDur time.Duration // how long the last commit took
	idle    *time.Timer   // see idleCommitTimer
	fenced  *FencedError  // the last session ended fenced (see fencedRetry)
	skipped int           // events skipped this session (covered by the checkpoint)
	overdue bool          // the interval passed inside a Postgres transaction
}

func newTxnProducer(opts Options, s eosSink, produceCtx context.Context, m *metrics, log *slog.Logger) *txnProducer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	x := opts.ExactlyOnce
	return &txnProducer{sink: s, log: log, topic: x.CheckpointTopic, rf: x.CheckpointReplicationFactor,
		slot: opts.Replication.Slot, interval: x.CommitInterval, maxRecords: x.MaxRecords, maxInFlight: opts.trackerCap(),
		produceCtx: produceCtx, timeout: opts.KafkaTimeout, timer: t, txnID: x.TransactionalID, m: m}
}

// startSession returns a tracker that starts at the slot's position: anything
// an aborted transaction acknowledged is read again from the slot. It does not
// touch Kafka: a session that finds the slot held by another instance
// (standby) must not fence that instance's producer.
func (t *txnProducer) startSession(conn *replication.Conn) (*checkpoint.Tracker, error) {
	tr, err := checkpoint.New(checkpoint.Config{MaxInFlight: t.maxInFlight}, conn.Start)
	if err != nil {
		return nil, err
	}
	t.key = sink.CheckpointKey(conn.System.SystemID, t.slot)
	t.slotStart = conn.Start
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
	if !t.created {
		if err := t.sink.EnsureCheckpointTopic(kctx, t.topic, t.rf); err != nil {
			return &eosRestartError{err}
		}
		t.created = true
	}
	lsn, ok, err := t.sink.ReadCheckpoint(kctx, t.topic, t.key)
	if err != nil {
		return &eosRestartError{err}
	}
	t.checkpoint = 0
	if ok {
		t.checkpoint = lsn
	}
	t.fenced = nil // this process holds the slot and a current epoch
	t.log.Info("exactly-once: last committed checkpoint", "slot", t.slot, "topic", t.topic, "key", t.key,
		"lsn", t.checkpoint.String(), "found", ok, "slot_lsn", t.slotStart.String())
	return nil
}

// skip reports whether the transaction whose commit record is at commitLSN
// is covered by the checkpoint (its end LSN is at or below it: a
// transaction's commit record starts before its end, and a later
// transaction's commit record starts at or after that end).
func (t *txnProducer) skip(commitLSN pglogrepl.LSN) bool {
	return commitLSN < t.checkpoint
}

// begun counts the tracker unit of a transaction read while a Kafka
// transaction is open.
func (t *txnProducer) begun() {
	if t.batch != nil {
		t.units++
	}
}

// reserve checks that one more record fits in the tracker while the open
// transaction waits for its commit: acknowledgements return units only at
// commit, so a Postgres transaction larger than the cap cannot be delivered.
func (t *txnProducer) reserve() error {
	if t.units+2 >= t.maxInFlight {
		return fmt.Errorf("exactly-once: a Postgres transaction has more events than one Kafka transaction can hold (%d, --max-in-flight plus twice --txn-max-records); raise --txn-max-records or --max-in-flight", t.maxInFlight)
	}
	return nil
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
			done(&eosRestartError{err})
			return
		}
		t.batch = &txnBatch{}
		t.records, t.units = 0, 1 // the open Postgres transaction
		t.timer.Reset(t.interval)
		t.opened = time.Now()
	}
	t.records++
	t.units++
	b := t.batch
	t.sink.Send(ctx, r, func(err error) {
		if err != nil {
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

// idleCommitTimer returns a channel that fires when idleCommitAllowed will
// hold for the open Kafka transaction, or nil when there is nothing to wait
// for (no transaction with records, or it is allowed already).
func (t *txnProducer) idleCommitTimer() <-chan time.Time {
	if t.batch == nil || t.records == 0 {
		return nil
	}
	wait := t.lastDur - time.Since(t.opened)
	if wait <= 0 {
		return nil
	}
	if t.idle == nil {
		t.idle = time.NewTimer(wait)
	} else {
		t.idle.Reset(wait)
	}
	return t.idle.C
}

// due fires when the open Kafka transaction reached the commit interval.
func (t *txnProducer) due() <-chan time.Time { return t.timer.C }

// boundary is called after each Postgres transaction (end: its end LSN):
// the open Kafka transaction is committed when it is old or large enough.
func (t *txnProducer) boundary(ctx context.Context, end pglogrepl.LSN) error {
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
// acknowledges its records to the tracker. Call it at a Postgres transaction
// boundary only.
func (t *txnProducer) commit(ctx context.Context) error {
	began := time.Now()
	t.timer.Stop()
	t.overdue = false
	b := t.batch
	if b == nil {
		return nil
	}
	var cpErr error
	var cpMu sync.Mutex
	t.sink.Send(t.produceCtx, sink.CheckpointRecord(t.topic, t.key, t.lastEnd), func(err error) {
		cpMu.Lock()
		cpErr = err
		cpMu.Unlock()
	})
	if err := t.sink.Flush(ctx); err != nil {
		return err // shutting down: the session's end aborts the transaction
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
	t.m.txns.WithLabelValues("committed").Inc()
	t.m.txnCommitTime.Observe(time.Since(began).Seconds())
	b.mu.Lock()
	pending := b.pending
	b.pending = nil
	b.mu.Unlock()
	for _, done := range pending {
		done(nil)
	}
	return nil
}

// endSession aborts a Kafka transaction left open by the session (its
// records are read again from the slot). An abort that fails leaves the
// producer unusable: walrelay stops.
func (t *txnProducer) endSession(err error) error {
	t.timer.Stop()
	t.overdue = false
	if t.skipped > 0 {
		t.m.txnSkipped.Add(float64(t.skipped))
		t.log.Info("exactly-once: skipped events already committed to kafka", "slot", t.slot, "events", t.skipped, "lsn", t.checkpoint.String())
	}
	if t.batch == nil {
		return err
	}
	t.batch = nil
	t.records, t.units = 0, 0
	ctx, cancel := context.WithTimeout(context.Background(), t.timeout)
	defer cancel()
	var aerr error
	for attempt := 0; attempt < 3; attempt++ {
		if aerr = t.sink.EndTxn(ctx, false); aerr == nil {
			t.m.txns.WithLabelValues("aborted").Inc()
			break
		}
		if sink.IsFenced(aerr) {
			return &FencedError{aerr}
		}
	}
	var fe *FencedError
	if errors.As(err, &fe) {
		return err
	}
	if aerr != nil {
		return fmt.Errorf("exactly-once: cannot abort the kafka transaction (restart walrelay): %w", aerr)
	}
	if err != nil {
		t.log.Warn("exactly-once: kafka transaction aborted", "slot", t.slot, "error", err.Error())
	}
	return err
}
