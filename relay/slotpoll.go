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

// slotState is one reading of the slot.
type slotState struct {
	exists    bool
	retained  float64 // bytes
	lag       float64 // bytes
	walStatus string
	safeWAL   float64 // bytes; -1 unlimited
	active    bool
}

// slotStateOf is the reading of slot s.
func slotStateOf(s replication.Slot) slotState {
	st := slotState{exists: true, retained: float64(s.RetainedBytes()), lag: float64(s.LagBytes()),
		walStatus: s.WALStatus, safeWAL: -1, active: s.Active}
	if s.SafeWALSize != nil {
		st.safeWAL = float64(*s.SafeWALSize)
	}
	return st
}

// observeSlot sets the slot gauges from st.
func (m *metrics) observeSlot(st slotState) {
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	m.slotExists.Set(b(st.exists))
	m.slotActive.Set(b(st.active))
	m.slotRetained.Set(st.retained)
	m.slotLag.Set(st.lag)
	m.slotSafeWAL.Set(st.safeWAL)
	for _, s := range walStatuses {
		m.slotWALStatus.WithLabelValues(s).Set(b(s == st.walStatus))
	}
	m.slotPollLast.SetToCurrentTime()
}

// pollSlot reads the slot's row every interval (at once first) until ctx is
// done and sets the walrelay_slot_* gauges, with what holds the slot back
// (holders.go's reading) and the time left before max_slot_wal_keep_size
// invalidates it. Failures are counted and logged once per failure streak;
// they never stop the relay. A missing slot is a reading
// (walrelay_slot_exists 0), not a failure.
func pollSlot(ctx context.Context, opts Options, m *metrics) {
	rc, log := opts.Replication, opts.Logger
	slot := rc.Slot
	shrink := &shrinkWindow{span: shrinkSpan, min: shrinkMin}
	held := &holderLog{after: opts.SlotHolderAlertAfter, slot: slot, log: log}
	m.slotHolderAlertAfter.Set(opts.SlotHolderAlertAfter.Seconds())
	periodic{dsn: rc.DSN, password: rc.PasswordSource, interval: opts.SlotMetricsInterval, timeout: max(opts.SlotMetricsInterval, 5*time.Second), atOnce: true,
		run: func(ctx context.Context, conn *pgconn.PgConn) error {
			// On an ordinary connection: it works while the replication stream
			// is stuck, and on a standby instance that does not hold the slot.
			q := replication.NewQuerier(conn)
			s, err := replication.ReadSlot(ctx, q, slot)
			switch {
			case errors.Is(err, replication.ErrSlotMissing):
				shrink.reset()
				m.observeSlot(slotState{})
				m.slotHolderAge.Set(0)
				m.slotWALTimeLeft.Set(-1)
				return nil
			case err != nil:
				return err
			}
			m.observeSlot(slotStateOf(s))
			left := -1.0
			if s.SafeWALSize == nil {
				shrink.reset()
			} else if d, ok := replication.TimeLeft(s, shrink.add(time.Now(), float64(*s.SafeWALSize))); ok {
				left = d.Seconds()
			}
			m.slotWALTimeLeft.Set(left)
			h, err := replication.ReadHolders(ctx, q, s)
			if err != nil {
				return err
			}
			m.slotHolderAge.Set(held.observe(h).Seconds())
			return nil
		},
		failed: func(err error, first bool) {
			m.slotPollErrors.Inc()
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
// opts.SlotMetricsInterval is 0, and returns the function that stops it.
func startSlotPoll(ctx context.Context, opts Options, m *metrics) (stop func()) {
	if opts.SlotMetricsInterval <= 0 {
		return func() {}
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		pollSlot(pctx, opts, m)
	}()
	return func() {
		cancel()
		<-done
	}
}
