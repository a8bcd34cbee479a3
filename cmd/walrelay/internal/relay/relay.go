package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/walrelay/walrelay/checkpoint"
	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/replication"
	"github.com/walrelay/walrelay/sink"
)

// Reconnect backoff bounds.
const (
	backoffMin = 500 * time.Millisecond
	backoffMax = 30 * time.Second
)

// resetBackoff returns the wait before the next reconnect: back to backoffMin
// after a session that streamed for longer than the wait before it (a
// Postgres restart every few seconds is then met at once each time), else
// wait unchanged, so a connection that keeps failing, or failing right after
// it starts, is retried less and less often.
func resetBackoff(wait time.Duration, streamed bool, lasted time.Duration) time.Duration {
	if streamed && lasted > wait {
		return backoffMin
	}
	return wait
}

// StartupError is a failure before streaming began: bad prerequisites or an
// unreachable Postgres or Kafka. walrelay exits on it instead of retrying.
type StartupError struct{ Err error }

func (e *StartupError) Error() string { return e.Err.Error() }
func (e *StartupError) Unwrap() error { return e.Err }

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
// stream started once.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	dcfg, err := cfg.decoderConfig()
	if err != nil {
		return err
	}
	// The whole decoder configuration is checked before any connection: a
	// session must never be the first to find it invalid.
	if _, err := decoder.New(dcfg); err != nil {
		return &ConfigError{Key: "table", Err: err}
	}
	reg := prometheus.NewRegistry()
	m := newMetrics(reg, cfg.Slot)

	sopts := []sink.Option{sink.WithLogger(log), kafkaMetrics(reg), sink.WithOnReservedHeader(func(string) { m.reservedHeaders.Inc() })}
	if cfg.Delivery == DeliveryExactlyOnce {
		sopts = append(sopts, sink.WithTransactionalID(transactionalID(cfg)))
	}
	snk, err := sink.New(cfg.sinkConfig(), sopts...)
	if err != nil {
		var se *sink.SettingError // a TLS or secret file that cannot be read
		if errors.As(err, &se) {
			return classifySinkErr(err)
		}
		return err
	}
	defer snk.Close()
	pctx, cancel := context.WithTimeout(ctx, cfg.KafkaTimeout)
	err = snk.Ping(pctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		var se *sink.SecurityError
		if errors.As(err, &se) { // its message names the setting to fix
			return &StartupError{err}
		}
		return &StartupError{fmt.Errorf("%w (check --kafka-brokers and that the brokers are up)", err)}
	}

	var walEnd atomic.Uint64
	var ready atomic.Bool
	stopHTTP, err := serveHTTP(cfg.MetricsAddr, reg, &ready, cfg.PProf, log)
	if err != nil {
		return &StartupError{err}
	}
	defer stopHTTP()
	stopPoll := startSlotPoll(ctx, cfg, m, log)
	defer stopPoll()

	rcfg := cfg.replicationConfig()
	conn, err := replication.Open(ctx, rcfg)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return &StartupError{err}
	}
	tr, err := checkpoint.New(checkpoint.Config{MaxInFlight: cfg.MaxInFlight}, conn.Start)
	if err != nil {
		_ = conn.Close(context.Background())
		return err
	}
	cur := newTrackerRef(tr)
	registerPosition(reg, cur, &walEnd)
	if conn.Created {
		log.Info("created replication slot", "slot", cfg.Slot, "lsn", conn.Start.String())
	}
	// From now on the slot holds the position of events not yet confirmed.
	// If it vanishes (dropped by someone), recreating it would silently skip
	// the events written meanwhile: reconnects never create it.
	rcfg.NoCreateSlot = true
	rcfg.SlotMustExist = true

	hbCtx, stopHB := context.WithCancel(ctx)
	defer stopHB()
	if cfg.HeartbeatInterval > 0 {
		go heartbeat(hbCtx, cfg.PostgresDSN, cfg.HeartbeatInterval, m, log)
	}

	// Records must survive the graceful drain that follows ctx; they are
	// failed only when Run returns and the client closes.
	produceCtx, cancelProduce := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelProduce()

	failed, fail := context.WithCancelCause(context.Background())
	defer fail(nil)
	r := &runner{cfg: cfg, dcfg: dcfg, log: log, m: m, sink: snk, tr: tr, produceCtx: produceCtx, cancelProduce: cancelProduce,
		failed: failed, fail: fail, walEnd: &walEnd, ready: &ready, sb: newStandby(cfg.StandbyRetryInterval, cfg.Slot, m, log),
		cur: cur, system: conn.System, confirmed: conn.Start}
	if cfg.Delivery == DeliveryExactlyOnce {
		r.eos = newTxnProducer(cfg, snk, produceCtx, log)
	}
	backoff := backoffMin
	for {
		start := time.Now()
		err := r.session(ctx, conn)
		streamed := ready.Swap(false)
		m.ready.Set(0)
		if ctx.Err() != nil {
			if err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			if !streamed {
				r.finishBetweenSessions(rcfg)
			}
			return nil
		}
		if ferr := r.stopIfFenced(err); ferr != nil {
			return ferr
		}
		if err != nil && !reconnectable(err) {
			return err
		}
		r.tr.Abort() // the half-read transaction is read again from the slot
		backoff = resetBackoff(backoff, streamed, time.Since(start))
		wait, standingBy := r.sb.after(err, backoff)
		for {
			select {
			case <-ctx.Done():
				r.finishBetweenSessions(rcfg)
				return nil
			case <-time.After(wait):
			}
			if !standingBy {
				backoff = min(backoff*2, backoffMax)
			}
			wait, standingBy = backoff, false
			conn, err = replication.Open(ctx, rcfg)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				r.finishBetweenSessions(rcfg)
				return nil
			}
			if ferr := r.stopIfFenced(err); ferr != nil {
				return ferr
			}
			if !reconnectable(err) {
				return err
			}
			log.Warn("reconnect to postgres failed", "slot", cfg.Slot, "error", err, "retry_in", backoff.String())
		}
	}
}

