package operator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walrelay/walrelay/migrations"
	"github.com/walrelay/walrelay/replication"
)

// CutoverNudgePrefix is the prefix of the one transactional logical message
// Cutover writes after creating walrelay's slot. Debezium only confirms its
// slot on an offset commit after it emitted a record (a change or a
// heartbeat), so on an idle database its slot stays below walrelay's start
// unless a transaction after it arrives; this message is that transaction.
// Debezium turns a logical message into a record on <topic.prefix>.message
// unless message.prefix.exclude.list names the prefix. walrelay itself
// counts it as a foreign message.
const CutoverNudgePrefix = "walrelay.cutover"

// CutoverOptions are what Cutover and DropFromSlot need.
type CutoverOptions struct {
	DSN string
	// PasswordSource supplies the password of every connection to DSN (nil:
	// the DSN's); see replication.PasswordSource.
	PasswordSource replication.PasswordSource
	// Slot, Publication and Tables are walrelay's, as walrelay run gets
	// them; CreatePublication creates the publication when missing.
	Slot              string
	Publication       string
	Tables            []string
	CreatePublication bool
	// FromSlot is the slot of the system walrelay replaces (Debezium's
	// slot.name). Required.
	FromSlot string
	// Timeout bounds the wait for FromSlot to reach walrelay's start.
	Timeout time.Duration
	// PollInterval is how often both slots are read.
	PollInterval time.Duration
	// StallWarning is how long FromSlot may stay still before Cutover says
	// what usually keeps it there (0: never).
	StallWarning time.Duration
	// Nudge writes one transactional logical message (CutoverNudgePrefix)
	// after walrelay's slot exists, so an idle database has a transaction
	// past walrelay's start that FromSlot can confirm.
	Nudge bool
	// StartLSN is walrelay's start (the consistent point the first Cutover
	// printed), for DropFromSlot. Zero: walrelay's slot's confirmed
	// position, which is at or past its start.
	StartLSN pglogrepl.LSN
}

// replication is the replication configuration of walrelay's slot.
func (o CutoverOptions) replication() replication.Config {
	return replication.Config{DSN: o.DSN, Slot: o.Slot, Publication: o.Publication, Tables: o.Tables,
		NoCreatePublication: !o.CreatePublication, PasswordSource: o.PasswordSource}
}

// cutoverSlot is what cutover reads of a replication slot.
type cutoverSlot struct {
	Plugin    string
	Logical   bool
	SameDB    bool
	Active    bool
	Confirmed pglogrepl.LSN
	WALStatus string
	// InvalidationReason is pg_replication_slots.invalidation_reason
	// (Postgres 17+); Conflicting is its conflicting column (Postgres 16+).
	// Both are empty where the server has no such column.
	InvalidationReason string
	Conflicting        bool
	WALEnd             pglogrepl.LSN // pg_current_wal_lsn() at the time of the read
}

// invalidated says why Postgres invalidated the slot ("" while it is valid):
// wal_status lost (the WAL it needed was removed), an invalidation reason,
// or a conflict with recovery on a standby.
func (s cutoverSlot) invalidated() string {
	switch {
	case s.WALStatus == "lost":
		return "wal_status lost"
	case s.InvalidationReason != "":
		return "invalidation_reason " + s.InvalidationReason
	case s.Conflicting:
		return "conflicting with recovery"
	}
	return ""
}

// ErrSlotMissing reports that a slot cutover needs does not exist.
var ErrSlotMissing = replication.ErrSlotMissing

func readSlot(ctx context.Context, conn *pgconn.PgConn, name string) (cutoverSlot, error) {
	s, err := replication.ReadSlot(ctx, replication.NewQuerier(conn), name)
	if err != nil {
		return cutoverSlot{}, err
	}
	c := cutoverSlot{Plugin: s.Plugin, Logical: s.Type == "logical", SameDB: s.InCurrentDatabase, Active: s.Active,
		Confirmed: s.ConfirmedFlushLSN, WALStatus: s.WALStatus, WALEnd: s.WALEnd}
	if s.InvalidationReason != nil {
		c.InvalidationReason = *s.InvalidationReason
	}
	if s.Conflicting != nil {
		c.Conflicting = *s.Conflicting
	}
	return c, nil
}

// checkFromSlot refuses a --from-slot that cannot be the slot of the system
// walrelay replaces.
func checkFromSlot(name string, s cutoverSlot) error {
	switch {
	case !s.Logical:
		return fmt.Errorf("slot %q is not a logical replication slot", name)
	case !s.SameDB:
		return fmt.Errorf("slot %q belongs to another database: connect --postgres-dsn to the database Debezium captures", name)
	case s.invalidated() != "":
		return fmt.Errorf("slot %q was invalidated (%s): the WAL it still needed is gone, so Debezium cannot deliver what it had not read; reconcile the outbox rows since its position by hand", name, s.invalidated())
	}
	return nil
}

