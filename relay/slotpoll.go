package relay

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// slotQuery reads the slot's health from pg_replication_slots. It runs on an
// ordinary connection, so it works while the replication stream is stuck and
// on a standby instance that does not hold the slot.
const slotQuery = `SELECT coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::float8::text,
	coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), 0)::float8::text,
	coalesce(wal_status, ''), coalesce(safe_wal_size, -1)::float8::text, active::text
	FROM pg_replication_slots WHERE slot_name = $1`

// slotState is one reading of the slot.
type slotState struct {
	exists    bool
	retained  float64 // bytes
	lag       float64 // bytes
	walStatus string
	safeWAL   float64 // bytes; -1 unlimited
	active    bool
}

// parseSlotRow turns slotQuery's row (text format) into a slotState.
func parseSlotRow(row [][]byte) (slotState, error) {
	if len(row) != 5 {
		return slotState{}, fmt.Errorf("slot query: %d columns, want 5", len(row))
	}
	st := slotState{exists: true, walStatus: string(row[2]), active: string(row[4]) == "true"}
	for i, dst := range []*float64{&st.retained, &st.lag, nil, &st.safeWAL} {
		if dst == nil {
			continue
		}
		v, err := strconv.ParseFloat(string(row[i]), 64)
		if err != nil {
			return slotState{}, fmt.Errorf("slot query: column %d: %w", i+1, err)
		}
		*dst = v
	}
	return st, nil
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
func pollSlot(ctx context.Context, dsn, slot string, interval time.Duration, m *metrics, log *slog.Logger) {
	periodic{dsn: dsn, interval: interval, timeout: max(interval, 5*time.Second), atOnce: true,
		run: func(ctx context.Context, conn *pgconn.PgConn) error {
			res := conn.ExecParams(ctx, slotQuery, [][]byte{[]byte(slot)}, nil, nil, nil).Read()
			if res.Err != nil {
				return res.Err
			}
			if len(res.Rows) == 0 {
				m.observeSlot(slotState{})
				return nil
			}
			st, err := parseSlotRow(res.Rows[0])
			if err != nil {
				return err
			}
			m.observeSlot(st)
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
		pollSlot(pctx, opts.Replication.DSN, opts.Replication.Slot, opts.SlotMetricsInterval, m, opts.Logger)
	}()
	return func() {
		cancel()
		<-done
	}
}
