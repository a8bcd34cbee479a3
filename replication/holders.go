package replication

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Who holds a slot back. A logical slot's restart_lsn and catalog_xmin cannot
// pass the start of a transaction that is still running with a transaction
// id (one that wrote), in any database of the cluster: once walrelay has
// confirmed past that start, a long or idle-in-transaction session, or a
// prepared transaction nobody commits, pins the slot and the WAL after it,
// whatever walrelay confirms. (Postgres moves catalog_xmin lazily, a running
// transaction behind, so the slot's catalog_xmin cannot tell which
// transactions hold it.) Creating a slot waits for every such transaction to
// end. These reads name them, from pg_stat_activity and pg_prepared_xacts.

// Session is a backend with an open transaction that has a transaction id,
// as pg_stat_activity shows it. Without pg_read_all_stats (or membership in
// the session's role) Postgres hides its State, ClientAddr and XactAge: they
// read "", "" and -1.
type Session struct {
	PID         int32
	User        string
	Application string
	ClientAddr  string // "" for a Unix socket or a hidden value
	Database    string
	BackendType string // "client backend", "walsender", ...
	State       string // "active", "idle in transaction", ...
	XactAge     time.Duration
	Xid         uint32 // backend_xid
}

// IdleInTransaction reports a session that holds a transaction open and runs
// nothing: the application forgot to commit.
func (s Session) IdleInTransaction() bool { return strings.HasPrefix(s.State, "idle in transaction") }

// String describes the session in one line for an operator: pid, user,
// application, client, state and the age of its transaction.
func (s Session) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pid %d", s.PID)
	if s.User != "" {
		fmt.Fprintf(&b, " user %s", s.User)
	}
	fmt.Fprintf(&b, " application %q", s.Application)
	if s.ClientAddr != "" {
		fmt.Fprintf(&b, " client %s", s.ClientAddr)
	}
	if s.Database != "" {
		fmt.Fprintf(&b, " database %s", s.Database)
	}
	if s.BackendType != "" && s.BackendType != "client backend" {
		fmt.Fprintf(&b, " (%s)", s.BackendType)
	}
	switch {
	case s.State == "":
		b.WriteString(", state hidden (grant pg_read_all_stats to see it)")
	case s.IdleInTransaction():
		fmt.Fprintf(&b, ", %s", s.State)
	default:
		fmt.Fprintf(&b, ", state %s", s.State)
	}
	if s.XactAge >= 0 {
		fmt.Fprintf(&b, ", transaction open for %s", s.XactAge.Round(time.Second))
	}
	return b.String()
}

// Prepared is a prepared transaction (PREPARE TRANSACTION) not yet committed
// or rolled back, as pg_prepared_xacts shows it.
type Prepared struct {
	GID      string
	Owner    string
	Database string
	Age      time.Duration // since it was prepared
	Xid      uint32
}

// String describes the prepared transaction in one line.
func (p Prepared) String() string {
	return fmt.Sprintf("prepared transaction %q owner %s database %s, prepared %s ago (COMMIT PREPARED or ROLLBACK PREPARED it)",
		p.GID, p.Owner, p.Database, p.Age.Round(time.Second))
}

// Holders is what holds a slot back, read by ReadHolders.
type Holders struct {
	// Sessions are the open transactions with a transaction id, the oldest
	// first (at most ten): the oldest keeps restart_lsn and catalog_xmin at
	// its start until it ends.
	//
	// While walrelay's confirmed position is behind a transaction's start,
	// walrelay's lag holds the slot, not it (walrelay_slot_confirmed_lag_bytes).
	Sessions []Session
	// Prepared are the prepared transactions that hold it likewise.
	Prepared []Prepared
	// Slots are the other replication slots whose xmin or catalog_xmin is
	// older than the slot's: they do not hold this slot, but hold the
	// catalog rows (and, with xmin, the rows) vacuum could remove, and the
	// WAL after their own restart_lsn.
	Slots []Slot
	// RetainedBytes is the WAL the server keeps for the slot (Slot's
	// RetainedBytes): what these holders cost in WAL.
	RetainedBytes int64
}

// Oldest is the oldest session holding the slot; false when none does.
func (h Holders) Oldest() (Session, bool) {
	if len(h.Sessions) == 0 {
		return Session{}, false
	}
	return h.Sessions[0], true
}

// Empty reports that no session nor prepared transaction holds the slot.
func (h Holders) Empty() bool { return len(h.Sessions) == 0 && len(h.Prepared) == 0 }

