package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// Conn is an ordinary connection for a test's SQL; every method fails the
// test on an error.
type Conn struct {
	t    testing.TB
	Conn *pgx.Conn
}

// Connect opens a connection to dsn, closed when t ends.
func Connect(t testing.TB, dsn string) *Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return &Conn{t, conn}
}

// Exec runs sql.
func (c *Conn) Exec(sql string, args ...any) {
	c.t.Helper()
	if _, err := c.Conn.Exec(context.Background(), sql, args...); err != nil {
		c.t.Fatalf("%s: %v", sql, err)
	}
}

// Count returns the single integer sql selects.
func (c *Conn) Count(sql string, args ...any) int {
	c.t.Helper()
	var n int
	if err := c.Conn.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		c.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// LSN returns the single LSN (as text) sql selects; NULL is 0.
func (c *Conn) LSN(sql string, args ...any) pglogrepl.LSN {
	c.t.Helper()
	var s *string
	if err := c.Conn.QueryRow(context.Background(), sql, args...).Scan(&s); err != nil {
		c.t.Fatalf("%s: %v", sql, err)
	}
	if s == nil {
		return 0
	}
	l, err := pglogrepl.ParseLSN(*s)
	if err != nil {
		c.t.Fatal(err)
	}
	return l
}

// Confirmed returns the slot's confirmed_flush_lsn (0 when it does not exist).
func (c *Conn) Confirmed(slot string) pglogrepl.LSN {
	c.t.Helper()
	return c.LSN("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", slot)
}

// InsertLSN returns pg_current_wal_insert_lsn().
func (c *Conn) InsertLSN() pglogrepl.LSN {
	c.t.Helper()
	return c.LSN("SELECT pg_current_wal_insert_lsn()::text")
}
