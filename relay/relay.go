package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"golang.org/x/sync/errgroup"

	"github.com/walrelay/walrelay/checkpoint"
	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/replication"
	"github.com/walrelay/walrelay/sink"
)

// position adapts the tracker and sink to replication.Position.
type position struct {
	tr      *checkpoint.Tracker
	sink    *sink.Sink
	stopped *atomic.Bool // the pipeline returned: nothing new is produced
}

func (p position) Watermark() pglogrepl.LSN { return p.tr.Watermark() }
func (p position) Settled() bool            { return p.stopped.Load() && p.sink.Buffered() == 0 }

// Run runs the relay until ctx is done (then drains and returns nil) or a
// failure it cannot retry. It reconnects to Postgres with backoff after the
// stream started once. Failures before streaming began (bad prerequisites,
// Postgres or Kafka unreachable) are returned at once.
func Run(ctx context.Context, opts Options) error {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if err := opts.Validate(); err != nil {
		return err
	}
	opts.Decoder.HeartbeatPrefix = HeartbeatPrefix
	// The whole decoder configuration is checked before any connection: a
	// session must never be the first to find it invalid.
	if _, err := decoder.New(opts.Decoder); err != nil {
		return &OptionError{Option: "Decoder", Err: err}
	}
	log, slot := opts.Logger, opts.Replication.Slot
	obs := opts.observer()

	sopts := []sink.Option{sink.WithLogger(log), sink.WithOnReservedHeader(obs.ReservedHeaderDropped),
		sink.WithTracerProvider(opts.TracerProvider)}
	sopts = append(sopts, opts.SinkOptions...)
	if opts.ExactlyOnce != nil {
		sopts = append(sopts, sink.WithTransactionalID(opts.ExactlyOnce.TransactionalID))
	}
	snk, err := sink.New(opts.Sink, sopts...)
	if err != nil {
		return err // a *sink.SettingError names the setting (a TLS or secret file that cannot be read)
	}
	defer snk.Close()
	pctx, cancel := context.WithTimeout(ctx, opts.KafkaTimeout)
	err = snk.Ping(pctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		var se *sink.SecurityError
		if errors.As(err, &se) { // its message names the setting to fix
			return err
		}
		return &fieldsError{fmt.Errorf("%w (check the Kafka brokers setting and that the brokers are up)", err), []string{"sink.Config.Brokers"}}
	}
	if err := registerSchemas(ctx, snk); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}

	var walEnd atomic.Uint64
	var ready atomic.Bool
	sb := newStandby(opts.StandbyRetryInterval, slot, obs, log)
	obs.NotReadyReason(sb.notReady)
	obs.SlotRecoveries(opts.SlotRecoveries)
	stopSpan := startSpanPoll(ctx, opts, obs)
	defer stopSpan()

	marker, err := guardSlot(ctx, opts, snk, log)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	rcfg := opts.Replication
	rcfg.PrimaryDSN = opts.HeartbeatDSN
	rcfg.Marker = marker
	if rcfg.SlotCreateWait == nil {
		rcfg.SlotCreateWait = func(w replication.SlotWait) {
			log.Warn("creating the replication slot waits for transactions to end (a logical slot starts only after every transaction running at its creation ended)",
				"slot", w.Slot, "waited", w.Waited.Round(time.Second).String(), "waiting_for", w.String())
		}
	}
	conn, err := replication.Open(ctx, rcfg)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return slotLostAtStart(slot, err)
	}
	tr, err := checkpoint.New(checkpoint.Config{MaxInFlight: opts.trackerCap()}, conn.Start)
	if err != nil {
		_ = conn.Close(context.Background())
		return err
	}
	cur := newTrackerRef(tr)
	obs.Positions(cur.Watermark, cur.InFlight, func() pglogrepl.LSN { return pglogrepl.LSN(walEnd.Load()) })
	if conn.CreatedPublication {
		log.Info("created publication", "publication", opts.Replication.Publication, "tables", strings.Join(opts.Replication.Tables, ","))
	}
	if conn.Created {
		log.Info("created replication slot", "slot", slot, "lsn", conn.Start.String())
	}
	for _, w := range conn.Warnings {
		log.Warn(w, "slot", slot)
	}
	// From now on the slot holds the position of events not yet confirmed.
	// If it vanishes (dropped by someone), recreating it would silently skip
	// the events written meanwhile: reconnects never create it.
	rcfg.NoCreateSlot = true
	rcfg.SlotMustExist = true
	// The slot poll starts once the slot is known to exist: before, a
	// Postgres that cannot be reached would first show as stale metrics.
	stopPoll := startSlotPoll(ctx, opts, obs)
	defer stopPoll()
	stopFailoverPoll := startFailoverPoll(ctx, opts, obs)
	defer stopFailoverPoll()

	hbCtx, stopHB := context.WithCancel(ctx)
	defer stopHB()
	hbDSN := opts.HeartbeatDSN
	if hbDSN == "" {
		hbDSN = rcfg.DSN
		if conn.Standby && opts.HeartbeatInterval > 0 {
			// A standby cannot write the heartbeat's WAL: an idle primary
			// would leave the slot behind.
			hbDSN = ""
			log.Warn("walrelay decodes on a standby and has no heartbeat DSN for the primary: heartbeats are off, so the slot stays behind while the primary is idle; set the heartbeat Postgres DSN to the primary",
				"slot", slot, "option", "HeartbeatDSN")
		}
	}
	if opts.HeartbeatInterval > 0 && hbDSN != "" {
		go heartbeat(hbCtx, hbDSN, opts.Replication.PasswordSource, opts.HeartbeatInterval, obs, log)
	}

	// Records must survive the graceful drain that follows ctx; they are
	// failed only when Run returns and the client closes.
	produceCtx, cancelProduce := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelProduce()

	failed, fail := context.WithCancelCause(context.Background())
	defer fail(nil)
	r := &runner{opts: opts, rcfg: rcfg, log: log, obs: obs, sink: snk, tr: tr, produceCtx: produceCtx, cancelProduce: cancelProduce,
		failed: failed, fail: fail, walEnd: &walEnd, ready: &ready, sb: sb,
		cur: cur, system: conn.System, confirmed: conn.Start}
	r.mode = &atLeastOnce{producer: snk, r: r}
	if opts.ExactlyOnce != nil {
		r.mode = newTxnProducer(opts, snk, produceCtx, obs, log)
	}
	return r.loop(ctx, conn)
}

