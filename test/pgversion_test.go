package e2e

import (
	"context"
	"testing"
	"time"
)

// serverVersion is the server_version_num of the Postgres at dsn (150018 for 15.18). The
// suite runs on 14 to 18 (make test PG=...); a test that depends on a feature of some
// majors asserts what the others do instead.
func serverVersion(t *testing.T, dsn string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var v int
	if err := pgPool(t, dsn).scan(ctx, "SELECT current_setting('server_version_num')::int", nil, &v); err != nil {
		t.Fatalf("server_version_num: %v", err)
	}
	return v
}