// deliveryError is a failure of the pipeline (an event that cannot be
// decoded or produced). It stops the relay; the watermark stays before it.
type deliveryError struct{ err error }

func (e *deliveryError) Error() string { return e.err.Error() }
func (e *deliveryError) Unwrap() error { return e.err }

type runner struct {
	cfg           Config
	dcfg          decoder.Config
	log           *slog.Logger
	m             *metrics
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
	eos           *txnProducer         // exactly-once mode (nil: at-least-once)
}

// session streams over one replication connection until ctx is done, the
// connection fails, or an event cannot be delivered.
func (r *runner) session(ctx context.Context, conn *replication.Conn) error {
	if err := r.adopt(conn); err != nil {
		_ = conn.Close(context.Background())
		return err
	}
	dec, err := decoder.New(withTableOIDs(r.dcfg, conn.TableOIDs, conn.OIDsReadAt))
	if err != nil {
		_ = conn.Close(context.Background())
		return err
	}
	failed, fail := r.failed, r.fail
	var prod producer = r.sink
	if r.eos != nil {
		if err := r.eos.startSession(r, conn); err != nil {
			_ = conn.Close(context.Background())
			return err
		}
		// A failed Kafka transaction ends this session only.
		failed, fail = context.WithCancelCause(context.Background())
		defer fail(nil)
		prod = r.eos
	}
	var stopped atomic.Bool
	st := conn.NewStream(position{tr: r.tr, sink: r.sink, stopped: &stopped},
		replication.WithLogger(r.log), replication.WithOnStart(func() {
			r.ready.Store(true)
			r.m.ready.Set(1)
			r.sb.streaming()
		}))
	p := &pipeline{dec: dec, tr: r.tr, sink: prod, onPoison: r.cfg.OnPoison, log: r.log, m: r.m, produceCtx: r.produceCtx,
		walEnd: r.walEnd, failed: failed, fail: fail, eos: r.eos}
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
	if r.eos != nil {
		err = r.eos.endSession(err)
		var fe *FencedError
		if errors.As(err, &fe) {
			r.eos.fenced = fe
			err = &fencedRetry{fe}
		}
	}
	return err
}

func newSinkForDoctor(cfg Config) (*sink.Sink, error) { return sink.New(cfg.sinkConfig()) }
