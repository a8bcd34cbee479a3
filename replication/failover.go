package replication

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Failover readiness: with failover slots (Postgres 17+), a standby keeps a
// synchronized copy of walrelay's slot, so that a promotion loses neither
// the slot nor (with synchronized_standby_slots) any change walrelay relayed.
// Each part is a setting someone must get right; these checks name the one
// that is wrong.

// FailoverCheck is one finding about failover readiness: OK or the problem
// and the setting that fixes it.
type FailoverCheck struct {
	Server string // host:port the finding is about
	OK     bool
	Note   string
}

// primaryFailoverWarnings returns what the primary c is connected to lacks
// for a safe failover of a failover slot: synchronized_standby_slots empty
// lets walrelay relay changes that no standby has yet, which a promotion
// then loses while Kafka has them (phantom events).
func (c *Conn) primaryFailoverWarnings(ctx context.Context) ([]string, error) {
	rows, err := c.query(ctx, "SELECT coalesce(current_setting('synchronized_standby_slots', true), '')")
	if err != nil {
		return nil, fmt.Errorf("read synchronized_standby_slots: %w", err)
	}
	if len(rows) == 1 && len(rows[0]) == 1 && strings.TrimSpace(string(rows[0][0])) == "" {
		return []string{"synchronized_standby_slots is empty on the primary: walrelay may relay changes no standby has received, and a promotion loses them while Kafka has them; " +
			"set it to the standby's physical slot (ALTER SYSTEM SET synchronized_standby_slots = '<slot>'; SELECT pg_reload_conf();)"}, nil
	}
	return nil, nil
}

// CheckStandbys connects to every host of dsn (a multi-host DSN lists the
// primary and its standbys, as libpq's failover does) and checks each
// standby for what a failover of slot needs: sync_replication_slots and
// hot_standby_feedback on, a dbname in primary_conninfo, and the slot's
// synchronized copy (synced, not temporary). A DSN with one host yields a
// finding that no standby could be checked. src supplies the passwords
// (nil: the DSN's).
func CheckStandbys(ctx context.Context, dsn, slot string, src PasswordSource) ([]FailoverCheck, error) {
	h, err := ReadFailoverHealth(ctx, dsn, slot, src)
	return h.Findings, err
}

// StandbyHealth is what one standby was found to hold of a failover slot.
type StandbyHealth struct {
	Server string          // host:port
	Checks []FailoverCheck // its settings and its copy of the slot
	Copy   *Slot           // its copy of the slot; nil when it has none
}

// Protected reports that a promotion of the standby now would keep the slot:
// every check passed (the settings sync needs, a persisted synced copy).
func (h StandbyHealth) Protected() bool {
	for _, c := range h.Checks {
		if !c.OK {
			return false
		}
	}
	return h.Copy != nil
}

// Problem is the first failed check of the standby; "" when it is protected.
func (h StandbyHealth) Problem() string {
	for _, c := range h.Checks {
		if !c.OK {
			return c.Note
		}
	}
	if h.Copy == nil {
		return "no copy of the slot"
	}
	return ""
}

// FailoverHealth is a reading of a failover slot's protection across the
// hosts of a multi-host DSN, by ReadFailoverHealth.
type FailoverHealth struct {
	// Primary is the slot as the primary among the hosts has it; nil when
	// no host was a primary holding it.
	Primary *Slot
	// Standbys are the hosts in recovery, in the DSN's order.
	Standbys []StandbyHealth
	// Findings are doctor's lines: each standby's checks, the hosts that
	// could not be read, and a finding when no host is a standby.
	Findings []FailoverCheck
}

// LagBytes is how far the standby's copy of the slot is behind the
// primary's (confirmed_flush_lsn); -1 when either is unknown.
func (f FailoverHealth) LagBytes(h StandbyHealth) int64 {
	if f.Primary == nil || h.Copy == nil || f.Primary.ConfirmedFlushLSN == 0 || h.Copy.ConfirmedFlushLSN == 0 {
		return -1
	}
	return max(0, int64(f.Primary.ConfirmedFlushLSN)-int64(h.Copy.ConfirmedFlushLSN))
}

