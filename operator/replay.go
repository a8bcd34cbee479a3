package operator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/internal/retry"
	"github.com/walrelay/walrelay/replication"
	"github.com/walrelay/walrelay/sink"
)

// Replay re-publishes outbox rows still in their tables (walrelay replay).
// Each row goes through the decoder (DecodeRow: the INSERT's event) and the
// sink (Prepare, the dead-letter rules of the pipeline) exactly as the
// relay sends its INSERT, and the record is marked as a replay
// (sink.HeaderReplay) instead of carrying the WAL position headers. Replay
// reads an ordinary connection only: it never touches the slot, and runs
// beside a relay.

// DefaultReplayTimeColumn is the column replays select and order rows by.
const DefaultReplayTimeColumn = "created_at"

// ExactlyOnce is how a replay produces in exactly-once mode: in Kafka
// transactions of TransactionalID + ".replay" (a running relay is never
// fenced; two replays at once fence each other), each committed once
// CommitInterval passed (at most half the producer's transaction timeout,
// also while the replay waits for rows) or MaxRecords were sent.
type ExactlyOnce struct {
	TransactionalID string
	CommitInterval  time.Duration
	MaxRecords      int
}

// ReplaySelection chooses the rows a replay re-publishes: those matching
// every criterion given (an empty list or a zero time matches all).
type ReplaySelection struct {
	// Since and Until bound the time column: Since <= t < Until.
	Since, Until time.Time
	// IDs, AggregateTypes, AggregateIDs and EventTypes match the mapped
	// columns' values (compared in each column's own type).
	IDs, AggregateTypes, AggregateIDs, EventTypes []string
}

// ReplayOptions are the settings of one replay; zero values take the
// documented defaults. The first ones are walrelay run's: give a replay the
// relay's, so that its records are the ones the relay made.
type ReplayOptions struct {
	// DSN is the outbox's Postgres; Decoder maps its tables, and Sink
	// routes and encodes their records as the relay does. PasswordSource
	// supplies the password of every connection to DSN (nil: the DSN's).
	DSN            string
	PasswordSource replication.PasswordSource
	Decoder        decoder.Config
	Sink           sink.Config
	// ExactlyOnce, when set, produces in Kafka transactions (for
	// read_committed consumers), of a transactional id of the replay's own.
	ExactlyOnce *ExactlyOnce
	// MaxInFlight caps the rows awaiting Kafka's acknowledgement (at least
	// 2).
	MaxInFlight int
	// StopOnPoison stops the replay with a *sink.PoisonError at a row Kafka
	// can never accept, instead of sending it to the dead-letter topic.
	StopOnPoison bool
	// ShutdownTimeout bounds the wait for what was sent once ctx ends;
	// KafkaTimeout bounds waiting for Kafka at start and at transaction
	// ends. Both must be positive.
	ShutdownTimeout, KafkaTimeout time.Duration
	Logger                        *slog.Logger // nil: slog.Default()

	Selection ReplaySelection
	// TimeColumn is each table's column that Since and Until select on and
	// that orders the rows (DefaultReplayTimeColumn).
	TimeColumn string
	// Rate caps the rows per second; 0 is no cap.
	Rate float64
	// DryRun reads the selected rows and makes each one's decision as the
	// replay does, without Kafka: the tables' filters (ReplayResult.Filtered),
	// the dead-letter rules that need no broker (an empty aggregate id, a
	// mapped column the decoder refuses, a topic that cannot be rendered),
	// and the topic. It counts the rows by topic, and their time span, and
	// sends nothing (no topic is created either). What only Kafka or the
	// schema registry decides (a record too large, a missing topic, a
	// payload that does not fit its schema) it cannot tell.
	DryRun bool
	// Resume is the ResumeToken of an interrupted replay of the same
	// selection: the replay goes on where Kafka's acknowledgements ended,
	// with its id and time range.
	Resume string
	// ID marks the records (sink.HeaderReplay); default a new one.
	ID string
	// FetchSize is the rows read per round trip of the cursor (1000).
	FetchSize int
	// Progress, when set, is called every ProgressInterval (1s) from a
	// goroutine of its own while rows are sent, and once at the end.
	Progress         func(ReplayProgress)
	ProgressInterval time.Duration
}