// ownSlotPhase is the step of the cutover at which walrelay's slot is checked.
type ownSlotPhase int

const (
	// waitPhase: cutover waits for Debezium; nothing streams from walrelay's
	// slot yet, so its confirmed position is still its start.
	waitPhase ownSlotPhase = iota
	// dropPhase: --drop-from-slot, with walrelay run streaming from its slot.
	dropPhase
)

// checkOwnSlot says why walrelay's slot (name, as read with readErr) no
// longer takes over from Debezium at start, or nil while it does. Debezium's
// slot may go only while walrelay's covers every transaction committed after
// start: it must exist, be valid, and begin at or before start.
//
// "Begin" is confirmed_flush_lsn, not restart_lsn: walrelay streams from the
// slot's confirmed_flush_lsn (replication.Open's Start, the consistent point
// of a new slot) and Postgres sends exactly the transactions that commit after
// it. restart_lsn is only where decoding starts reading WAL, at or below
// confirmed_flush_lsn (far below it while a long transaction was open), so a
// slot created again after start can have a restart_lsn at or before start and
// still skip every commit between start and its confirmed_flush_lsn.
//
// In the drop phase walrelay run has moved the position past start, and
// pg_replication_slots keeps no record of where a slot began, so there only
// existence and validity can be checked; DropFromSlot compares Debezium's
// slot with the confirmed position itself when --start-lsn is not given.
func checkOwnSlot(name string, s cutoverSlot, readErr error, start pglogrepl.LSN, phase ownSlotPhase, from string) error {
	if readErr != nil && !errors.Is(readErr, ErrSlotMissing) {
		return fmt.Errorf("walrelay's slot: %w", readErr)
	}
	again := "run walrelay cutover again (it waits for Debezium to reach walrelay's slot's new start)"
	var problem string
	switch {
	case readErr != nil && phase == waitPhase:
		problem = "was dropped while waiting"
	case readErr != nil:
		problem = "does not exist"
	case !s.Logical || !s.SameDB || s.Plugin != "pgoutput":
		problem = fmt.Sprintf("is no longer a pgoutput logical slot of this database (plugin %q)", s.Plugin)
		again = fmt.Sprintf("drop it (SELECT pg_drop_replication_slot('%s')) and %s", name, again)
	case s.invalidated() != "":
		problem = fmt.Sprintf("was invalidated (%s): the WAL it still needed is gone", s.invalidated())
		again = fmt.Sprintf("drop it (SELECT pg_drop_replication_slot('%s')), raise max_slot_wal_keep_size and %s", name, again)
	case phase == waitPhase && s.Confirmed > start:
		problem = fmt.Sprintf("is at %s, past walrelay's start %s: it was created again or something streamed from it", s.Confirmed, start)
		again += " and start walrelay run only after it says safe"
	default:
		return nil
	}
	if phase == waitPhase {
		return fmt.Errorf("walrelay's slot %s %s, so walrelay would not relay everything committed after %s; Debezium keeps running and its slot %s stays: %s",
			name, problem, start, from, again)
	}
	return fmt.Errorf("walrelay's slot %s %s, so walrelay may not relay everything committed after Debezium's position; kept %s, which holds it: "+
		"run walrelay on it instead (walrelay run --slot %s --create-slot=false --publication <Debezium's publication.name> --create-publication=false; "+
		"see docs/migrating-from-debezium.md)", name, problem, from, from)
}

// cutoverProgress is one line of progress: where the old slot is, and how
// much WAL it still has to confirm before it reaches walrelay's start; when
// the slot has not moved for still, what it waits for.
func cutoverProgress(from string, s cutoverSlot, start pglogrepl.LSN, still time.Duration) string {
	if s.Confirmed >= start {
		return fmt.Sprintf("%s confirmed %s >= walrelay start %s", from, s.Confirmed, start)
	}
	active := "active"
	switch {
	case !s.Active:
		active = "INACTIVE (is Debezium running?)"
	case still >= time.Second:
		// Debezium moves its slot only when Kafka Connect commits offsets: the
		// bytes to go stand still in between, however much it delivers.
		active = fmt.Sprintf("active, unchanged for %s: Debezium confirms its slot at Kafka Connect's next offset commit "+
			"(offset.flush.interval.ms, 60s by default)", still.Round(time.Second))
	}
	return fmt.Sprintf("waiting: %s confirmed %s, walrelay start %s, %d bytes to go, slot %s", from, s.Confirmed, start,
		uint64(start-s.Confirmed), active)
}

