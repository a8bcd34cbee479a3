package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/walrelay/walrelay/cmd/walrelay/internal/config"
	"github.com/walrelay/walrelay/relay"
)

// With on-slot-lost recover, run recovers a lost slot by itself: the
// recovery `walrelay replay --since-last-delivered` performs (mark and
// create the new slot, replay every row since the last delivered event
// less the default margin), then the relay again on the new slot. Each
// recovery is an ERROR log line and counts in walrelay_slot_recoveries_total.

// recoverAgainAfter is how long after a recovery a slot lost again stops
// run instead of being recovered once more: a slot that keeps vanishing
// (another process dropping it, max_slot_wal_keep_size below one replay's
// WAL) needs an operator, not a loop of replays.
const recoverAgainAfter = 10 * time.Minute

// runRelay is run (relay.Run with its telemetry attached) with opts,
// followed, while cfg says on-slot-lost recover, by the recovery of a lost
// slot and another run.
func runRelay(ctx context.Context, cfg config.Config, opts relay.Options, c *call, run func(context.Context, relay.Options) error) error {
	var last time.Time
	for {
		err := run(ctx, opts)
		var lost *relay.SlotLostError
		if cfg.OnSlotLost != config.OnSlotLostRecover || !errors.As(err, &lost) || ctx.Err() != nil {
			return err
		}
		if !last.IsZero() && time.Since(last) < recoverAgainAfter {
			c.log.Error("replication slot lost again soon after the previous recovery: not recovering by itself twice within "+recoverAgainAfter.String(),
				"slot", cfg.Slot, "previous_recovery", last.UTC().Format(time.RFC3339))
			return err
		}
		c.log.Error("replication slot lost: recovering by itself as on-slot-lost says (replay of every outbox row since the last delivered event, then streaming from a new slot); consumers see duplicates",
			"slot", cfg.Slot, "setting", "on-slot-lost", "error", err.Error())
		rc := config.DefaultReplayConfig()
		rc.Config, rc.SinceLastDelivered, rc.Progress = cfg, true, config.ProgressLog
		if code := replay(ctx, rc, c, "recovery done: walrelay run streams from the new slot now"); code != ExitOK {
			return fmt.Errorf("on-slot-lost recover: the recovery of replication slot %q failed (exit %d, see above); the slot was lost: %w", cfg.Slot, code, lost)
		}
		opts.SlotRecoveries++
		last = time.Now()
		c.log.Warn("replication slot recovered: streaming from the new slot", "slot", cfg.Slot, "recoveries", opts.SlotRecoveries)
	}
}
