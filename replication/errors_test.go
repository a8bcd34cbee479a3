package replication

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestIsRetryableAllowList: IsRetryable is an allow-list of transient
// failures; unknown errors are not retried.
func TestIsRetryableAllowList(t *testing.T) {
	opErr := func(op string, err error) error { return &net.OpError{Op: op, Net: "tcp", Err: err} }
	tests := []struct {
		name string
		err  error
		want bool
	}{
		// transient
		{"EOF", fmt.Errorf("receive: %w", io.EOF), true},
		{"unexpected EOF", io.ErrUnexpectedEOF, true},
		{"connection reset", opErr("read", os.NewSyscallError("read", syscall.ECONNRESET)), true},
		{"connection refused", opErr("dial", os.NewSyscallError("connect", syscall.ECONNREFUSED)), true},
		{"only read-only servers (target_session_attrs=read-write during a failover)", fmt.Errorf("failed to connect: %w", errors.Join(opErr("dial", os.NewSyscallError("connect", syscall.ECONNREFUSED)), pgconn.ErrReadOnlyConnection)), true},
		{"a read-only server alone", fmt.Errorf("failed to connect: %w", pgconn.ErrReadOnlyConnection), true},
		{"broken pipe", fmt.Errorf("send standby status: %w", syscall.EPIPE), true},
		{"deadline", fmt.Errorf("send standby status: %w", context.DeadlineExceeded), true},
		{"server silent", fmt.Errorf("receive: %w", ErrServerSilent), true},
		{"server ended the stream", fmt.Errorf("replication stream: %w (CopyDone)", ErrServerEnded), true},
		{"slot in use", fmt.Errorf("start replication: %w", ErrSlotInUse), true},
		{"08006 connection failure", &pgconn.PgError{Code: "08006"}, true},
		{"08P01 protocol violation (class 08)", &pgconn.PgError{Code: "08P01"}, true},
		{"57P01 admin shutdown", fmt.Errorf("replication stream: %w", &pgconn.PgError{Code: "57P01"}), true},
		{"57P02 crash shutdown", &pgconn.PgError{Code: "57P02"}, true},
		{"57P03 cannot connect now", &pgconn.PgError{Code: "57P03"}, true},
		{"53300 too many connections", &pgconn.PgError{Code: "53300"}, true},
		{"55006 object in use", &pgconn.PgError{Code: "55006"}, true},
		// everything else stops walrelay
		{"nil", nil, false},
		{"canceled", fmt.Errorf("start: %w", context.Canceled), false},
		{"prerequisite", fmt.Errorf("open: %w", &PrereqError{Check: "slot"}), false},
		{"unknown error", errors.New("decoder config: table public.outbox: header column \"trace\" listed twice"), false},
		{"protocol garbage", errors.New("receive from postgres: unknown CopyData type 'z'"), false},
		{"28P01 authentication failed", &pgconn.PgError{Code: "28P01"}, false},
		{"42501 insufficient privilege", &pgconn.PgError{Code: "42501"}, false},
		{"53100 disk full", &pgconn.PgError{Code: "53100"}, false},
		{"57P04 database dropped", &pgconn.PgError{Code: "57P04"}, false},
		{"55000 slot invalidated", &pgconn.PgError{Code: "55000"}, false},
		{"XX000 internal error", &pgconn.PgError{Code: "XX000"}, false},
		{"TLS alert from the server", opErr("remote error", tls.AlertError(42)), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsRetryable(tc.err); got != tc.want {
				t.Fatalf("IsRetryable(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestIsRetryable(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"prerequisite", &PrereqError{Check: "wal_level"}, false},
		{"slot in use", fmt.Errorf("start: %w", ErrSlotInUse), true},
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, true},
		{"connection failure", &pgconn.PgError{Code: "08006"}, true},
		{"too many connections", &pgconn.PgError{Code: "53300"}, true},
		{"undefined table", &pgconn.PgError{Code: "42P01"}, false},
		{"EOF", fmt.Errorf("receive: %w", io.ErrUnexpectedEOF), true},
		{"net", &net.OpError{Op: "read", Err: errors.New("connection reset")}, true},
		{"canceled", context.Canceled, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsRetryable(tc.err); got != tc.want {
				t.Fatalf("IsRetryable(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
