package replication

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walrelay/walrelay/test/pgtest"
)

// TestSessionsRunInUTC: every connection walrelay opens, ordinary or
// replication, runs in TimeZone UTC, even when the DSN asks for another.
func TestSessionsRunInUTC(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, replication := range []bool{false, true} {
		pc, err := pgconn.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		pc.RuntimeParams["timezone"] = "Asia/Tokyo"
		if replication {
			pc.RuntimeParams["replication"] = "database"
		}
		conn, err := ConnectConfig(ctx, pc, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tz := conn.ParameterStatus("TimeZone"); tz != "UTC" {
			t.Errorf("replication=%v: session TimeZone %q, want UTC", replication, tz)
		}
		_ = conn.Close(ctx)
		if pc.RuntimeParams["timezone"] != "Asia/Tokyo" {
			t.Error("ConnectConfig changed the caller's configuration")
		}
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["TimeZone"] = "Asia/Tokyo"
	conn, err := ConnectPgx(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var tz string
	if err := conn.QueryRow(ctx, "SHOW TimeZone").Scan(&tz); err != nil || tz != "UTC" {
		t.Errorf("pgx session TimeZone %q (%v), want UTC", tz, err)
	}
}
