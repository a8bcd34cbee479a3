package relay

import (
	"context"
	"errors"
	"log/slog"
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
// done and sets the walrelay_slot_* gauges. Failures are counted and logged
// once per failure streak; they never stop the relay. A missing slot is a
// reading (walrelay_slot_exists 0), not a failure.
func pollSlot(ctx context.Context, dsn, slot string, src replication.PasswordSource, interval time.Duration, m *metrics, log *slog.Logger) {
	periodic{dsn: dsn, password: src, interval: interval, timeout: max(interval, 5*time.Second), atOnce: true,
		run: func(ctx context.Context, conn *pgconn.PgConn) error {
			// On an ordinary connection: it works while the replication stream
			// is stuck, and on a standby instance that does not hold the slot.
			s, err := replication.ReadSlot(ctx, replication.NewQuerier(conn), slot)
			switch {
			case errors.Is(err, replication.ErrSlotMissing):
				m.observeSlot(slotState{})
			case err != nil:
				return err
			default:
				m.observeSlot(slotStateOf(s))
			}
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
		pollSlot(pctx, opts.Replication.DSN, opts.Replication.Slot, opts.Replication.PasswordSource, opts.SlotMetricsInterval, m, opts.Logger)
	}()
	return func() {
		cancel()
		<-done
	}
}