// loop runs sessions, the first over conn, reconnecting after each one that
// ended with a retryable failure, until ctx is done (nil) or a failure it
// must not retry.
func (r *runner) loop(ctx context.Context, conn *replication.Conn) error {
	bo := newBackoff()
	for {
		start := time.Now()
		err := r.session(ctx, conn)
		streamed := r.ready.Swap(false)
		r.obs.Streaming(false)
		if ctx.Err() != nil {
			if err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			if !streamed {
				r.finishBetweenSessions()
			}
			return nil
		}
		if ferr := r.mode.stopIfFenced(err); ferr != nil {
			return ferr
		}
		if err != nil && !reconnectable(err) {
			return err
		}
		r.tr.Abort() // the half-read transaction is read again from the slot
		now := time.Now()
		bo.sessionEnded(streamed, now.Sub(start), now)
		wait, _ := r.sb.after(err, bo.next(err, now))
		if conn, err = r.reconnect(ctx, wait, bo); conn == nil {
			return err // nil: ctx ended and the final position was confirmed
		}
	}
}

// reconnect waits (wait first, then as bo says after each failed attempt)
// and opens a new replication connection, until one opens, ctx ends (nil,
// nil: the final position was confirmed) or a failure that must not be
// retried. It warns on the first failed attempt and then every 30s.
func (r *runner) reconnect(ctx context.Context, wait time.Duration, bo *backoff) (*replication.Conn, error) {
	var warned time.Time
	for {
		select {
		case <-ctx.Done():
			r.finishBetweenSessions()
			return nil, nil
		case <-time.After(wait):
		}
		conn, err := replication.Open(ctx, r.rcfg)
		if err == nil {
			return conn, nil
		}
		if ctx.Err() != nil {
			r.finishBetweenSessions()
			return nil, nil
		}
		if ferr := r.mode.stopIfFenced(err); ferr != nil {
			return nil, ferr
		}
		if !reconnectable(err) {
			return nil, r.slotLost(err)
		}
		now := time.Now()
		wait = bo.next(err, now)
		if now.Sub(warned) >= 30*time.Second {
			warned = now
			r.log.Warn("reconnect to postgres failed", "slot", r.rcfg.Slot, "error", err, "retry_in", wait.Round(time.Millisecond).String())
		} else {
			r.log.Debug("reconnect to postgres failed", "slot", r.rcfg.Slot, "error", err, "retry_in", wait.Round(time.Millisecond).String())
		}
	}
}