// ReplayProgress is a replay's state while it runs.
type ReplayProgress struct {
	Table        string // the table being read
	Total        int64  // selected rows, over all tables (resumed and filtered ones included)
	Sent         int64  // rows handed to Kafka
	Acked        int64  // rows Kafka acknowledged
	DeadLettered int64
	Filtered     int64 // rows the tables' filters do not publish (not sent)
	Elapsed      time.Duration
	// ResumeToken resumes the replay from what Kafka acknowledged so far,
	// should it die now (kill -9, a crash): keep the last one seen.
	ResumeToken string
}

// ReplayTable is what a replay covers of one table.
type ReplayTable struct {
	Table          string
	Rows           int64
	Oldest, Newest time.Time // span of the time column over the rows; zero when none
	// Topics counts the rows a replay would send by the topic they route
	// to (a dry run only); rows it would dead-letter count under the
	// dead-letter topic. Filtered rows (not sent) are not counted here.
	Topics map[string]int64
	// Filtered counts the rows the table's filter does not publish (a dry
	// run only; the replay's count is ReplayResult.Filtered).
	Filtered int64
}

// ReplayResult is what a replay did, or with DryRun would do.
type ReplayResult struct {
	ID     string
	Tables []ReplayTable
	Since  time.Time // the selection's time range (derived ones included)
	Until  time.Time
	// CommitTimes: the server records commit timestamps
	// (track_commit_timestamp), so replayed records carry their
	// transaction's commit time as Kafka timestamp, as the relay's do;
	// otherwise they carry the time column's value (the inserting
	// transaction's start for created_at).
	CommitTimes  bool
	Acked        int64 // rows acknowledged by Kafka in this run, dead letters included
	DeadLettered int64
	// Filtered counts the rows the tables' filters do not publish: walrelay
	// run reads past their inserts, and a replay sends them neither.
	Filtered int64
	Resumed  int64 // rows acknowledged by the runs this one resumed
	Elapsed  time.Duration
	// Complete: every selected row was acknowledged.
	Complete bool
	// ResumeToken, when the replay stopped before the end (interrupted,
	// or failed), makes ReplayOptions.Resume go on from there: every
	// selected row before it was acknowledged; a few after it may be sent
	// twice, none is skipped.
	ResumeToken string
	// Notes are facts the caller should tell the operator.
	Notes []string
}

// NothingToReplayError says why a replay has nothing to send before it
// sends anything: a tableless outbox, rows deleted as they were written, or
// a selection no row matches.
type NothingToReplayError struct {
	Reason string
	// Unkept: the events were never kept as rows (a tableless outbox) or
	// the application deletes the rows it writes, so a replay cannot send
	// them, rather than no row being selected.
	Unkept bool
}

func (e *NothingToReplayError) Error() string { return "nothing to replay: " + e.Reason }

// replayProducer is the sink as a replay uses it.
type replayProducer interface {
	producer
	Send(ctx context.Context, r sink.Record, done func(error))
	Ping(ctx context.Context) error
	Flush(ctx context.Context) error
	InitProducer(ctx context.Context) error
	BeginTxn() error
	EndTxn(ctx context.Context, commit bool) error
	TransactionTimeout() time.Duration
	Close()
}

// replaySinkHook lets tests replace the sink a replay produces with.
var replaySinkHook func(cfg sink.Config, opts ...sink.Option) (replayProducer, error)

// Replay re-publishes the selected rows of opts' outbox tables with opts'
// mapping, routing, Kafka settings, poison policy and delivery mode (in
// exactly-once mode inside Kafka transactions of its own transactional id,
// TransactionalID + ".replay", so a running relay is never fenced; two
// replays at once fence each other). Rows are read through a cursor in one
// snapshot, table after table in the configured order, each in the order of
// the time column; records of one aggregate are produced in that order.
// Memory is bounded by opts.MaxInFlight and the sink's buffer.
//
// When ctx ends, Replay stops reading, waits (up to opts.ShutdownTimeout)
// for what it sent, and returns a result with ResumeToken and a nil error.
// On a failure it returns the error and, when rows were acknowledged, a
// ResumeToken too. Nothing to send at all is a *NothingToReplayError.
func Replay(ctx context.Context, opts ReplayOptions) (ReplayResult, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	r, err := newReplayer(opts)
	if err != nil {
		return ReplayResult{}, err
	}
	return r.run(ctx)
}

