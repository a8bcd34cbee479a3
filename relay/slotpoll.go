package relay

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walrelay/walrelay/replication"
)

// pollSlot reads the slot's row every interval (at once first) until ctx is
// done and hands each reading to obs (the walrelay_slot_* gauges), with
// what holds the slot back (holders.go's reading) and the time left before
// max_slot_wal_keep_size invalidates it. Failures are counted and logged
// once per failure streak; they never stop the relay. A missing slot is a
// reading (walrelay_slot_exists 0), not a failure.
func pollSlot(ctx context.Context, opts Options, obs Observer) {
	rc, log := opts.Replication, opts.Logger
	slot := rc.Slot
	shrink := &shrinkWindow{span: shrinkSpan, min: shrinkMin}
	held := &holderLog{after: opts.SlotHolderAlertAfter, slot: slot, log: log}
	periodic{dsn: rc.DSN, password: rc.PasswordSource, interval: opts.SlotMetricsInterval, timeout: max(opts.SlotMetricsInterval, 5*time.Second), atOnce: true,
		run: func(ctx context.Context, conn *pgconn.PgConn) error {
			// On an ordinary connection: it works while the replication stream
			// is stuck, and on a standby instance that does not hold the slot.
			q := replication.NewQuerier(conn)
			s, err := replication.ReadSlot(ctx, q, slot)
			switch {
			case errors.Is(err, replication.ErrSlotMissing):
				shrink.reset()
				obs.SlotPolled(nil)
				obs.SlotHeldBack(0, opts.SlotHolderAlertAfter)
				obs.SlotWALTimeLeft(0, false)
				return nil
			case err != nil:
				return err
			}
			obs.SlotPolled(&s)
			var left time.Duration
			known := false
			if s.SafeWALSize == nil {
				shrink.reset()
			} else {
				left, known = replication.TimeLeft(s, shrink.add(time.Now(), float64(*s.SafeWALSize)))
			}
			obs.SlotWALTimeLeft(left, known)
			h, err := replication.ReadHolders(ctx, q, s)
			if err != nil {
				return err
			}
			obs.SlotHeldBack(held.observe(h), opts.SlotHolderAlertAfter)
			return nil
		},
		failed: func(err error, first bool) {
			obs.SlotPollFailed()
			if first {
				log.Warn("reading pg_replication_slots failed; the walrelay_slot_* metrics are stale until it works again",
					"slot", slot, "error", err)
			}
		},
		recovered: func() { log.Info("reading pg_replication_slots works again", "slot", slot) },
	}.loop(ctx)
}

// shrinkSpan is the span of readings over which the rate at which
// safe_wal_size shrinks is measured, for walrelay_slot_wal_time_left_seconds;
// shrinkMin is how long it must have shrunk without growing before a rate is
// given. A slot that keeps up grows it back whenever restart_lsn moves (at
// least every 15 s or so under writes: Postgres logs a running-transactions
// record that often), so only a slot held back shrinks it for a minute.
const (
	shrinkSpan = 5 * time.Minute
	shrinkMin  = time.Minute
)

// shrinkWindow measures how fast a reading (safe_wal_size) shrinks, over the
// readings of the last span since it last grew. Used by one goroutine.
type shrinkWindow struct {
	span, min time.Duration
	samples   []shrinkSample
}

type shrinkSample struct {
	at time.Time
	v  float64
}

// add records the reading v taken at at and returns how fast the readings
// shrank since it last grew (within the span), per second: 0 until they have
// shrunk for min without growing, and while they do not shrink.
func (w *shrinkWindow) add(at time.Time, v float64) float64 {
	if n := len(w.samples); n > 0 && v > w.samples[n-1].v {
		w.samples = w.samples[:0] // it grew: the slot moved
	}
	w.samples = append(w.samples, shrinkSample{at, v})
	i := 0
	for i < len(w.samples)-2 && at.Sub(w.samples[i+1].at) >= w.span {
		i++
	}
	w.samples = w.samples[i:]
	first := w.samples[0]
	if d := at.Sub(first.at); d > 0 && d >= w.min {
		return (first.v - v) / d.Seconds()
	}
	return 0
}

// reset forgets the readings (safe_wal_size unlimited, or the slot gone).
func (w *shrinkWindow) reset() { w.samples = w.samples[:0] }

// holderLog says, once per session (or prepared transaction), that it has
// held the slot back longer than after, naming it. Used by one goroutine.
type holderLog struct {
	after  time.Duration // 0: never
	slot   string
	log    *slog.Logger
	warned string // the holder last warned about
}

// observe logs the oldest holder of h when it first holds the slot longer
// than after, and returns the age of the oldest transaction holding it (0
// when none does).
func (l *holderLog) observe(h replication.Holders) time.Duration {
	var age time.Duration
	who := ""
	if s, ok := h.Oldest(); ok && s.XactAge > 0 {
		age, who = s.XactAge, s.String()
	}
	for _, p := range h.Prepared {
		if p.Age > age {
			age, who = p.Age, p.String()
		}
	}
	key, _, _ := strings.Cut(who, ",")
	if l.after > 0 && age >= l.after && key != l.warned {
		l.warned = key
		l.log.Warn("a transaction holds the replication slot back: the slot retains WAL (and catalog rows) until it ends; end it, or find out why it stays open",
			"slot", l.slot, "holder", who, "retained_wal_bytes", h.RetainedBytes, "alert_after", l.after.String())
	}
	if age == 0 {
		l.warned = ""
	}
	return age
}

// startSlotPoll starts pollSlot for the slot unless
// opts.SlotMetricsInterval is 0 or no Observer would see its readings, and
// returns the function that stops it.
func startSlotPoll(ctx context.Context, opts Options, obs Observer) (stop func()) {
	if opts.SlotMetricsInterval <= 0 || opts.Observer == nil {
		return func() {}
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		pollSlot(pctx, opts, obs)
	}()
	return func() {
		cancel()
		<-done
	}
}