// ReadFailoverHealth connects to every host of dsn, reads the slot on the
// primary and checks each standby (see CheckStandbys). It changes nothing.
// The error is only for a DSN it cannot parse; a host it cannot read is a
// finding.
func ReadFailoverHealth(ctx context.Context, dsn, slot string, src PasswordSource) (FailoverHealth, error) {
	var out FailoverHealth
	pc, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return out, &SettingError{Setting: "DSN", Err: err}
	}
	hosts := append([]*pgconn.FallbackConfig{{Host: pc.Host, Port: pc.Port, TLSConfig: pc.TLSConfig}}, pc.Fallbacks...)
	for _, h := range hosts {
		one := pc.Copy()
		one.Host, one.Port, one.TLSConfig, one.Fallbacks = h.Host, h.Port, h.TLSConfig, nil
		one.ValidateConnect = nil // any role: the point is to find the standbys
		server := fmt.Sprintf("%s:%d", h.Host, h.Port)
		conn, err := ConnectConfig(ctx, one, src)
		if err != nil {
			out.Findings = append(out.Findings, FailoverCheck{Server: server, Note: "cannot connect: " + err.Error()})
			continue
		}
		sh, standby, primary, err := checkStandby(ctx, conn, slot)
		_ = conn.Close(context.Background())
		switch {
		case err != nil:
			out.Findings = append(out.Findings, FailoverCheck{Server: server, Note: err.Error()})
		case standby:
			sh.Server = server
			for _, c := range sh.Checks {
				c.Server = server
				out.Findings = append(out.Findings, c)
			}
			out.Standbys = append(out.Standbys, sh)
		case primary != nil && out.Primary == nil:
			out.Primary = primary
		}
	}
	if len(out.Standbys) == 0 {
		out.Findings = append(out.Findings, FailoverCheck{Server: pc.Host, Note: "no standby among the DSN's hosts: list the standby too (host=primary,standby with target_session_attrs=read-write), so that walrelay follows a promotion and doctor can check the standby"})
	}
	return out, nil
}

// checkStandby checks one server; standby is false for a primary, whose
// slot it returns (nil when it has none).
func checkStandby(ctx context.Context, conn *pgconn.PgConn, slot string) (h StandbyHealth, standby bool, primary *Slot, err error) {
	q := NewQuerier(conn)
	rows, err := q.queryRows(ctx, `SELECT pg_is_in_recovery()::text, current_setting('server_version_num'),
		coalesce(current_setting('sync_replication_slots', true), ''), current_setting('hot_standby_feedback')`)
	if err != nil {
		return h, false, nil, err
	}
	if len(rows) != 1 || len(rows[0]) != 4 {
		return h, false, nil, errors.New("unexpected answer to the settings query")
	}
	if string(rows[0][0]) != "true" {
		s, err := ReadSlot(ctx, q, slot)
		if err != nil {
			return h, false, nil, nil // no slot on this primary: nothing to compare with
		}
		return h, false, &s, nil
	}
	if string(rows[0][1]) < "170000" {
		h.Checks = []FailoverCheck{{Note: "standby on Postgres " + string(rows[0][1]) + ": failover slots need 17 or newer, so a promotion loses walrelay's slot"}}
		return h, true, nil, nil
	}
	var checks []FailoverCheck
	setting := func(ok bool, good, bad string) FailoverCheck {
		if ok {
			return FailoverCheck{OK: true, Note: good}
		}
		return FailoverCheck{Note: bad}
	}
	checks = append(checks,
		setting(string(rows[0][2]) == "on", "sync_replication_slots = on", "sync_replication_slots is off on the standby: it keeps no copy of walrelay's slot; set it on (ALTER SYSTEM SET sync_replication_slots = on; SELECT pg_reload_conf();)"),
		setting(string(rows[0][3]) == "on", "hot_standby_feedback = on", "hot_standby_feedback is off on the standby: slot synchronization needs it; set it on"))
	if conninfo, err := q.queryRows(ctx, "SELECT current_setting('primary_conninfo')"); err != nil {
		checks = append(checks, FailoverCheck{Note: "cannot read primary_conninfo (" + err.Error() + "): check that it names a dbname, which slot synchronization needs"})
	} else if len(conninfo) == 1 && !strings.Contains(string(conninfo[0][0]), "dbname=") {
		checks = append(checks, FailoverCheck{Note: "primary_conninfo on the standby has no dbname: slot synchronization needs one (add dbname=<database> to it)"})
	}
	s, err := ReadSlot(ctx, q, slot)
	switch {
	case errors.Is(err, ErrSlotMissing):
		checks = append(checks, FailoverCheck{Note: fmt.Sprintf("the standby has no copy of slot %q yet (it appears a few seconds after the slot is created as a failover slot)", slot)})
	case err != nil:
		return h, true, nil, err
	case s.Synced == nil || !*s.Synced || s.Temporary:
		checks = append(checks, FailoverCheck{Note: fmt.Sprintf("the standby's slot %q is not a persisted synchronized copy (synced %v, temporary %v): a promotion now would not keep it", slot, s.Synced != nil && *s.Synced, s.Temporary)})
	default:
		checks = append(checks, FailoverCheck{OK: true, Note: fmt.Sprintf("slot %q synchronized at %s", slot, s.ConfirmedFlushLSN)})
	}
	if err == nil {
		h.Copy = &s
	}
	h.Checks = checks
	return h, true, nil, nil
}
