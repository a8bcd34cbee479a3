package replication

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// Open connects with replication=database, checks the prerequisites, creates
// the publication and slot when missing (as configured) and reads the slot's
// confirmed position. Prerequisite failures are *PrereqError.
func Open(ctx context.Context, cfg Config) (*Conn, error) {
	c, err := connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	// The identity first: a slot found missing or lost is then known to be
	// on another WAL history (a failover) or not.
	if err := c.identify(ctx); err != nil {
		_ = c.conn.Close(context.Background())
		return nil, err
	}
	if err := c.setup(ctx); err != nil {
		_ = c.conn.Close(context.Background())
		return nil, err
	}
	return c, nil
}

func (c *Conn) setup(ctx context.Context) error {
	if err := c.checkServer(ctx); err != nil {
		return err
	}
	// The WAL position first, then the OIDs: a change at or after it was
	// written after the lookup began (see decoder.Config.OIDsReadAt).
	// A standby has no current insert position: its last replayed one.
	rows, err := c.query(ctx, "SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)::text")
	if err != nil {
		return fmt.Errorf("read the current WAL position: %w", err)
	}
	if len(rows) != 1 || len(rows[0]) != 1 {
		return errors.New("read the current WAL position: unexpected result")
	}
	if c.OIDsReadAt, err = pglogrepl.ParseLSN(string(rows[0][0])); err != nil {
		return fmt.Errorf("read the current WAL position: %w", err)
	}
	c.TableOIDs = make(map[string]uint32, len(c.tables))
	for _, t := range c.tables {
		oid, err := c.checkTable(ctx, t)
		if err != nil {
			return err
		}
		c.TableOIDs[t.String()] = oid
	}
	if err := c.ensurePublication(ctx); err != nil {
		return err
	}
	return c.ensureSlot(ctx)
}

func (c *Conn) checkServer(ctx context.Context) error {
	rows, err := c.query(ctx, "SELECT current_setting('server_version_num')::int, pg_is_in_recovery()")
	if err != nil {
		return fmt.Errorf("check server settings: %w", err)
	}
	if len(rows) != 1 || len(rows[0]) != 2 {
		return errors.New("check server settings: unexpected result")
	}
	version := string(rows[0][0])
	c.Standby = string(rows[0][1]) == "t"
	facts, err := readFacts(ctx, c.querier())
	if err != nil {
		return err
	}
	c.facts = facts
	if err := facts.checkWALLevel(); err != nil {
		return err
	}
	if v := version; len(v) < 6 || v < "140000" {
		return &PrereqError{Check: "server_version", Problem: "Postgres " + v + " is too old",
			Fix: "use Postgres 14 or newer (pgoutput messages need 14)"}
	}
	c.version, _ = strconv.Atoi(version)
	if c.Standby && c.version < 160000 {
		return &PrereqError{Check: "server_version", Problem: fmt.Sprintf("the server is a standby on Postgres %s: logical decoding on a standby needs 16 or newer", version),
			Fix: "connect walrelay to the primary, or upgrade to Postgres 16+", Config: []string{"DSN"}}
	}
	return facts.checkPrivilege()
}

// checkTable reports a missing table, else returns its OID.
func (c *Conn) checkTable(ctx context.Context, t TableName) (uint32, error) {
	ls, err := c.lit(t.Quoted())
	if err != nil {
		return 0, err
	}
	rows, err := c.query(ctx, "SELECT coalesce(to_regclass("+ls+")::oid, 0)")
	if err != nil {
		return 0, fmt.Errorf("check table %s: %w", t, err)
	}
	var oid uint64
	if len(rows) == 1 && len(rows[0]) == 1 {
		oid, _ = strconv.ParseUint(string(rows[0][0]), 10, 32)
	}
	if oid == 0 {
		return 0, &PrereqError{Check: "table", Problem: fmt.Sprintf("outbox table %s does not exist", t),
			Fix:    fmt.Sprintf("create it with walrelay migrate for table %s, or set the outbox table to yours (if you renamed or moved it, to its new name, or rename it back)", t),
			Config: []string{"Tables"}, Err: ErrMissing}
	}
	return uint32(oid), nil
}

// Finding is the outcome of one prerequisite check.
type Finding struct {
	Check string // server, platform, table, publication, slot
	OK    bool
	// Warn marks a finding that is not a failure but a trap to know about
	// (OK is false).
	Warn bool
	Note string // what was found, or the problem and its fix
}

