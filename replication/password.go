package replication

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Every connection walrelay opens to Postgres goes through this file
// (ConnectConfig, ConnectPgx, and Connect and Open on top of them), so that
// a PasswordSource is asked for a fresh password for each one: a reconnect
// after a short-lived token expired asks again instead of reusing the DSN's
// password read once at start. Every session runs in TimeZone UTC
// (sessionUTC).

// PasswordSource supplies the password of each new Postgres connection: a
// short-lived token from a cloud's identity service (RDS and Aurora IAM,
// Cloud SQL IAM, Microsoft Entra ID) or a secret another process rotates.
// Password is called once for each host a connection tries, just before
// connecting to it, with the host, port and user of the DSN; what it
// returns replaces the DSN's password for that attempt and is never logged
// or shown in an error. Implementations must be safe for concurrent use.
type PasswordSource interface {
	Password(ctx context.Context, host string, port uint16, user string) (string, error)
}

// PasswordFile is a PasswordSource that reads the file at its path again for
// every connection (without trailing newlines), so that a sidecar can
// replace a short-lived password in place. Reads are serialized: a file that
// hands out one password per read (a named pipe) gives each connection its
// own.
type PasswordFile string

var passwordFileMu sync.Mutex

// Password reads the file.
func (f PasswordFile) Password(ctx context.Context, _ string, _ uint16, _ string) (string, error) {
	passwordFileMu.Lock()
	defer passwordFileMu.Unlock()
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() { // a named pipe blocks until its writer opens it
		b, err := os.ReadFile(string(f))
		done <- result{b, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		return "", fmt.Errorf("read the Postgres password file: %w", ctx.Err())
	}
	if r.err != nil {
		return "", &SettingError{Setting: "PasswordSource", Err: r.err}
	}
	pw := strings.TrimRight(string(r.b), "\r\n")
	if pw == "" {
		return "", &SettingError{Setting: "PasswordSource", Err: fmt.Errorf("%s is empty", f)}
	}
	return pw, nil
}

// plainTextOK marks the file as a password like the DSN's: it may go to a
// server without TLS, as pgconn sends the DSN's.
func (PasswordFile) plainTextOK() {}

// PasswordError is a PasswordSource that could not supply a password: the
// connection was not attempted.
type PasswordError struct{ Err error }

func (e *PasswordError) Error() string {
	return "get a password for the Postgres connection: " + e.Err.Error()
}
func (e *PasswordError) Unwrap() error { return e.Err }

// ConnectConfig opens a connection with pc (ordinary or replication, as its
// runtime parameters say). With src nil it is pgconn.ConnectConfig and the
// DSN's password (or PGPASSWORD, .pgpass) is used; otherwise each host of
// the DSN is tried in order with a password src supplies for it. A token
// (any source but a PasswordFile) never travels in clear text: hosts the
// DSN would reach without TLS are skipped unless they are local. Errors are pgconn's,
// unexplained (see ExplainConnect).
func ConnectConfig(ctx context.Context, pc *pgconn.Config, src PasswordSource) (*pgconn.PgConn, error) {
	pc = pc.Copy()
	pc.RuntimeParams = sessionUTC(pc.RuntimeParams)
	if src == nil {
		return pgconn.ConnectConfig(ctx, pc)
	}
	return perHost(ctx, pc, src, func(h *pgconn.FallbackConfig, password string) (*pgconn.PgConn, error) {
		one := pc.Copy()
		one.Host, one.Port, one.TLSConfig, one.Fallbacks, one.Password = h.Host, h.Port, h.TLSConfig, nil, password
		return pgconn.ConnectConfig(ctx, one)
	})
}

// ConnectPgx is ConnectConfig for a pgx connection.
func ConnectPgx(ctx context.Context, cfg *pgx.ConnConfig, src PasswordSource) (*pgx.Conn, error) {
	cfg = cfg.Copy()
	cfg.RuntimeParams = sessionUTC(cfg.RuntimeParams)
	if src == nil {
		return pgx.ConnectConfig(ctx, cfg)
	}
	return perHost(ctx, &cfg.Config, src, func(h *pgconn.FallbackConfig, password string) (*pgx.Conn, error) {
		one := cfg.Copy()
		one.Host, one.Port, one.TLSConfig, one.Fallbacks, one.Password = h.Host, h.Port, h.TLSConfig, nil, password
		return pgx.ConnectConfig(ctx, one)
	})
}

// sessionUTC sets the session's TimeZone to UTC in a connection's runtime
// parameters, replacing any the DSN gives: a timestamp without time zone
// is then compared with a timestamptz, and converted to one, as UTC, the
// way the decoder and replay read it (prune's cutoff and guard, the
// retained span), whatever the server's or the role's TimeZone.
func sessionUTC(params map[string]string) map[string]string {
	if params == nil {
		params = map[string]string{}
	}
	for k := range params {
		if strings.EqualFold(k, "timezone") {
			delete(params, k)
		}
	}
	params["TimeZone"] = "UTC"
	return params
}

// OpenPgx opens an ordinary pgx connection to dsn as application app (unless
// the DSN names one), with src's password (nil: the DSN's) and failures
// explained as ExplainConnect does.
func OpenPgx(ctx context.Context, dsn, app string, src PasswordSource) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, &SettingError{Setting: "DSN", Err: err}
	}
	if _, ok := cfg.RuntimeParams["application_name"]; !ok && app != "" {
		cfg.RuntimeParams["application_name"] = app
	}
	conn, err := ConnectPgx(ctx, cfg, src)
	if err != nil {
		return nil, ExplainConnect(err, &cfg.Config, false)
	}
	return conn, nil
}