// sessionQuery reads the open transactions with a transaction id, other
// than the reader's own, the oldest ten first (they name the culprit).
// xact_start is read as an age, so that the server's clock is the reference.
const sessionQuery = `SELECT a.pid::text, coalesce(a.usename::text, ''), coalesce(a.application_name, ''),
	coalesce(host(a.client_addr), ''), coalesce(a.datname::text, ''), coalesce(a.backend_type, ''), coalesce(a.state, ''),
	coalesce(extract(epoch FROM clock_timestamp() - a.xact_start)::float8, -1)::text, a.backend_xid::text
	FROM pg_stat_activity a
	WHERE a.backend_xid IS NOT NULL AND a.pid <> pg_backend_pid()
	ORDER BY age(a.backend_xid) DESC, a.pid LIMIT 10`

// preparedQuery reads the prepared transactions, the oldest first.
const preparedQuery = `SELECT p.gid, p.owner::text, p.database::text,
	extract(epoch FROM clock_timestamp() - p.prepared)::float8::text, p.transaction::text
	FROM pg_prepared_xacts p
	ORDER BY age(p.transaction) DESC`

// ReadHolders reads what holds the slot s (read by ReadSlot on the same
// server) back: the open and prepared transactions with a transaction id,
// and the other slots with a horizon older than its catalog_xmin. It changes
// nothing; on a standby it finds no session (the primary's transactions
// hold a standby's slot through hot_standby_feedback, not here).
func ReadHolders(ctx context.Context, q Querier, s Slot) (Holders, error) {
	h := Holders{RetainedBytes: s.RetainedBytes()}
	var err error
	if h.Sessions, err = RunningTransactions(ctx, q); err != nil {
		return h, err
	}
	if h.Prepared, err = readPrepared(ctx, q); err != nil {
		return h, err
	}
	if s.CatalogXmin != 0 {
		if h.Slots, err = readOlderSlots(ctx, q, s.Name, strconv.FormatUint(uint64(s.CatalogXmin), 10)); err != nil {
			return h, err
		}
	}
	return h, nil
}

// RunningTransactions reads every open transaction with a transaction id
// (the oldest first, at most a few), other than the reader's: what creating
// a slot waits for on a primary.
func RunningTransactions(ctx context.Context, q Querier) ([]Session, error) {
	rows, err := q.queryRows(ctx, sessionQuery)
	if err != nil {
		return nil, fmt.Errorf("read pg_stat_activity: %w", err)
	}
	out := make([]Session, 0, len(rows))
	for _, r := range rows {
		if len(r) != 9 {
			return nil, fmt.Errorf("read pg_stat_activity: %d columns", len(r))
		}
		pid, err := strconv.ParseInt(string(r[0]), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("read pg_stat_activity: pid %q: %w", r[0], err)
		}
		s := Session{PID: int32(pid), User: string(r[1]), Application: string(r[2]), ClientAddr: string(r[3]),
			Database: string(r[4]), BackendType: string(r[5]), State: string(r[6]), XactAge: seconds(r[7]), Xid: xid(r[8])}
		out = append(out, s)
	}
	return out, nil
}

func readPrepared(ctx context.Context, q Querier) ([]Prepared, error) {
	rows, err := q.queryRows(ctx, preparedQuery)
	if err != nil {
		return nil, fmt.Errorf("read pg_prepared_xacts: %w", err)
	}
	out := make([]Prepared, 0, len(rows))
	for _, r := range rows {
		if len(r) != 5 {
			return nil, fmt.Errorf("read pg_prepared_xacts: %d columns", len(r))
		}
		out = append(out, Prepared{GID: string(r[0]), Owner: string(r[1]), Database: string(r[2]), Age: seconds(r[3]), Xid: xid(r[4])})
	}
	return out, nil
}

// seconds parses a number of seconds as text; negative or unreadable is -1.
func seconds(b []byte) time.Duration {
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || f < 0 {
		return -1
	}
	return time.Duration(f * float64(time.Second))
}

func xid(b []byte) uint32 {
	x, _ := strconv.ParseUint(string(b), 10, 32)
	return uint32(x)
}