// nextSteps is what cutover prints once it is safe: the commands to run,
// with the walrelay run flags the outbox needs (layout is the tables'
// column layout, "debezium" for Debezium's).
func nextSteps(cfg CutoverOptions, start pglogrepl.LSN, layout string) string {
	run := fmt.Sprintf("walrelay run --slot %s --publication %s", cfg.Slot, cfg.Publication)
	if tables := strings.Join(cfg.Tables, ","); tables != migrations.DefaultTable {
		run += " --table " + tables
	}
	if layout == "debezium" {
		run += " --columns debezium"
	}
	return fmt.Sprintf("safe to stop Debezium now: it delivered everything committed before %s.\n"+
		"next: 1. stop the Debezium connector; 2. start %s --create-slot=false;\n"+
		"      3. walrelay cutover --from-slot %s --drop-from-slot --start-lsn %s\n"+
		"events committed between %s and Debezium's stop arrive twice: deduplicate on the id header\n",
		start, run, cfg.FromSlot, start, start)
}

// outboxLayout is "debezium" when every outbox table has Debezium's outbox
// columns (aggregatetype, aggregateid, type) and not walrelay's
// (aggregate_type, aggregate_id, event_type), else "default".
func outboxLayout(ctx context.Context, q replication.Querier, tables []string) string {
	for _, t := range tables {
		tn, err := replication.ParseTable(t)
		if err != nil {
			return "default"
		}
		cols, err := replication.TableColumns(ctx, q, tn)
		if err != nil {
			return "default"
		}
		has := map[string]bool{}
		for _, c := range cols {
			has[c] = true
		}
		if !has["aggregatetype"] || !has["aggregateid"] || !has["type"] || has["aggregate_type"] || has["event_type"] {
			return "default"
		}
	}
	if len(tables) == 0 {
		return "default"
	}
	return "debezium"
}

// stallHint is printed once when the old slot has not moved for a while.
func stallHint(from string, s cutoverSlot, nudged bool) string {
	if !s.Active {
		return fmt.Sprintf("hint: %s is inactive, so nothing will confirm it. If Debezium is stopped for good, do not wait: "+
			"stop this command, drop walrelay's new slot and run walrelay on Debezium's slot instead "+
			"(walrelay run --slot %s --create-slot=false --publication <Debezium's publication.name> --create-publication=false); "+
			"see docs/migrating-from-debezium.md", from, from)
	}
	nudge := "the " + CutoverNudgePrefix + " message this command wrote"
	if !nudged {
		nudge = "a transaction after walrelay's start (--nudge writes one)"
	}
	return fmt.Sprintf("hint: %s has not moved. Debezium confirms its slot only when Kafka Connect commits offsets "+
		"(offset.flush.interval.ms) after it emitted a record since the last commit; on an idle database that needs "+
		"heartbeat.interval.ms > 0 on the connector (e.g. 10000) and %s; set message.prefix.exclude.list=%s "+
		"so that the message yields no record", from, nudge, CutoverNudgePrefix)
}

