package replication

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walrelay/walrelay/internal/fieldref"
)

// ErrSlotInUse reports that another process streams from the slot.
var ErrSlotInUse = errors.New("replication slot is in use by another process")

// ErrServerEnded reports that the server ended the replication stream on its
// own (CopyDone or CommandComplete, as a walsender does when Postgres shuts
// down); the caller reconnects.
var ErrServerEnded = errors.New("server ended the replication stream")

// ErrServerSilent reports a replication connection that stopped delivering
// anything (half-open, or a frozen server); the caller reconnects.
var ErrServerSilent = errors.New("replication connection silent")

// PrereqError is a missing prerequisite, with what to do about it.
type PrereqError struct {
	Check   string // short name: connect, wal_level, privilege, table, publication, slot
	Problem string
	Fix     string
	// Config are the Config fields that Fix points at ("DSN", "Slot"), the
	// main one first; none when the fix is in Postgres.
	Config []string
	Err    error // the underlying error, if any
}

// ErrMissing is the cause of a *PrereqError for an outbox table, publication
// or slot that does not exist.
var ErrMissing = errors.New("does not exist")

// SlotLostError is the cause of a *PrereqError for the slot walrelay
// streamed from when it is gone on reconnect (dropped, or missing on a
// promoted standby that never had it) or was invalidated: events committed
// after its last confirmed position may be missing from Kafka. System is
// the server's identity as found then (IDENTIFY_SYSTEM is read before the
// slot), so the caller can tell a failover from a dropped slot.
type SlotLostError struct {
	Slot        string
	System      Identity
	Invalidated string // why it was invalidated ("" when it is missing)
}

func (e *SlotLostError) Error() string {
	if e.Invalidated != "" {
		return fmt.Sprintf("replication slot %q was invalidated (%s)", e.Slot, e.Invalidated)
	}
	return fmt.Sprintf("replication slot %q is missing on the server (system id %s, timeline %d)", e.Slot, e.System.SystemID, e.System.Timeline)
}

func (e *PrereqError) Error() string {
	return fmt.Sprintf("%s: %s; fix: %s", e.Check, e.Problem, e.Fix)
}

// Unwrap returns the underlying error, if any.
func (e *PrereqError) Unwrap() error { return e.Err }

// Fields returns Config as replication.Config.<field>.
func (e *PrereqError) Fields() []string { return configFields(e.Config...) }

// configFields returns the fields of Config as replication.Config.<field>.
func configFields(names ...string) []string { return fieldref.Of("replication.Config", names...) }

// IsRetryable reports whether err is a known transient failure worth a
// reconnect with backoff: a lost or refused connection (network errors, EOF,
// timeouts, errors pgconn marks safe to retry), a server that ended or went
// silent, the slot in use, or one of the SQLSTATEs of a server going away or
// not accepting connections yet (class 08 connection exception, 57P01
// admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now, 53300
// too_many_connections, 55006 object_in_use). It is an allow-list: any other
// error (a bad configuration, a missing prerequisite, an authentication or
// privilege failure, a protocol error) is not retried, so walrelay stops and
// says why instead of reconnecting forever.
func IsRetryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var pe *PrereqError
	if errors.As(err, &pe) {
		return false
	}
	if errors.Is(err, ErrSlotInUse) || errors.Is(err, ErrServerSilent) || errors.Is(err, ErrServerEnded) {
		return true
	}
	if errors.Is(err, pgconn.ErrReadOnlyConnection) {
		// target_session_attrs=read-write found only read-only servers: a
		// standby not promoted yet, during a failover.
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case pgerrcode.AdminShutdown, pgerrcode.CrashShutdown, pgerrcode.CannotConnectNow, pgerrcode.TooManyConnections, pgerrcode.ObjectInUse:
			return true
		}
		return pgerrcode.IsConnectionException(pgErr.Code)
	}
	if pgconn.SafeToRetry(err) || pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "remote error" {
		return false // a TLS alert from the server: a configuration problem
	}
	var ne net.Error
	return errors.As(err, &ne)
}
