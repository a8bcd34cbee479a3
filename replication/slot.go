package replication

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrSlotMissing is the cause of ReadSlot's error for a slot that does not
// exist; it wraps ErrMissing.
var ErrSlotMissing = fmt.Errorf("replication slot %w", ErrMissing)

// Slot is a replication slot as pg_replication_slots shows it, read by
// ReadSlot. A NULL reads as the zero value (or nil for a pointer). Columns
// that only newer servers have are pointers, nil on a server without them:
// Has tells such a missing column from a NULL.
type Slot struct {
	Name     string
	Plugin   string // output plugin; "" for a physical slot
	Type     string // "logical" or "physical"
	Database string // "" for a physical slot
	// InCurrentDatabase reports that the slot belongs to the database of the
	// connection that read it.
	InCurrentDatabase bool
	Temporary         bool
	Active            bool
	ActivePID         int32 // the process streaming from the slot; 0 while inactive
	// RestartLSN is the oldest WAL the slot keeps; ConfirmedFlushLSN is the
	// position its consumer confirmed, where streaming resumes (0 for a
	// physical slot).
	RestartLSN        pglogrepl.LSN
	ConfirmedFlushLSN pglogrepl.LSN
	// CatalogXmin is the oldest transaction whose catalog rows the slot
	// keeps (0 when NULL: a physical slot). Postgres advances it only past
	// positions the consumer confirmed, so a row of a transaction older than
	// it has been confirmed.
	CatalogXmin uint32
	// WALStatus is reserved, extended, unreserved or lost (13+; "" when the
	// slot never reserved WAL).
	WALStatus string
	// SafeWALSize is the WAL that can still be written before the slot is in
	// danger of losing WAL it needs (13+); nil when max_slot_wal_keep_size is
	// unlimited or the WAL is lost.
	SafeWALSize *int64
	TwoPhase    *bool // 14+
	// Conflicting reports a logical slot invalidated by a conflict with
	// recovery (16+; nil for a physical slot).
	Conflicting *bool
	// InvalidationReason says why Postgres invalidated the slot, "" while it
	// is valid (17+).
	InvalidationReason *string
	Failover           *bool      // 17+: synchronized to physical standbys
	Synced             *bool      // 17+: a standby's copy of a failover slot
	InactiveSince      *time.Time // 17+: since when nothing streams from it; nil while active

	// WALEnd is the server's WAL position when the slot was read
	// (pg_current_wal_lsn(), on a standby the last replayed position): the
	// reference of RetainedBytes and LagBytes. 0 when unknown.
	WALEnd pglogrepl.LSN

	columns map[string]bool
}

// Has reports whether the server that was read has the column of
// pg_replication_slots (e.g. "invalidation_reason", Postgres 17+).
func (s Slot) Has(column string) bool { return s.columns[column] }

// RetainedBytes is the WAL the server keeps for the slot: WALEnd less
// RestartLSN, 0 when either is unknown.
func (s Slot) RetainedBytes() int64 { return lsnDiff(s.WALEnd, s.RestartLSN) }

// LagBytes is the WAL written since the slot's confirmed position: WALEnd
// less ConfirmedFlushLSN, 0 when either is unknown.
func (s Slot) LagBytes() int64 { return lsnDiff(s.WALEnd, s.ConfirmedFlushLSN) }

func lsnDiff(a, b pglogrepl.LSN) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	return int64(a - b)
}

// slotQuery reads a slot as JSON: to_jsonb of the row carries every column
// the server has, by name, whatever its version, so no column list follows
// the version (a missing key is a column the server lacks, a JSON null a
// NULL), and timestamps come in ISO 8601 whatever the DateStyle.
const slotQuery = `SELECT to_jsonb(s)::text, coalesce(s.database = current_database(), false),
	(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)::text
	FROM pg_replication_slots s WHERE s.slot_name = $1`