type replayer struct {
	ro  ReplayOptions
	log *slog.Logger
	tok replayToken
	sel ReplaySelection
	res ReplayResult

	total, sent, acked, deadLettered, filtered atomic.Int64
	cur                                        atomic.Pointer[cursorAt]
	started                                    time.Time
}

func newReplayer(ro ReplayOptions) (*replayer, error) {
	if ro.TimeColumn == "" {
		ro.TimeColumn = DefaultReplayTimeColumn
	}
	if ro.FetchSize <= 0 {
		ro.FetchSize = 1000
	}
	if ro.ProgressInterval <= 0 {
		ro.ProgressInterval = time.Second
	}
	switch {
	case ro.MaxInFlight < 2:
		return nil, &OptionError{Option: "MaxInFlight", Err: errors.New("must be at least 2")}
	case ro.ShutdownTimeout <= 0, ro.KafkaTimeout <= 0:
		return nil, &OptionError{Option: "ShutdownTimeout, KafkaTimeout", Err: errors.New("must be positive")}
	case ro.ExactlyOnce != nil && (ro.ExactlyOnce.TransactionalID == "" || ro.ExactlyOnce.CommitInterval <= 0 || ro.ExactlyOnce.MaxRecords <= 0):
		return nil, &OptionError{Option: "ExactlyOnce", Err: errors.New("needs a transactional id, a positive commit interval and a positive number of records")}
	case ro.Rate < 0:
		return nil, &OptionError{Option: "Rate", Err: errors.New("must not be negative")}
	case !ro.Selection.Since.IsZero() && !ro.Selection.Until.IsZero() && !ro.Selection.Since.Before(ro.Selection.Until):
		return nil, &OptionError{Option: "Selection", Err: fmt.Errorf("the time range is empty: since %s is not before until %s",
			ro.Selection.Since.UTC().Format(time.RFC3339), ro.Selection.Until.UTC().Format(time.RFC3339))}
	}
	if err := replication.ValidateIdentifier(ro.TimeColumn); err != nil {
		return nil, &OptionError{Option: "TimeColumn", Err: err}
	}
	if len(ro.Decoder.Tables) == 0 {
		return nil, &NothingToReplayError{Reason: fmt.Sprintf("walrelay reads a tableless outbox (logical messages with prefix %q): "+
			"its events were never rows of a table, so no row can be published again", ro.Decoder.MessagePrefix), Unkept: true}
	}
	ro.Decoder.HeartbeatPrefix = decoder.DefaultHeartbeatPrefix
	if _, err := decoder.New(ro.Decoder); err != nil {
		return nil, &OptionError{Option: "Decoder", Err: err}
	}
	r := &replayer{ro: ro, log: ro.Logger, sel: ro.Selection}
	names := make([]string, len(ro.Decoder.Tables))
	for i, t := range ro.Decoder.Tables {
		names[i] = t.Schema + "." + t.Name
	}
	fp := ro.Selection.fingerprint(names, ro.TimeColumn)
	if ro.Resume != "" {
		tok, err := parseReplayToken(ro.Resume)
		if err != nil {
			return nil, err
		}
		if tok.Sel != fp || tok.Table >= len(names) {
			return nil, fmt.Errorf("%w: it belongs to a replay of another selection (ids, aggregate types, aggregate ids, event types, tables or time column differ)", ErrBadResumeToken)
		}
		since, err := parseTokenTime(tok.Since)
		if err != nil {
			return nil, err
		}
		until, err := parseTokenTime(tok.Until)
		if err != nil {
			return nil, err
		}
		for _, b := range []struct{ given, tok time.Time }{{ro.Selection.Since, since}, {ro.Selection.Until, until}} {
			if !b.given.IsZero() && !b.given.Equal(b.tok) {
				return nil, fmt.Errorf("%w: it resumes the time range %s .. %s; give no other", ErrBadResumeToken, tok.Since, tok.Until)
			}
		}
		r.sel.Since, r.sel.Until = since, until
		r.tok = tok
	} else {
		id := ro.ID
		if id == "" {
			id = newReplayID(time.Now())
		}
		r.tok = replayToken{V: replayTokenVersion, ID: id, Sel: fp, Since: tokenTime(r.sel.Since), Until: tokenTime(r.sel.Until)}
	}
	r.res = ReplayResult{ID: r.tok.ID, Since: r.sel.Since, Until: r.sel.Until, Resumed: r.tok.Done}
	if ro.Decoder.MessagePrefix != "" {
		r.res.Notes = append(r.res.Notes, fmt.Sprintf("events of the tableless outbox (logical messages with prefix %q) were never rows: a replay cannot send them again",
			ro.Decoder.MessagePrefix))
	}
	return r, nil
}