// Cutover creates walrelay's slot (and publication), then waits until
// cfg.FromSlot has confirmed the slot's start, printing progress to out. It
// returns nil when it is safe to stop the old system. It changes nothing but
// walrelay's publication and slot (and writes the nudge message).
func Cutover(ctx context.Context, cfg CutoverOptions, out io.Writer) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	conn, err := replication.Connect(cctx, cfg.DSN, cfg.PasswordSource)
	cancel()
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())

	from, err := readSlot(ctx, conn, cfg.FromSlot)
	if err != nil {
		return err
	}
	if err := checkFromSlot(cfg.FromSlot, from); err != nil {
		return err
	}
	fmt.Fprintf(out, "%s: plugin %s, confirmed %s, active %v\n", cfg.FromSlot, from.Plugin, from.Confirmed, from.Active)

	rc, err := replication.Open(ctx, cfg.replication())
	if err != nil {
		return fmt.Errorf("create walrelay's slot: %w", err)
	}
	start, created := rc.Start, rc.Created
	if err := rc.Close(ctx); err != nil {
		return fmt.Errorf("close replication connection: %w", err)
	}
	if created {
		fmt.Fprintf(out, "created slot %s (publication %s) at %s: walrelay will relay every transaction committed from there on\n",
			cfg.Slot, cfg.Publication, start)
	} else {
		fmt.Fprintf(out, "slot %s exists; its confirmed position %s is walrelay's start\n", cfg.Slot, start)
	}
	if cfg.Nudge {
		// One transaction past walrelay's start for Debezium to confirm.
		if _, err := replication.EmitMessage(ctx, replication.NewQuerier(conn), CutoverNudgePrefix, start.String()); err != nil {
			return fmt.Errorf("write the nudge message: %w", err)
		}
	}

	deadline := time.Now().Add(cfg.Timeout)
	last, lastMove, hinted := from.Confirmed, time.Now(), false
	lastPrint := time.Time{}
	for {
		s, err := readSlot(ctx, conn, cfg.FromSlot)
		if errors.Is(err, ErrSlotMissing) {
			return fmt.Errorf("%s was dropped while waiting: events committed before %s that Debezium had not delivered may be lost; "+
				"reconcile the outbox rows committed before %s against Kafka", cfg.FromSlot, start, start)
		}
		if err != nil {
			return err
		}
		if err := checkFromSlot(cfg.FromSlot, s); err != nil {
			return err
		}
		// Read after Debezium's slot, so "safe" below holds for both reads.
		own, err := readSlot(ctx, conn, cfg.Slot)
		if err := checkOwnSlot(cfg.Slot, own, err, start, waitPhase, cfg.FromSlot); err != nil {
			return err
		}
		moved := s.Confirmed != last
		if moved {
			last, lastMove = s.Confirmed, time.Now()
		}
		if s.Confirmed >= start {
			fmt.Fprintln(out, cutoverProgress(cfg.FromSlot, s, start, 0))
			fmt.Fprint(out, nextSteps(cfg, start, outboxLayout(ctx, replication.NewQuerier(conn), cfg.Tables)))
			return nil
		}
		if moved || time.Since(lastPrint) >= 5*time.Second {
			fmt.Fprintln(out, cutoverProgress(cfg.FromSlot, s, start, time.Since(lastMove)))
			lastPrint = time.Now()
		}
		if !hinted && cfg.StallWarning > 0 && time.Since(lastMove) >= cfg.StallWarning {
			fmt.Fprintln(out, stallHint(cfg.FromSlot, s, cfg.Nudge))
			hinted = true
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not reach walrelay's start %s within %s (confirmed %s, %d bytes to go); %s. "+
				"Debezium keeps running; walrelay's slot %s stays and retains WAL: run cutover again (it reuses the slot) "+
				"or drop it", cfg.FromSlot, start, cfg.Timeout, s.Confirmed, uint64(start-s.Confirmed),
				strings.TrimPrefix(stallHint(cfg.FromSlot, s, cfg.Nudge), "hint: "), cfg.Slot)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(cfg.PollInterval):
		}
	}
}

// DropFromSlot drops cfg.FromSlot after a second check: it must be inactive
// (the old system stopped) and confirmed at or past walrelay's start, and
// walrelay's slot must still exist and be valid (checkOwnSlot).
func DropFromSlot(ctx context.Context, cfg CutoverOptions, out io.Writer) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := replication.Connect(cctx, cfg.DSN, cfg.PasswordSource)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	from, err := readSlot(cctx, conn, cfg.FromSlot)
	if err != nil {
		return err
	}
	if err := checkFromSlot(cfg.FromSlot, from); err != nil && from.invalidated() == "" {
		return err
	}
	own, err := readSlot(cctx, conn, cfg.Slot)
	if err := checkOwnSlot(cfg.Slot, own, err, cfg.StartLSN, dropPhase, cfg.FromSlot); err != nil {
		return err
	}
	start := cfg.StartLSN
	if start == 0 {
		start = own.Confirmed
	}
	if err := dropVerdict(cfg.FromSlot, from, start, cfg.StartLSN != 0); err != nil {
		return err
	}
	if err := replication.DropSlot(cctx, replication.NewQuerier(conn), cfg.FromSlot); err != nil {
		return err
	}
	fmt.Fprintf(out, "dropped slot %s (confirmed %s >= walrelay start %s)\n", cfg.FromSlot, from.Confirmed, start)
	return nil
}

// dropVerdict decides whether the old slot may be dropped; exact says start
// is walrelay's real start rather than its slot's (later) confirmed position.
func dropVerdict(name string, s cutoverSlot, start pglogrepl.LSN, exact bool) error {
	switch {
	case s.Active:
		return fmt.Errorf("slot %q is active: stop Debezium first", name)
	case s.Confirmed < start && exact:
		return fmt.Errorf("slot %q confirmed only %s, below walrelay's start %s: events committed before %s may exist only in it; "+
			"keep it and run Debezium until walrelay cutover says it is safe", name, s.Confirmed, start, start)
	case s.Confirmed < start:
		return fmt.Errorf("slot %q confirmed %s, below walrelay's slot's position %s; pass --start-lsn with the start "+
			"the first cutover run printed", name, s.Confirmed, start)
	}
	return nil
}