// ReadSlot reads the slot name through q. A slot that does not exist is an
// error wrapping ErrSlotMissing. It changes nothing and works on a primary
// and on a standby; the caller's role needs no privilege for it.
func ReadSlot(ctx context.Context, q Querier, name string) (Slot, error) {
	rows, err := q.queryRows(ctx, slotQuery, name)
	if err != nil {
		return Slot{}, fmt.Errorf("read slot %s: %w", name, err)
	}
	if len(rows) == 0 {
		return Slot{}, fmt.Errorf("%s: %w", name, ErrSlotMissing)
	}
	if len(rows) != 1 {
		return Slot{}, fmt.Errorf("read slot %s: unexpected result", name)
	}
	s, err := slotFromRow(rows[0])
	if err != nil {
		return Slot{}, fmt.Errorf("read slot %s: %w", name, err)
	}
	return s, nil
}

// slotFromRow turns a row of slotQuery's columns (the slot as JSON, whether
// it is in the current database, the server's WAL position) into a Slot.
func slotFromRow(r [][]byte) (Slot, error) {
	if len(r) != 3 {
		return Slot{}, errors.New("unexpected result")
	}
	s, err := parseSlot(r[0])
	if err != nil {
		return Slot{}, err
	}
	s.InCurrentDatabase = string(r[1]) == "t"
	if r[2] != nil {
		if s.WALEnd, err = pglogrepl.ParseLSN(string(r[2])); err != nil {
			return Slot{}, fmt.Errorf("current WAL position %q: %w", r[2], err)
		}
	}
	return s, nil
}

// slotRow is a pg_replication_slots row as to_jsonb writes it.
type slotRow struct {
	SlotName           string     `json:"slot_name"`
	Plugin             *string    `json:"plugin"`
	SlotType           string     `json:"slot_type"`
	Database           *string    `json:"database"`
	Temporary          bool       `json:"temporary"`
	Active             bool       `json:"active"`
	ActivePID          *int32     `json:"active_pid"`
	RestartLSN         *string    `json:"restart_lsn"`
	ConfirmedFlushLSN  *string    `json:"confirmed_flush_lsn"`
	CatalogXmin        *string    `json:"catalog_xmin"` // xid: a JSON string
	WALStatus          *string    `json:"wal_status"`
	SafeWALSize        *int64     `json:"safe_wal_size"`
	TwoPhase           *bool      `json:"two_phase"`
	Conflicting        *bool      `json:"conflicting"`
	InvalidationReason *string    `json:"invalidation_reason"`
	Failover           *bool      `json:"failover"`
	Synced             *bool      `json:"synced"`
	InactiveSince      *time.Time `json:"inactive_since"`
}