// newReplayID returns a replay id: the start time and a random suffix.
func newReplayID(now time.Time) string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return "replay-" + now.UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b)
}

func (r *replayer) run(ctx context.Context) (ReplayResult, error) {
	r.started = time.Now()
	res, err := r.replay(ctx)
	res.Elapsed = time.Since(r.started)
	return res, err
}

func (r *replayer) replay(ctx context.Context) (ReplayResult, error) {
	conn, err := connectPlain(ctx, r.ro.DSN, "walrelay replay", r.ro.PasswordSource)
	if err != nil {
		return r.res, err
	}
	defer conn.Close(context.Background())
	commitTS, err := commitTimestamps(ctx, conn)
	if err != nil {
		return r.res, err
	}
	r.res.CommitTimes = commitTS
	var tables []*outboxTable
	for i, t := range r.ro.Decoder.Tables {
		if i < r.tok.Table {
			continue
		}
		ot, err := inspectTable(ctx, conn, i, t, r.ro.TimeColumn)
		if err != nil {
			return r.res, err
		}
		tables = append(tables, ot)
	}
	// One snapshot for the plan and every cursor.
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return r.res, fmt.Errorf("begin the replay's snapshot: %w", err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	for _, t := range tables {
		if err := t.checkTimeNulls(ctx, tx); err != nil {
			return r.res, err
		}
	}
	var total int64
	for _, t := range tables {
		p, err := t.plan(ctx, tx, r.sel, r.fromFor(t))
		if err != nil {
			return r.res, err
		}
		rt := ReplayTable{Table: t.name, Rows: p.rows, Oldest: p.oldest, Newest: p.newest}
		if r.ro.DryRun && p.rows > 0 {
			if rt.Topics, rt.Filtered, err = r.dryRun(ctx, tx, t); err != nil {
				return r.res, err
			}
			r.res.Filtered += rt.Filtered
		}
		r.res.Tables = append(r.res.Tables, rt)
		total += p.rows
	}
	if total == 0 && r.ro.Resume == "" {
		return r.res, r.nothing(ctx, tx, tables)
	}
	if r.ro.DryRun {
		return r.res, nil
	}
	r.total.Store(total + r.tok.Done)
	return r.send(ctx, tx, tables)
}

// fromFor is the order value a table's rows resume at ("" from its start).
func (r *replayer) fromFor(t *outboxTable) string {
	if t.index == r.tok.Table {
		return r.tok.From
	}
	return ""
}

// dryRun reads t's selected rows through the replay's cursor and decides
// each as the replay does, without Kafka: the table's filter (filtered, not
// sent), the dead-letter rules of sink.PoisonOf, and the topic the sink's
// routing renders (one that cannot be rendered: the dead-letter topic). It
// returns the rows by topic and the filtered ones.
func (r *replayer) dryRun(ctx context.Context, tx pgx.Tx, t *outboxTable) (map[string]int64, int64, error) {
	snk, err := sink.New(r.ro.Sink, sink.WithLogger(r.log))
	if err != nil {
		return nil, 0, err
	}
	defer snk.Close()
	dec, err := decoder.New(r.ro.Decoder)
	if err != nil {
		return nil, 0, err
	}
	out := map[string]int64{}
	var filtered, poison int64
	var o decoder.Output
	_, err = r.readTable(ctx, tx, t, r.fromFor(t), func(vals [][]byte) (bool, error) {
		ev, err := r.decodeRow(t, vals, dec, &o)
		if err != nil {
			return false, err
		}
		if ev == nil {
			filtered++
			return false, nil
		}
		topic, terr := snk.Topic(ev)
		if _, cause := sink.PoisonOf(ev); cause != nil || terr != nil {
			topic = r.ro.Sink.DeadLetterTopic()
			poison++
		}
		out[topic]++
		return false, nil
	})
	if err != nil {
		return nil, 0, err
	}
	if poison > 0 && r.ro.StopOnPoison {
		r.res.Notes = append(r.res.Notes, fmt.Sprintf("%d rows of %s cannot go to their topic: with StopOnPoison, the replay stops at the first of them instead of dead-lettering it",
			poison, t.name))
	}
	return out, filtered, nil
}

// nothing explains why no row is selected.
func (r *replayer) nothing(ctx context.Context, tx pgx.Tx, tables []*outboxTable) error {
	var reasons []string
	unkept := false
	for _, t := range tables {
		st, err := t.stats(ctx, tx)
		if err != nil {
			return err
		}
		switch {
		case st.rows == 0 && st.inserted > 0 && st.deleted >= st.inserted:
			unkept = true
			reasons = append(reasons, fmt.Sprintf("outbox table %s holds no rows, and its statistics count as many deletes as inserts (%d): "+
				"the application deletes the rows it writes (in the same transaction, or by a job of its own), "+
				"so their events are only in Kafka; keep the rows and let walrelay prune delete them by age to be able to replay", t.name, st.inserted))
		case st.rows == 0:
			reasons = append(reasons, fmt.Sprintf("outbox table %s holds no rows (its statistics count %d inserts and %d deletes)", t.name, st.inserted, st.deleted))
		default:
			all, err := t.plan(ctx, tx, ReplaySelection{}, "")
			if err != nil {
				return err
			}
			reasons = append(reasons, fmt.Sprintf("no row of %s matches the selection; it holds %d rows with %s from %s to %s",
				t.name, all.rows, t.timeCol, all.oldest.Format(time.RFC3339), all.newest.Format(time.RFC3339)))
		}
	}
	return &NothingToReplayError{Reason: strings.Join(reasons, "; "), Unkept: unkept}
}

// send reads every table's cursor and produces its rows.
func (r *replayer) send(ctx context.Context, tx pgx.Tx, tables []*outboxTable) (ReplayResult, error) {
	snk, err := r.newSink(ctx)
	if err != nil {
		return r.res, err
	}
	defer snk.Close()
	dec, err := decoder.New(r.ro.Decoder)
	if err != nil {
		return r.res, err
	}
	// Records must survive the drain that follows ctx.
	produceCtx, cancelProduce := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelProduce()
	failed, fail := context.WithCancelCause(context.Background())
	defer fail(nil)
	win := newRowWindow(r.windowCap())
	var out sender
	if x := r.ro.ExactlyOnce; x != nil {
		out = &txnSender{s: snk, win: win, fail: fail, failed: failed, produceCtx: produceCtx, maxRecords: x.MaxRecords,
			maxOpen: commitAfter(x.CommitInterval, snk.TransactionTimeout()), timeout: r.ro.KafkaTimeout, onAck: r.onAck}
	} else {
		out = &ackSender{s: snk, win: win, fail: fail, failed: failed, produceCtx: produceCtx, onAck: r.onAck}
	}
	stopProgress := r.reportProgress()
	defer stopProgress()

	var o decoder.Output
	var pace time.Time
	for _, t := range tables {
		r.cur.Store(&cursorAt{t: t, win: win})
		stop, err := r.readTable(ctx, tx, t, r.fromFor(t), func(vals [][]byte) (bool, error) {
			return r.row(ctx, t, vals, dec, snk, win, out, failed, &o, &pace)
		})
		if err == nil {
			err = r.finish(ctx, out, stop)
		}
		r.res.Acked, r.res.DeadLettered, r.res.Filtered = r.acked.Load(), r.deadLettered.Load(), r.filtered.Load()
		if err != nil || stop {
			r.res.ResumeToken = r.token(t, win)
			return r.res, err
		}
		win.reset()
	}
	r.res.Complete = true
	return r.res, nil
}

// finish waits for what was sent: at once, or, when the replay was
// stopped, until opts.ShutdownTimeout.
func (r *replayer) finish(ctx context.Context, out sender, stopped bool) error {
	fctx := ctx
	if stopped {
		var cancel context.CancelFunc
		fctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), r.ro.ShutdownTimeout)
		defer cancel()
	}
	return out.finish(fctx)
}

