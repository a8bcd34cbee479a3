package replication

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
)

// Before the loss: with max_slot_wal_keep_size set, Postgres invalidates a
// slot whose restart_lsn falls more than that far behind the WAL end.
// pg_replication_slots.safe_wal_size is the WAL that can still be written
// before that happens; divided by the rate at which WAL is written, it is the
// time left.

// WALRate is the rate at which the server writes WAL, measured between two
// positions.
type WALRate struct {
	Bytes  int64         // WAL written between the two readings
	Period time.Duration // between the two readings
}

// PerSecond is the rate in bytes per second; 0 when nothing was measured.
func (r WALRate) PerSecond() float64 {
	if r.Period <= 0 || r.Bytes <= 0 {
		return 0
	}
	return float64(r.Bytes) / r.Period.Seconds()
}

// MeasureWALRate reads the server's WAL position twice, over apart, and
// returns the rate between the two readings. It changes nothing.
func MeasureWALRate(ctx context.Context, q Querier, over time.Duration) (WALRate, error) {
	read := func() (pglogrepl.LSN, time.Time, error) {
		rows, err := q.queryRows(ctx, `SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)::text`)
		if err != nil {
			return 0, time.Time{}, fmt.Errorf("read WAL position: %w", err)
		}
		if len(rows) != 1 || len(rows[0]) != 1 || rows[0][0] == nil {
			return 0, time.Time{}, fmt.Errorf("read WAL position: unexpected result")
		}
		lsn, err := pglogrepl.ParseLSN(string(rows[0][0]))
		return lsn, time.Now(), err
	}
	a, at, err := read()
	if err != nil {
		return WALRate{}, err
	}
	select {
	case <-ctx.Done():
		return WALRate{}, ctx.Err()
	case <-time.After(over):
	}
	b, bt, err := read()
	if err != nil {
		return WALRate{}, err
	}
	return WALRate{Bytes: lsnDiff(b, a), Period: bt.Sub(at)}, nil
}

// TimeLeft is the time until the slot s is invalidated if its safe_wal_size
// keeps shrinking at bytesPerSecond (the WAL rate, while the slot does not
// move): safe_wal_size over the rate. ok is false when
// max_slot_wal_keep_size is unlimited (or the server has no safe_wal_size),
// or the rate is not positive.
func TimeLeft(s Slot, bytesPerSecond float64) (left time.Duration, ok bool) {
	if s.SafeWALSize == nil || bytesPerSecond <= 0 {
		return 0, false
	}
	if *s.SafeWALSize <= 0 {
		return 0, true
	}
	return time.Duration(float64(*s.SafeWALSize) / bytesPerSecond * float64(time.Second)), true
}

// SafeWALNote says in one line how close the slot s is to invalidation by
// max_slot_wal_keep_size, at the WAL rate r, and whether it is at risk (less
// than warnWithin left at that rate, or no WAL left). "" when the server has no safe_wal_size column.
func SafeWALNote(s Slot, r WALRate, warnWithin time.Duration) (note string, atRisk bool) {
	if !s.Has("safe_wal_size") {
		return "", false
	}
	if s.WALStatus == "lost" {
		return "the slot was invalidated (wal_status lost)", true
	}
	if s.SafeWALSize == nil {
		return "unlimited (max_slot_wal_keep_size is -1: the slot is never invalidated, and retains WAL until the disk fills)", false
	}
	size := *s.SafeWALSize
	rate := r.PerSecond()
	left, ok := TimeLeft(s, rate)
	if !ok {
		return fmt.Sprintf("%d bytes of WAL left before max_slot_wal_keep_size invalidates the slot (no WAL written over %s: no time estimate)", size, r.Period.Round(time.Millisecond)), size <= 0
	}
	atRisk = left < warnWithin
	note = fmt.Sprintf("%d bytes of WAL left before max_slot_wal_keep_size invalidates the slot: about %s at the current WAL rate if the slot stops moving (%.0f bytes/s over %s)",
		size, left.Round(time.Second), rate, r.Period.Round(time.Millisecond))
	if atRisk {
		note += "; let walrelay catch up (or end what holds the slot back), or raise max_slot_wal_keep_size"
	}
	return note, atRisk
}
