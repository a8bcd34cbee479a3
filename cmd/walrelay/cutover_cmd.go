package main

import (
	"context"

	"github.com/walrelay/walrelay/cmd/walrelay/internal/config"
	"github.com/walrelay/walrelay/operator"
)

const cutoverUsage = `Usage: walrelay cutover --from-slot <debezium slot> [flags]

Takes over from a running Debezium outbox connector without a gap:
  1. creates walrelay's publication (when missing) and slot, and prints its start LSN;
  2. waits until --from-slot has confirmed that position (Debezium delivered and
     committed everything before it), printing both positions; it stops with
     exit 1 if walrelay's slot is dropped, invalidated or moved meanwhile;
  3. says it is safe to stop Debezium and exits 0. It stops nothing itself.
Then stop Debezium, start walrelay run with the same --slot/--publication/--table
and --create-slot=false, and drop Debezium's slot with
  walrelay cutover --from-slot <debezium slot> --drop-from-slot --start-lsn <printed LSN>
which refuses while Debezium runs or walrelay's slot is missing or invalidated.
Events committed between walrelay's start and Debezium's stop arrive twice:
consumers deduplicate on the id header. See docs/migrating-from-debezium.md.
`

// cutoverCommand is `walrelay cutover`.
func cutoverCommand(ctx context.Context, cfg config.CutoverConfig, c *call) int {
	var err error
	if cfg.DropFromSlot {
		err = operator.DropFromSlot(ctx, cfg.Cutover(), c.stdout)
	} else {
		err = operator.Cutover(ctx, cfg.Cutover(), c.stdout)
	}
	return c.result("cutover failed", err, "slot", cfg.Slot, "from_slot", cfg.FromSlot)
}