// cursorAt is the table being sent and its window, for resume tokens.
type cursorAt struct {
	t   *outboxTable
	win *rowWindow
}

// token is where to resume in table t: at the first row Kafka has not
// acknowledged (or with everything sent acknowledged, at the last one).
// Between tables (the window reset, t not yet the next one) it resumes at
// t's start: rows sent twice, never one skipped.
func (r *replayer) token(t *outboxTable, win *rowWindow) string {
	tok := r.tok
	tok.Table = t.index
	if k, ok := win.resumeFrom(); ok {
		tok.From = k
	} else if t.index != r.tok.Table {
		tok.From = ""
	}
	tok.Done = r.tok.Done + r.acked.Load()
	return tok.String()
}

// windowCap is the rows in flight at most: MaxInFlight, and in
// exactly-once mode the records waiting for their transaction's commit.
func (r *replayer) windowCap() int {
	if x := r.ro.ExactlyOnce; x != nil {
		return max(r.ro.MaxInFlight, x.MaxRecords+1)
	}
	return r.ro.MaxInFlight
}

func (r *replayer) onAck(deadLetter bool) {
	r.acked.Add(1)
	if deadLetter {
		r.deadLettered.Add(1)
	}
}

// newSink makes the replay's producer: in exactly-once mode transactional
// with an id of its own, initialised (which fences an earlier replay).
func (r *replayer) newSink(ctx context.Context) (replayProducer, error) {
	opts := []sink.Option{sink.WithLogger(r.log)}
	if x := r.ro.ExactlyOnce; x != nil {
		opts = append(opts, sink.WithTransactionalID(x.TransactionalID+".replay"))
	}
	var snk replayProducer
	var err error
	if replaySinkHook != nil {
		snk, err = replaySinkHook(r.ro.Sink, opts...)
	} else {
		snk, err = sink.New(r.ro.Sink, opts...)
	}
	if err != nil {
		return nil, err
	}
	kctx, cancel := context.WithTimeout(ctx, r.ro.KafkaTimeout)
	defer cancel()
	if err := snk.Ping(kctx); err != nil {
		snk.Close()
		return nil, err
	}
	if r.ro.ExactlyOnce != nil {
		if err := snk.InitProducer(kctx); err != nil {
			snk.Close()
			return nil, err
		}
	}
	return snk, nil
}