// deliveryError is a failure of the pipeline (an event that cannot be
// decoded or produced). It stops the relay; the watermark stays before it.
type deliveryError struct{ err error }

func (e *deliveryError) Error() string { return e.err.Error() }
func (e *deliveryError) Unwrap() error { return e.err }

type runner struct {
	opts          Options
	rcfg          replication.Config // for reconnects: never creates the slot
	log           *slog.Logger
	obs           Observer
	sink          *sink.Sink
	tr            *checkpoint.Tracker
	produceCtx    context.Context
	cancelProduce context.CancelFunc
	failed        context.Context // ends with the first produce failure
	fail          context.CancelCauseFunc
	walEnd        *atomic.Uint64
	ready         *atomic.Bool
	sb            *standby
	cur           *trackerRef          // r.tr, for the gauges
	system        replication.Identity // WAL history r.tr's positions belong to
	confirmed     pglogrepl.LSN        // last position reported to the slot (Run goroutine only)
	mode          mode                 // at-least-once or exactly-once
}

// session streams over one replication connection until ctx is done, the
// connection fails, or an event cannot be delivered.
func (r *runner) session(ctx context.Context, conn *replication.Conn) error {
	if err := r.adopt(conn); err != nil {
		_ = conn.Close(context.Background())
		return err
	}
	dec, err := decoder.New(withTableOIDs(r.opts.Decoder, conn.TableOIDs, conn.OIDsReadAt))
	if err != nil {
		_ = conn.Close(context.Background())
		return err
	}
	sess, err := r.mode.startSession(ctx, conn)
	if err != nil {
		_ = conn.Close(context.Background())
		return err
	}
	if sess.tr != r.tr {
		r.tr = sess.tr
		r.cur.Store(sess.tr)
	}
	var stopped atomic.Bool
	st := conn.NewStream(position{tr: r.tr, sink: r.sink, stopped: &stopped},
		replication.WithLogger(r.log), replication.WithOnStart(func() {
			r.ready.Store(true)
			r.obs.Streaming(true)
			r.sb.streaming()
		}))
	p := &pipeline{dec: dec, tr: r.tr, d: sess.delivery, onPoison: r.opts.OnPoison, log: r.log, obs: r.obs, produceCtx: r.produceCtx,
		walEnd: r.walEnd, failed: sess.failed, fail: sess.fail}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		err := st.Run(gctx)
		if ctx.Err() != nil {
			// Shutting down and the drain is over: a Produce still blocked
			// on a full buffer (Kafka down) must give up now. Its records
			// were never confirmed; the slot sends them again.
			r.cancelProduce()
		}
		return err
	})
	g.Go(func() error {
		defer stopped.Store(true)
		if err := p.run(gctx, st); err != nil {
			// Not a connection problem: retrying would hit the same event.
			return &deliveryError{err}
		}
		return nil
	})
	err = g.Wait()
	r.confirmed = max(r.confirmed, st.Confirmed())
	return r.mode.endSession(err)
}

// registerSchemas registers the schema files and looks up the subjects known
// before any event (sink.RegisterSchemas): a subject missing, refused or
// unusable stops walrelay at start, each named on one line; a registry that
// cannot be reached too, as Kafka does.
func registerSchemas(ctx context.Context, snk *sink.Sink) error {
	err := snk.RegisterSchemas(ctx)
	switch {
	case err == nil:
		return nil
	case sink.IsRetryable(err):
		return &fieldsError{fmt.Errorf("%w (check the schema registry URL setting and that the registry is up)", err), []string{"schema.Config.URLs"}}
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return oneLine{j.Unwrap()}
	}
	return err
}

// oneLine is errors.Join's error on one line: the messages joined with "; ".
type oneLine struct{ errs []error }

func (e oneLine) Error() string {
	msgs := make([]string, len(e.errs))
	for i, err := range e.errs {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

func (e oneLine) Unwrap() []error { return e.errs }
