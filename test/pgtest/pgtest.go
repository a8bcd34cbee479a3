// Package pgtest gives the integration tests of other packages (relay,
// replication) the throwaway Postgres that `make test` starts, and databases
// of their own on it. The end-to-end suite in test/ has its own, fuller
// environment.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DSN returns the DSN of `make test`'s Postgres (WALRELAY_TEST_PG_DSN).
// Without it the test fails in CI and is skipped elsewhere.
func DSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv("WALRELAY_TEST_PG_DSN")
	if dsn == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("WALRELAY_TEST_PG_DSN is not set: run through `make test`")
		}
		t.Skip("WALRELAY_TEST_PG_DSN not set; run `make test` for the integration tests")
	}
	return dsn
}

// Database creates a database named prefix_<random> for t and returns its
// DSN. The database and its replication slots are dropped when t ends.
func Database(t testing.TB, prefix string) string {
	t.Helper()
	dsn := DSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := prefix + "_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := admin.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1", name); err != nil {
			t.Errorf("drop the slots of %s: %v", name, err)
		}
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
		_ = admin.Close(ctx)
	})
	return WithDatabase(t, dsn, name)
}

// WithDatabase returns dsn (URL or key=value form) pointed at database db.
func WithDatabase(t testing.TB, dsn, db string) string {
	t.Helper()
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatalf("parse DSN: %v", err)
		}
		u.Path = "/" + db
		u.RawPath = ""
		return u.String()
	}
	return dsn + " dbname=" + db
}