// parseSlot turns to_jsonb's text of a pg_replication_slots row into a Slot.
func parseSlot(js []byte) (Slot, error) {
	var cols map[string]json.RawMessage
	if err := json.Unmarshal(js, &cols); err != nil {
		return Slot{}, err
	}
	var r slotRow
	if err := json.Unmarshal(js, &r); err != nil {
		return Slot{}, err
	}
	s := Slot{Name: r.SlotName, Type: r.SlotType, Temporary: r.Temporary, Active: r.Active, columns: make(map[string]bool, len(cols)),
		SafeWALSize: r.SafeWALSize, TwoPhase: r.TwoPhase, Conflicting: r.Conflicting, Failover: r.Failover, Synced: r.Synced, InactiveSince: r.InactiveSince}
	for c := range cols {
		s.columns[c] = true
	}
	s.Plugin, s.Database, s.WALStatus = deref(r.Plugin), deref(r.Database), deref(r.WALStatus)
	if r.ActivePID != nil {
		s.ActivePID = *r.ActivePID
	}
	if r.CatalogXmin != nil {
		x, err := strconv.ParseUint(*r.CatalogXmin, 10, 32)
		if err != nil {
			return Slot{}, fmt.Errorf("catalog_xmin %q: %w", *r.CatalogXmin, err)
		}
		s.CatalogXmin = uint32(x)
	}
	if s.columns["invalidation_reason"] {
		reason := deref(r.InvalidationReason)
		s.InvalidationReason = &reason
	}
	for _, l := range []struct {
		col string
		v   *string
		dst *pglogrepl.LSN
	}{{"restart_lsn", r.RestartLSN, &s.RestartLSN}, {"confirmed_flush_lsn", r.ConfirmedFlushLSN, &s.ConfirmedFlushLSN}} {
		if l.v == nil {
			continue
		}
		lsn, err := pglogrepl.ParseLSN(*l.v)
		if err != nil {
			return Slot{}, fmt.Errorf("%s %q: %w", l.col, *l.v, err)
		}
		*l.dst = lsn
	}
	return s, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// ensureSlot reads the slot, creating it when missing (as configured), and
// sets Start to its confirmed position. A slot walrelay cannot stream from
// is a *PrereqError.
func (c *Conn) ensureSlot(ctx context.Context) error {
	s, err := ReadSlot(ctx, c.querier(), c.cfg.Slot)
	exists := err == nil
	if err != nil && !errors.Is(err, ErrSlotMissing) {
		return fmt.Errorf("look up slot: %w", err)
	}
	if c.cfg.SlotFailover {
		if err := c.checkFailover(ctx, s, exists); err != nil {
			return err
		}
		w, err := c.primaryFailoverWarnings(ctx)
		if err != nil {
			return err
		}
		c.Warnings = append(c.Warnings, w...)
	}
	if !exists {
		if c.cfg.SlotMustExist {
			return &PrereqError{Check: "slot", Problem: fmt.Sprintf("replication slot %q disappeared while walrelay was using it: events committed after its last confirmed position may have been skipped", c.cfg.Slot),
				Fix: "find out who dropped it; recover with a replay since the last delivered event (it re-publishes the rows committed since then and creates the new slot), then start walrelay again",
				Err: &SlotLostError{Slot: c.cfg.Slot, System: c.System}}
		}
		if c.cfg.NoCreateSlot {
			slot, err := c.lit(c.cfg.Slot)
			if err != nil {
				return err
			}
			return &PrereqError{Check: "slot", Problem: fmt.Sprintf("replication slot %q does not exist", c.cfg.Slot),
				Fix:    fmt.Sprintf("run SELECT pg_create_logical_replication_slot(%s, 'pgoutput'); or let walrelay create missing slots (only events written after its creation are relayed)", slot),
				Config: []string{"NoCreateSlot"}, Err: ErrMissing}
		}
		if m := c.cfg.Marker; m != nil {
			if err := m.Mark(ctx); err != nil {
				return err
			}
		}
		var res pglogrepl.CreateReplicationSlotResult
		if c.Standby && c.cfg.PrimaryDSN != "" {
			stop := nudgeStandbySnapshot(ctx, c.cfg.PrimaryDSN, c.cfg.PasswordSource)
			defer stop()
		}
		res, err = c.createSlot(ctx, func(ctx context.Context) (pglogrepl.CreateReplicationSlotResult, error) {
			if c.cfg.SlotFailover {
				return pglogrepl.ParseCreateReplicationSlot(c.conn.Exec(ctx, failoverSlotSQL(c.cfg.Slot)))
			}
			return pglogrepl.CreateReplicationSlot(ctx, c.conn, c.cfg.Slot, "pgoutput",
				pglogrepl.CreateReplicationSlotOptions{SnapshotAction: "NOEXPORT_SNAPSHOT", Mode: pglogrepl.LogicalReplication})
		})
		if err != nil {
			// Not created (given up on, cancelled or refused): the mark goes
			// too, unless another process made the slot first.
			var pge *pgconn.PgError
			if m := c.cfg.Marker; m != nil && !(errors.As(err, &pge) && pge.Code == "42710") { // 42710: duplicate object
				m.Unmark(context.WithoutCancel(ctx))
			}
			var pe *PrereqError
			if errors.As(err, &pe) {
				return err
			}
			return fmt.Errorf("create slot %s: %w", c.cfg.Slot, err)
		}
		lsn, err := pglogrepl.ParseLSN(res.ConsistentPoint)
		if err != nil {
			return fmt.Errorf("create slot %s: consistent point: %w", c.cfg.Slot, err)
		}
		c.Start, c.Created = lsn, true
		return nil
	}
	switch {
	case s.Type != "logical" || s.Plugin != "pgoutput":
		return &PrereqError{Check: "slot", Problem: fmt.Sprintf("slot %q is a %s slot with plugin %q, not a pgoutput logical slot", c.cfg.Slot, s.Type, s.Plugin),
			Fix: "choose another slot name, or drop that slot", Config: []string{"Slot"}}
	case s.Temporary:
		return &PrereqError{Check: "slot", Problem: fmt.Sprintf("slot %q is temporary on this server (a standby's synchronized copy not persisted before a promotion, or another session's slot): walrelay cannot resume from it", c.cfg.Slot),
			Fix: "drop it and recover from the outbox table, or choose another slot name", Config: []string{"Slot"},
			Err: &SlotLostError{Slot: c.cfg.Slot, System: c.System}}
	case !s.InCurrentDatabase:
		return &PrereqError{Check: "slot", Problem: fmt.Sprintf("slot %q belongs to another database", c.cfg.Slot),
			Fix: "connect to the slot's database, or choose another slot name", Config: []string{"DSN", "Slot"}}
	case s.WALStatus == "lost":
		return &PrereqError{Check: "slot", Problem: fmt.Sprintf("slot %q was invalidated (wal_status lost, max_slot_wal_keep_size exceeded): WAL it needed is gone and events after its position may be missing", c.cfg.Slot),
			Fix: "recover with a replay since the last delivered event (it re-publishes the rows committed since then, drops the lost slot and creates the new one), then start walrelay again; raise max_slot_wal_keep_size",
			Err: &SlotLostError{Slot: c.cfg.Slot, System: c.System, Invalidated: invalidation(s)}}
	case s.ConfirmedFlushLSN == 0:
		return fmt.Errorf("slot %s: no confirmed_flush_lsn", c.cfg.Slot)
	}
	c.Start = s.ConfirmedFlushLSN
	return nil
}

// nudgeStandbySnapshot asks the primary at dsn to log a standby snapshot
// every second until stop is called: a slot created on a standby waits for
// one. Best effort: a failure (no privilege to run pg_log_standby_snapshot,
// the primary unreachable) only means the wait is the primary's own.
func nudgeStandbySnapshot(ctx context.Context, dsn string, src PasswordSource) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
			if conn, err := Connect(cctx, dsn, src); err == nil {
				_, _ = NewQuerier(conn).queryRows(cctx, "SELECT pg_log_standby_snapshot()")
				_ = conn.Close(context.Background())
			}
			ccancel()
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}()
	return func() { cancel(); <-done }
}

