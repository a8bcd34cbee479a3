package replication

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

func (c *Conn) ensureSlot(ctx context.Context) error {
	slot, err := c.lit(c.cfg.Slot)
	if err != nil {
		return err
	}
	q := "SELECT plugin, slot_type, database = current_database(), coalesce(confirmed_flush_lsn::text, ''), coalesce(wal_status, '') " +
		"FROM pg_replication_slots WHERE slot_name = " + slot
	rows, err := c.query(ctx, q)
	if err != nil {
		return fmt.Errorf("look up slot: %w", err)
	}
	if c.cfg.SlotFailover {
		if err := c.checkFailover(ctx, slot, len(rows) > 0); err != nil {
			return err
		}
	}
	if len(rows) == 0 {
		if c.cfg.SlotMustExist {
			return &PrereqError{Check: "slot", Problem: fmt.Sprintf("replication slot %q disappeared while walrelay was using it: events committed after its last confirmed position may have been skipped", c.cfg.Slot),
				Fix: "find out who dropped it; reconcile the outbox rows written since then (or replay them), then restart walrelay, which creates a new slot at the current position"}
		}
		if c.cfg.NoCreateSlot {
			return &PrereqError{Check: "slot", Problem: fmt.Sprintf("replication slot %q does not exist", c.cfg.Slot),
				Fix: fmt.Sprintf("run SELECT pg_create_logical_replication_slot(%s, 'pgoutput'); or start walrelay with --create-slot (only events written after its creation are relayed)", slot), Err: ErrMissing}
		}
		var res pglogrepl.CreateReplicationSlotResult
		if c.cfg.SlotFailover {
			res, err = pglogrepl.ParseCreateReplicationSlot(c.conn.Exec(ctx, failoverSlotSQL(c.cfg.Slot)))
		} else {
			res, err = pglogrepl.CreateReplicationSlot(ctx, c.conn, c.cfg.Slot, "pgoutput",
				pglogrepl.CreateReplicationSlotOptions{SnapshotAction: "NOEXPORT_SNAPSHOT", Mode: pglogrepl.LogicalReplication})
		}
		if err != nil {
			return fmt.Errorf("create slot %s: %w", c.cfg.Slot, err)
		}
		lsn, err := pglogrepl.ParseLSN(res.ConsistentPoint)
		if err != nil {
			return fmt.Errorf("create slot %s: consistent point: %w", c.cfg.Slot, err)
		}
		c.Start, c.Created = lsn, true
		return nil
	}
	r := rows[0]
	plugin, typ, sameDB, confirmed, walStatus := string(r[0]), string(r[1]), string(r[2]), string(r[3]), string(r[4])
	switch {
	case typ != "logical" || plugin != "pgoutput":
		return &PrereqError{Check: "slot", Problem: fmt.Sprintf("slot %q is a %s slot with plugin %q, not a pgoutput logical slot", c.cfg.Slot, typ, plugin),
			Fix: "choose another --slot, or drop that slot"}
	case sameDB != "t":
		return &PrereqError{Check: "slot", Problem: fmt.Sprintf("slot %q belongs to another database", c.cfg.Slot),
			Fix: "connect to the slot's database, or choose another --slot"}
	case walStatus == "lost":
		return &PrereqError{Check: "slot", Problem: fmt.Sprintf("slot %q was invalidated (wal_status lost, max_slot_wal_keep_size exceeded): WAL it needed is gone and events after its position may be missing", c.cfg.Slot),
			Fix: "reconcile the outbox rows written since the slot's confirmed position, then drop and recreate the slot (SELECT pg_drop_replication_slot(...)); raise max_slot_wal_keep_size"}
	}
	lsn, err := pglogrepl.ParseLSN(confirmed)
	if err != nil {
		return fmt.Errorf("slot %s: confirmed_flush_lsn %q: %w", c.cfg.Slot, confirmed, err)
	}
	c.Start = lsn
	return nil
}

// failoverMinVersion is the first server_version_num with failover slots.
const failoverMinVersion = 170000

// failoverSlotSQL is the replication command that creates a pgoutput
// failover slot without exporting a snapshot (Postgres 17 syntax).
func failoverSlotSQL(slot string) string {
	return "CREATE_REPLICATION_SLOT " + pgx.Identifier{slot}.Sanitize() + " LOGICAL pgoutput (SNAPSHOT 'nothing', FAILOVER true)"
}

// checkFailover refuses SlotFailover on a server without failover slots,
// and an existing slot (slotLit, quoted) that is not a failover slot.
func (c *Conn) checkFailover(ctx context.Context, slotLit string, exists bool) error {
	rows, err := c.query(ctx, "SELECT current_setting('server_version_num')::int")
	if err != nil {
		return fmt.Errorf("check server version: %w", err)
	}
	if len(rows) != 1 || len(rows[0]) != 1 {
		return errors.New("check server version: unexpected result")
	}
	v, err := strconv.Atoi(string(rows[0][0]))
	if err != nil {
		return fmt.Errorf("check server version: %w", err)
	}
	if v < failoverMinVersion {
		return &PrereqError{Check: "slot-failover", Problem: fmt.Sprintf("--slot-failover needs Postgres 17 or newer (failover slots), the server is %d", v),
			Fix: "remove --slot-failover (WALRELAY_SLOT_FAILOVER), or upgrade Postgres to 17+"}
	}
	if !exists {
		return nil
	}
	rows, err = c.query(ctx, "SELECT failover FROM pg_replication_slots WHERE slot_name = "+slotLit)
	if err != nil {
		return fmt.Errorf("look up slot failover: %w", err)
	}
	if len(rows) == 1 && string(rows[0][0]) != "t" {
		return &PrereqError{Check: "slot-failover", Problem: fmt.Sprintf("slot %q exists and is not a failover slot", c.cfg.Slot),
			Fix: fmt.Sprintf("stop walrelay and run ALTER_REPLICATION_SLOT %s (FAILOVER true) on a replication connection (psql \"dbname=... replication=database\"), or start without --slot-failover", pgx.Identifier{c.cfg.Slot}.Sanitize())}
	}
	return nil
}