// Lines describes the holders for an operator, one line each: the sessions
// (the oldest first), the prepared transactions, then the older slots. None
// when nothing holds the slot.
func (h Holders) Lines() []string {
	var out []string
	for _, s := range h.Sessions {
		out = append(out, s.String())
	}
	for _, p := range h.Prepared {
		out = append(out, p.String())
	}
	for _, s := range h.Slots {
		state := "inactive"
		if s.Active {
			state = fmt.Sprintf("active, pid %d", s.ActivePID)
		}
		out = append(out, fmt.Sprintf("slot %q (%s %s, %s) holds an older catalog horizon and retains %d bytes of WAL",
			s.Name, s.Type, s.Plugin, state, s.RetainedBytes()))
	}
	return out
}

// Walsender is the process that streams from a slot, as pg_stat_replication
// shows it: the one that keeps the slot active. After a network cut it stays
// until the server's wal_sender_timeout notices the client is silent, and
// holds the slot meanwhile.
type Walsender struct {
	PID         int32
	User        string
	Application string
	ClientAddr  string
	State       string
	// ReplyAge is the time since the client last replied (a status
	// update); -1 when it never did or Postgres hides it.
	ReplyAge time.Duration
	// SenderTimeout is the server's wal_sender_timeout (0: off).
	SenderTimeout time.Duration
}

// walsenderStaleAfter is the longest a live walrelay stays silent: it sends
// a status update at least every replication.Config.KeepaliveInterval
// (default 10s).
const walsenderStaleAfter = 10 * time.Second

// Stale reports a walsender whose client has not replied for longer than a
// live walrelay ever stays silent.
func (w Walsender) Stale() bool { return w.ReplyAge > walsenderStaleAfter }

// String describes the walsender in one line, with what ends a stale one.
func (w Walsender) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "walsender pid %d", w.PID)
	if w.User != "" {
		fmt.Fprintf(&b, " user %s", w.User)
	}
	fmt.Fprintf(&b, " application %q", w.Application)
	if w.ClientAddr != "" {
		fmt.Fprintf(&b, " client %s", w.ClientAddr)
	}
	if w.State != "" {
		fmt.Fprintf(&b, ", %s", w.State)
	}
	if w.ReplyAge >= 0 {
		fmt.Fprintf(&b, ", last reply %s ago", w.ReplyAge.Round(time.Second))
	} else {
		b.WriteString(", no reply yet")
	}
	if w.Stale() {
		fmt.Fprintf(&b, "; stale (walrelay replies at least every %s): a walrelay that lost its connection or is frozen", walsenderStaleAfter)
	}
	timeout := "off: only a TCP timeout ends a silent one"
	if w.SenderTimeout > 0 {
		timeout = w.SenderTimeout.String()
	}
	fmt.Fprintf(&b, "; Postgres ends a silent walsender after wal_sender_timeout (%s; lower it to free the slot sooner, or SELECT pg_terminate_backend(%d))", timeout, w.PID)
	return b.String()
}

// walsenderQuery reads the walsender with pid $1 and wal_sender_timeout (ms).
const walsenderQuery = `SELECT r.pid::text, coalesce(r.usename::text, ''), coalesce(r.application_name, ''),
	coalesce(host(r.client_addr), ''), coalesce(r.state, ''),
	coalesce(extract(epoch FROM clock_timestamp() - r.reply_time)::float8, -1)::text,
	(SELECT setting FROM pg_settings WHERE name = 'wal_sender_timeout')
	FROM pg_stat_replication r WHERE r.pid = $1::int`

// ReadWalsender reads the walsender process pid (a Slot's ActivePID). A
// process that is gone (or not a walsender) is an error wrapping ErrMissing.
// It changes nothing.
func ReadWalsender(ctx context.Context, q Querier, pid int32) (Walsender, error) {
	rows, err := q.queryRows(ctx, walsenderQuery, strconv.Itoa(int(pid)))
	if err != nil {
		return Walsender{}, fmt.Errorf("read pg_stat_replication: %w", err)
	}
	if len(rows) == 0 {
		return Walsender{}, fmt.Errorf("walsender pid %d: %w", pid, ErrMissing)
	}
	r := rows[0]
	if len(r) != 7 {
		return Walsender{}, fmt.Errorf("read pg_stat_replication: %d columns", len(r))
	}
	w := Walsender{PID: pid, User: string(r[1]), Application: string(r[2]), ClientAddr: string(r[3]), State: string(r[4]), ReplyAge: seconds(r[5])}
	if ms, err := strconv.ParseInt(string(r[6]), 10, 64); err == nil {
		w.SenderTimeout = time.Duration(ms) * time.Millisecond
	}
	return w, nil
}