// perHost tries the hosts of pc in libpq's order with a password from src
// for each, as pgconn does with the DSN's: it stops at the first that
// connects, or at a refusal that another host would repeat (wrong
// password, missing database, no privilege).
func perHost[T any](ctx context.Context, pc *pgconn.Config, src PasswordSource, dial func(*pgconn.FallbackConfig, string) (T, error)) (T, error) {
	var zero T
	hosts := append([]*pgconn.FallbackConfig{{Host: pc.Host, Port: pc.Port, TLSConfig: pc.TLSConfig}}, pc.Fallbacks...)
	_, plain := src.(interface{ plainTextOK() })
	var errs []error
	tried := 0
	for _, h := range hosts {
		if h.TLSConfig == nil && !plain && !localHost(h.Host) {
			continue
		}
		tried++
		password, err := src.Password(ctx, h.Host, h.Port, pc.User)
		if err != nil {
			return zero, &PasswordError{Err: err}
		}
		c, err := dial(h, password)
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && (pgErr.Code == "28P01" || pgErr.Code == "3D000" || pgErr.Code == "42501") {
			break
		}
		if ctx.Err() != nil {
			break
		}
	}
	if tried == 0 {
		return zero, &SettingError{Setting: "DSN", Err: errors.New("a token must not travel in clear text, and the DSN reaches its server without TLS: set sslmode=require (or verify-full with sslrootcert)")}
	}
	return zero, errors.Join(errs...)
}

// TLSReachable reports whether a token may go to some host of pc: one
// reached with TLS, or a local one.
func TLSReachable(pc *pgconn.Config) bool {
	for _, h := range append([]*pgconn.FallbackConfig{{Host: pc.Host, TLSConfig: pc.TLSConfig}}, pc.Fallbacks...) {
		if h.TLSConfig != nil || localHost(h.Host) {
			return true
		}
	}
	return false
}

// localHost reports a Unix socket directory or a loopback address, which a
// token may reach without TLS (a local proxy such as the Cloud SQL Auth
// Proxy encrypts the rest of the way).
func localHost(host string) bool {
	if strings.HasPrefix(host, "/") || host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
