package relay

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walrelay/walrelay/replication"
)

// pollSlot reads the slot's row every interval (at once first) until ctx is
// done and hands each reading to obs (the walrelay_slot_* gauges). Failures are counted and logged
// once per failure streak; they never stop the relay. A missing slot is a
// reading (walrelay_slot_exists 0), not a failure.
func pollSlot(ctx context.Context, dsn, slot string, src replication.PasswordSource, interval time.Duration, obs Observer, log *slog.Logger) {
	periodic{dsn: dsn, password: src, interval: interval, timeout: max(interval, 5*time.Second), atOnce: true,
		run: func(ctx context.Context, conn *pgconn.PgConn) error {
			// On an ordinary connection: it works while the replication stream
			// is stuck, and on a standby instance that does not hold the slot.
			s, err := replication.ReadSlot(ctx, replication.NewQuerier(conn), slot)
			switch {
			case errors.Is(err, replication.ErrSlotMissing):
				obs.SlotPolled(nil)
			case err != nil:
				return err
			default:
				obs.SlotPolled(&s)
			}
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
		pollSlot(pctx, opts.Replication.DSN, opts.Replication.Slot, opts.Replication.PasswordSource, opts.SlotMetricsInterval, obs, opts.Logger)
	}()
	return func() {
		cancel()
		<-done
	}
}