// invalidation says why a lost slot was invalidated, as far as the server
// tells (invalidation_reason on 17+).
func invalidation(s Slot) string {
	if s.InvalidationReason != nil && *s.InvalidationReason != "" {
		return "wal_status lost, " + *s.InvalidationReason
	}
	return "wal_status lost"
}

// failoverMinVersion is the first server_version_num with failover slots.
const failoverMinVersion = 170000

// failoverSlotSQL is the replication command that creates a pgoutput
// failover slot without exporting a snapshot (Postgres 17 syntax).
func failoverSlotSQL(slot string) string {
	return "CREATE_REPLICATION_SLOT " + pgx.Identifier{slot}.Sanitize() + " LOGICAL pgoutput (SNAPSHOT 'nothing', FAILOVER true)"
}

// checkFailover refuses SlotFailover on a server without failover slots,
// and an existing slot s that is not a failover slot.
func (c *Conn) checkFailover(ctx context.Context, s Slot, exists bool) error {
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
		return &PrereqError{Check: "slot_failover", Problem: fmt.Sprintf("a failover slot needs Postgres 17 or newer, the server is %d", v),
			Fix: "turn slot failover off, or upgrade Postgres to 17+", Config: []string{"SlotFailover"}}
	}
	if exists && (s.Failover == nil || !*s.Failover) {
		return &PrereqError{Check: "slot_failover", Problem: fmt.Sprintf("slot %q exists and is not a failover slot", c.cfg.Slot),
			Fix:    fmt.Sprintf("stop walrelay and run ALTER_REPLICATION_SLOT %s (FAILOVER true) on a replication connection (psql \"dbname=... replication=database\"), or turn slot failover off", pgx.Identifier{c.cfg.Slot}.Sanitize()),
			Config: []string{"SlotFailover"}}
	}
	return nil
}

