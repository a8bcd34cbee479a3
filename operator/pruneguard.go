package operator

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// The outbox table is the safety net: its rows are what a replay or a
// recovery publishes again. Two things keep it in view: the prune guard (a
// row whose event may not be delivered yet is never pruned, here) and the
// retained span (how far back a replay can reach, relay/retention.go),
// shown by walrelay status and exported as metrics.

// PruneGuard tells which outbox rows may be deleted without losing the only
// copy of an event that may not have reached Kafka.
//
// While the slot exists, a row may go once the transaction that wrote it is
// older than the slot's catalog_xmin. Postgres sets catalog_xmin from a
// running-transactions record at a position the consumer confirmed: every
// transaction with an older id had ended before that position, so a
// committed one is at or before the confirmed position, and walrelay
// confirms a position only once Kafka acknowledged everything before it.
// A row's xmin is the inserting (sub)transaction's id; a subtransaction's
// id is newer than its parent's, so the rule holds for it too. Rows an
// UPDATE rewrote get a newer xmin: kept longer, never shorter. catalog_xmin
// lags the confirmed position (it follows the slot's restart point), so
// the rule keeps rows a little longer than needed, never less.
//
// Without the slot (dropped, invalidated, or a slot of that name belongs to
// another database: slot names are cluster-wide, and another database's
// slot confirms nothing of this one), the last event delivered to Kafka
// decides instead: rows whose time column is older than its time less
// a margin may go (see LastDelivered, DefaultRecoveryMargin).
//
// While a recovery of the slot is unfinished (RecoveringSlot exists), no
// row may go: the recovery's new slot started after the gap, and its
// replay may not have sent the gap's rows yet.
type PruneGuard struct {
	Slot SlotState
	// Recovering is the slot of an unfinished recovery (RecoveringSlot);
	// while it exists, no row may go.
	Recovering SlotState
	// Delivered and Margin are used when the slot is missing or lost.
	Delivered *LastDelivery
	Margin    time.Duration
}

// NeedsDelivered reports whether the slot cannot vouch for any row, so
// that the last delivered event must (set Delivered).
func (g PruneGuard) NeedsDelivered() bool {
	return !g.recovering() && (!g.Slot.Exists || g.Slot.Lost || g.Slot.OtherDatabase)
}

// recovering reports an unfinished recovery of this database's slot.
func (g PruneGuard) recovering() bool { return g.Recovering.Exists && !g.Recovering.OtherDatabase }

// Condition returns an SQL condition over a row of the outbox table (its
// time column timeCol), true for the rows that may be deleted, with its
// arguments numbered from $first. With nothing to vouch for any row it is
// FALSE.
func (g PruneGuard) Condition(timeCol string, first int) (string, []any) {
	switch {
	case g.recovering():
	case !g.NeedsDelivered() && g.Slot.CatalogXmin != 0:
		// age() counts back from the same current id for both sides.
		return fmt.Sprintf("age(xmin) > age($%d::text::xid)", first), []any{strconv.FormatUint(uint64(g.Slot.CatalogXmin), 10)}
	case g.NeedsDelivered() && g.Delivered != nil && g.Delivered.Found:
		return fmt.Sprintf("%s < $%d::timestamptz", pgx.Identifier{timeCol}.Sanitize(), first), []any{g.Before()}
	}
	return "FALSE", nil
}

// Before is the time before which rows may go when the slot is gone: the
// last delivered event's time less the margin (zero when unknown).
func (g PruneGuard) Before() time.Time {
	if g.Delivered == nil || !g.Delivered.Found {
		return time.Time{}
	}
	return g.Delivered.Time.Add(-g.Margin)
}

// Reason says why the rows Condition refuses are kept.
func (g PruneGuard) Reason() string {
	switch {
	case g.recovering():
		return fmt.Sprintf("a recovery of replication slot %q is unfinished (its slot %q exists): its replay may not have sent them yet; "+
			"run the recovery again (the replay since the last delivered event) to finish it", g.Slot.Name, g.Recovering.Name)
	case !g.NeedsDelivered() && g.Slot.CatalogXmin != 0:
		return fmt.Sprintf("their transactions are not older than the catalog_xmin %d of replication slot %q (confirmed up to %s): "+
			"their events may not be in Kafka yet", g.Slot.CatalogXmin, g.Slot.Name, g.Slot.Confirmed)
	case !g.NeedsDelivered():
		return fmt.Sprintf("replication slot %q has no catalog_xmin yet: it has confirmed nothing", g.Slot.Name)
	case g.Delivered != nil && g.Delivered.Found:
		return fmt.Sprintf("replication slot %q is %s, and they are newer than the last event delivered to Kafka (%s) less %s: "+
			"they may be the only copy of events the slot never delivered; recover them with a replay first", g.Slot.Name, slotGone(g.Slot),
			g.Delivered.Time.Format(time.RFC3339), g.Margin)
	}
	return fmt.Sprintf("replication slot %q is %s and no event delivered to Kafka was found: every row may be the only copy of its event", g.Slot.Name, slotGone(g.Slot))
}

func slotGone(s SlotState) string {
	switch {
	case s.Exists && s.OtherDatabase && s.Database != "":
		return fmt.Sprintf("a slot of another database (%s), not this table's", s.Database)
	case s.Exists && s.OtherDatabase:
		return "a physical slot, not this table's"
	case s.Lost:
		return "invalidated (wal_status lost)"
	}
	return "missing"
}

// ReadPruneGuard reads the slot over conn; when NeedsDelivered, set
// Delivered (and Margin) before using the guard.
func ReadPruneGuard(ctx context.Context, conn *pgx.Conn, slot string) (PruneGuard, error) {
	g := PruneGuard{Margin: DefaultRecoveryMargin}
	var err error
	if g.Slot, err = ReadSlotState(ctx, conn, slot); err != nil {
		return g, err
	}
	g.Recovering, err = ReadSlotState(ctx, conn, RecoveringSlot(slot))
	return g, err
}