// readTable reads t's cursor (from: the order value to start at) and hands
// each row to each (its columns, metaCols first) until the end (stop
// false), ctx ends or each says stop (stop true), or a failure.
func (r *replayer) readTable(ctx context.Context, tx pgx.Tx, t *outboxTable, from string,
	each func(vals [][]byte) (stop bool, err error)) (stop bool, err error) {
	q, args := t.cursorSQL(r.sel, from, r.res.CommitTimes)
	cursor := pgx.Identifier{fmt.Sprintf("walrelay_replay_%d", t.index)}.Sanitize()
	if _, err := tx.Exec(ctx, "DECLARE "+cursor+" NO SCROLL CURSOR FOR "+q, args...); err != nil {
		if ctx.Err() != nil {
			return true, nil
		}
		return false, fmt.Errorf("open a cursor over %s: %w", t.name, err)
	}
	fetch := fmt.Sprintf("FETCH FORWARD %d FROM %s", r.ro.FetchSize, cursor)
	for {
		rr := tx.Conn().PgConn().ExecParams(ctx, fetch, nil, nil, nil, nil)
		n := 0
		for rr.NextRow() {
			n++
			if stop || err != nil {
				continue // read the rest of the batch off the wire
			}
			stop, err = each(rr.Values())
		}
		if _, cerr := rr.Close(); cerr != nil && err == nil && !stop {
			if ctx.Err() != nil {
				return true, nil
			}
			return false, fmt.Errorf("read the cursor over %s: %w", t.name, cerr)
		}
		if stop || err != nil || n == 0 {
			return stop, err
		}
	}
}

