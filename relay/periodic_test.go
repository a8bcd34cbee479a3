package relay

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walrelay/walrelay/internal/testwait"
)

// TestPeriodicReportsOneStreak: a task that cannot connect is reported on
// every run, marked first only once per streak, never runs its body, and the
// loop ends with ctx.
func TestPeriodicReportsOneStreak(t *testing.T) {
	var mu sync.Mutex
	var firsts, failures, runs int
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		periodic{dsn: "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=1",
			interval: 10 * time.Millisecond, timeout: time.Second, atOnce: true,
			run: func(context.Context, *pgconn.PgConn) error { runs++; return nil },
			failed: func(_ error, first bool) {
				mu.Lock()
				defer mu.Unlock()
				failures++
				if first {
					firsts++
				}
			},
			recovered: func() { t.Error("recovered without a success") },
		}.loop(ctx)
	}()
	testwait.Eventually(t, 10*time.Second, "3 reported failures", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return failures >= 3
	})
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("loop did not end with its context")
	}
	if firsts != 1 || runs != 0 {
		t.Fatalf("first-of-streak reported %d times (want 1), body ran %d times (want 0)", firsts, runs)
	}
}