// CopySlot creates the persistent logical slot dst as a copy of src
// through q (pg_copy_logical_replication_slot): dst resumes where src
// does, keeping the same WAL and catalog rows. src is left as it is. A copy
// is never a failover slot (SetSlotFailover).
func CopySlot(ctx context.Context, q Querier, src, dst string) error {
	if _, err := q.queryRows(ctx, "SELECT pg_copy_logical_replication_slot($1, $2)", src, dst); err != nil {
		return fmt.Errorf("copy slot %s to %s: %w", src, dst, err)
	}
	return nil
}

// SetSlotFailover makes slot a failover slot (Postgres 17+) over a
// replication connection opened with cfg.
func SetSlotFailover(ctx context.Context, cfg Config, slot string) error {
	c, err := connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close(context.Background()) }()
	if _, err := c.query(ctx, "ALTER_REPLICATION_SLOT "+pgx.Identifier{slot}.Sanitize()+" (FAILOVER true)"); err != nil {
		return fmt.Errorf("make slot %s a failover slot: %w", slot, err)
	}
	return nil
}

// DropSlot drops the replication slot name through q. It fails while a
// process streams from the slot; a slot that does not exist is an error too.
func DropSlot(ctx context.Context, q Querier, name string) error {
	if _, err := q.queryRows(ctx, "SELECT pg_drop_replication_slot($1)", name); err != nil {
		return fmt.Errorf("drop slot %s: %w", name, err)
	}
	return nil
}

// olderSlotsQuery reads the slots other than $1 whose xmin or catalog_xmin
// is as old as the xid $2 or older, the oldest first, as slotQuery does.
const olderSlotsQuery = `SELECT to_jsonb(s)::text, coalesce(s.database = current_database(), false),
	(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)::text
	FROM pg_replication_slots s
	WHERE s.slot_name <> $1 AND (age(s.catalog_xmin) >= age($2::xid) OR age(s.xmin) >= age($2::xid))
	ORDER BY greatest(coalesce(age(s.catalog_xmin), 0), coalesce(age(s.xmin), 0)) DESC, s.slot_name`

// readOlderSlots reads the slots other than name with a horizon (xmin or
// catalog_xmin) as old as the xid xmin or older.
func readOlderSlots(ctx context.Context, q Querier, name, xmin string) ([]Slot, error) {
	rows, err := q.queryRows(ctx, olderSlotsQuery, name, xmin)
	if err != nil {
		return nil, fmt.Errorf("read slots older than %s: %w", name, err)
	}
	out := make([]Slot, 0, len(rows))
	for _, r := range rows {
		s, err := slotFromRow(r)
		if err != nil {
			return nil, fmt.Errorf("read slots older than %s: %w", name, err)
		}
		out = append(out, s)
	}
	return out, nil
}