// row produces one row of the cursor: vals are its columns (metaCols
// first).
func (r *replayer) row(ctx context.Context, t *outboxTable, vals [][]byte, dec *decoder.Decoder, snk replayProducer,
	win *rowWindow, out sender, failed context.Context, o *decoder.Output, pace *time.Time) (stop bool, err error) {
	if ctx.Err() != nil {
		return true, nil
	}
	if failed.Err() != nil {
		return false, context.Cause(failed)
	}
	if err := r.waitRate(ctx, pace); err != nil {
		return true, nil
	}
	ev, err := r.decodeRow(t, vals, dec, o)
	if err != nil {
		return false, err
	}
	if ev == nil {
		r.filtered.Add(1) // walrelay run does not publish it either
		return false, nil
	}
	p, err := prepareEvent(ctx, snk, ev, r.ro.StopOnPoison, r.log)
	if err != nil {
		if ctx.Err() != nil {
			return true, nil
		}
		return false, err
	}
	if p.Reason != "" {
		r.log.Warn("replayed event dead-lettered", "id", ev.ID, "table", ev.Table, "topic", p.Intended, "reason", p.Reason, "error", p.Cause.Error())
	}
	seq, err := win.add(ctx, string(vals[metaOrder]))
	if err != nil {
		return true, nil // ctx ended while the window was full
	}
	r.sent.Add(1)
	return false, out.send(ctx, p.Record.MarkReplay(r.tok.ID), seq, p.Reason != "")
}

// decodeRow turns a row of the cursor (metaCols first) into its event, as
// the relay decodes its INSERT; nil when the table's filter does not
// publish it. The event lives in o until the next call.
func (r *replayer) decodeRow(t *outboxTable, vals [][]byte, dec *decoder.Decoder, o *decoder.Output) (*decoder.Event, error) {
	us, err := strconv.ParseInt(string(vals[metaTime]), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("replay %s: record time %q: %w", t.name, vals[metaTime], err)
	}
	if err := dec.DecodeRow(t.name, t.cols, vals[metaCols:], time.UnixMicro(us), o); err != nil {
		return nil, fmt.Errorf("replay %s: %w", t.name, err)
	}
	if o.Kind == decoder.KindFiltered {
		return nil, nil
	}
	return &o.Event, nil
}

// waitRate paces rows at ro.Rate per second.
func (r *replayer) waitRate(ctx context.Context, next *time.Time) error {
	if r.ro.Rate <= 0 {
		return nil
	}
	now := time.Now()
	if next.IsZero() || next.Before(now.Add(-time.Second)) {
		*next = now // no burst after a stall
	}
	*next = next.Add(time.Duration(float64(time.Second) / r.ro.Rate))
	return retry.Sleep(ctx, next.Sub(now))
}

// reportProgress calls ro.Progress every interval until the returned
// function is called (which reports once more).
func (r *replayer) reportProgress() (stop func()) {
	if r.ro.Progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(r.ro.ProgressInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				r.ro.Progress(r.progress())
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
		r.ro.Progress(r.progress())
	}
}

func (r *replayer) progress() ReplayProgress {
	p := ReplayProgress{Total: r.total.Load(), Sent: r.tok.Done + r.sent.Load(), Acked: r.tok.Done + r.acked.Load(),
		DeadLettered: r.deadLettered.Load(), Filtered: r.filtered.Load(), Elapsed: time.Since(r.started)}
	if c := r.cur.Load(); c != nil {
		p.Table, p.ResumeToken = c.t.name, r.token(c.t, c.win)
	}
	return p
}

// connectPlain opens an ordinary connection to dsn with src's password
// (nil: the DSN's).
func connectPlain(ctx context.Context, dsn, app string, src replication.PasswordSource) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, &OptionError{Option: "DSN", Err: err}
	}
	if _, ok := cfg.RuntimeParams["application_name"]; !ok {
		cfg.RuntimeParams["application_name"] = app
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := replication.ConnectPgx(cctx, cfg, src)
	if err != nil {
		return nil, replication.ExplainConnect(err, &cfg.Config, false)
	}
	return conn, nil
}