// Diagnose runs every prerequisite check without changing anything and
// returns one finding per check. A missing publication or slot is fine when
// walrelay would create it. The error is only for failing to connect.
func Diagnose(ctx context.Context, cfg Config) ([]Finding, error) {
	// A DSN that points at a pooler fails here, and the error names it.
	c, err := connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer c.conn.Close(context.Background())
	cfg = c.cfg

	var out []Finding
	add := func(check string, err error, okNote string) {
		if err != nil {
			out = append(out, Finding{Check: check, Note: err.Error()})
			return
		}
		out = append(out, Finding{Check: check, OK: true, Note: okNote})
	}
	add("server", c.checkServer(ctx), "wal_level=logical, role may replicate")
	if note, warn := c.facts.platformNote(c.version); note != "" {
		out = append(out, Finding{Check: "platform", OK: !warn, Warn: warn, Note: note})
	}
	for _, t := range c.tables {
		_, err := c.checkTable(ctx, t)
		add("table", err, t.String()+" exists")
	}
	pubCfg := *c
	pubCfg.cfg.NoCreatePublication = true
	if err := pubCfg.ensurePublication(ctx); err != nil {
		if errors.Is(err, ErrMissing) && !cfg.NoCreatePublication {
			if err := c.checkCanCreatePublication(ctx, pgx.Identifier{cfg.Publication}.Sanitize()); err != nil {
				add("publication", err, "")
			} else {
				add("publication", nil, fmt.Sprintf("%q missing; walrelay run will create it", cfg.Publication))
			}
		} else {
			add("publication", err, "")
		}
	} else {
		add("publication", nil, fmt.Sprintf("%q includes the outbox tables", cfg.Publication))
	}
	slotCfg := *c
	slotCfg.cfg.NoCreateSlot = true
	if err := slotCfg.ensureSlot(ctx); err != nil {
		if errors.Is(err, ErrMissing) && !cfg.NoCreateSlot {
			add("slot", nil, fmt.Sprintf("%q missing; walrelay run will create it", cfg.Slot))
		} else {
			add("slot", err, "")
		}
	} else {
		add("slot", nil, fmt.Sprintf("%q at %s", cfg.Slot, slotCfg.Start))
		health, err := c.slotHealth(ctx)
		if err != nil {
			return out, err
		}
		out = append(out, health...)
	}
	if cfg.SlotFailover {
		warnings, err := c.primaryFailoverWarnings(ctx)
		if err != nil {
			return out, err
		}
		if len(warnings) == 0 {
			add("slot_failover", nil, "synchronized_standby_slots is set on the primary")
		}
		for _, w := range warnings {
			out = append(out, Finding{Check: "slot_failover", Note: w})
		}
		checks, err := CheckStandbys(ctx, cfg.DSN, cfg.Slot, cfg.PasswordSource)
		if err != nil {
			return out, err
		}
		for _, f := range checks {
			out = append(out, Finding{Check: "standby " + f.Server, OK: f.OK, Note: f.Note})
		}
	}
	return out, nil
}

// doctorWALRatePeriod is how long Diagnose measures the WAL rate for the
// time left before max_slot_wal_keep_size invalidates the slot.
const doctorWALRatePeriod = 2 * time.Second

// safeWALWarnWithin is the time left before max_slot_wal_keep_size
// invalidates the slot, at the current WAL rate, under which Diagnose warns.
const safeWALWarnWithin = time.Hour

// slotHealth is Diagnose's findings about the existing slot: what holds it
// back (slot-holder: a warning per session, prepared transaction or older
// slot) and, with max_slot_wal_keep_size set, how close it is to
// invalidation (slot-wal).
func (c *Conn) slotHealth(ctx context.Context) ([]Finding, error) {
	q := c.querier()
	s, err := ReadSlot(ctx, q, c.cfg.Slot)
	if err != nil {
		return nil, err
	}
	var out []Finding
	h, err := ReadHolders(ctx, q, s)
	if err != nil {
		out = append(out, Finding{Check: "slot-holder", Warn: true, Note: "cannot tell what holds the slot back: " + err.Error()})
	}
	for _, l := range h.Lines() {
		out = append(out, Finding{Check: "slot-holder", Warn: true, Note: l + fmt.Sprintf(": holds slot %q back (it retains %d bytes of WAL)", s.Name, h.RetainedBytes)})
	}
	if len(out) == 0 && err == nil {
		out = append(out, Finding{Check: "slot-holder", OK: true, Note: "no open or prepared transaction holds the slot back"})
	}
	var rate WALRate
	if s.SafeWALSize != nil {
		if rate, err = MeasureWALRate(ctx, q, doctorWALRatePeriod); err != nil {
			return append(out, Finding{Check: "slot-wal", Warn: true, Note: "cannot measure the WAL rate: " + err.Error()}), nil
		}
	}
	if note, atRisk := SafeWALNote(s, rate, safeWALWarnWithin); note != "" {
		out = append(out, Finding{Check: "slot-wal", OK: !atRisk, Warn: atRisk, Note: "safe_wal_size: " + note})
	}
	return out, nil
}
