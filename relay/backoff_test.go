package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/walrelay/walrelay/replication"
)

// refused is what a connection attempt to a server that is down returns.
func refused(t *testing.T) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := pgconn.Connect(ctx, "postgres://walrelay@127.0.0.1:1/app?connect_timeout=2")
	if err == nil {
		_ = c.Close(ctx)
		t.Fatal("connected to port 1")
	}
	if !connectFailed(err) {
		t.Fatalf("%v: not a connect failure", err)
	}
	return fmt.Errorf("connect to postgres: %w", err)
}

func within(t *testing.T, what string, got, want time.Duration) {
	t.Helper()
	if got < want*4/5 || got >= want*6/5 {
		t.Fatalf("%s: wait %v, want %v ± 20%%", what, got, want)
	}
}

// While Postgres may be failing over (a connection refused, or no read-write
// server yet, within the window after the stream was lost), attempts come
// at a short interval however long it lasts; otherwise the wait doubles up
// to its cap. Every wait is jittered.
func TestBackoff(t *testing.T) {
	down := refused(t)
	now := time.Now()

	b := newBackoff()
	b.sessionEnded(true, time.Hour, now)
	within(t, "the stream was lost", b.next(io.ErrUnexpectedEOF, now), backoffMin)
	for i := 0; i < 60; i++ { // a one-minute promotion: never more than the short wait
		within(t, fmt.Sprintf("attempt %d while refused", i+1), b.next(down, now.Add(time.Duration(i)*time.Second)), failoverRetry)
	}

	// Past the window: an outage, not a failover; the wait doubles.
	later := now.Add(failoverWindow + time.Second)
	want := 2 * backoffMin
	for i := 0; i < 10; i++ {
		within(t, fmt.Sprintf("attempt %d after the window", i+1), b.next(down, later), want)
		want = min(2*want, backoffMax)
	}

	// A failure after connecting (not a failover) doubles from the start.
	b = newBackoff()
	b.sessionEnded(true, time.Hour, now)
	want = backoffMin
	for i := 0; i < 8; i++ {
		within(t, fmt.Sprintf("failure %d after connecting", i+1), b.next(errors.New("protocol violation"), now), want)
		want = min(2*want, backoffMax)
	}

	// Never streamed (a standby, a server down since the start): no window.
	b = newBackoff()
	within(t, "first", b.next(down, now), backoffMin)
	within(t, "second", b.next(down, now), 2*backoffMin)

	// A session that failed sooner than the wait keeps growing it; one that
	// streamed for longer resets it.
	b = &backoff{exp: 8 * time.Second}
	b.sessionEnded(true, 3*time.Second, now)
	within(t, "short session", b.next(errors.New("x"), now), 8*time.Second)
	b.sessionEnded(true, time.Minute, now)
	within(t, "long session", b.next(errors.New("x"), now), backoffMin)
}

// Two standbys of one slot that start trying at the same moment do not keep
// trying in lockstep: their tries drift apart.
func TestStandbysDoNotRetryInLockstep(t *testing.T) {
	inUse := fmt.Errorf("start replication: %w", replication.ErrSlotInUse)
	m := newMetrics(prometheus.NewRegistry(), "s")
	a, b := newStandby(time.Second, "s", m, slog.New(slog.DiscardHandler)), newStandby(time.Second, "s", m, slog.New(slog.DiscardHandler))
	var ta, tb time.Duration
	apart := 0
	for i := 0; i < 20; i++ {
		wa, _ := a.after(inUse, backoffMin)
		wb, _ := b.after(inUse, backoffMin)
		within(t, "standby a", wa, time.Second)
		within(t, "standby b", wb, time.Second)
		ta, tb = ta+wa, tb+wb
		if d := ta - tb; d > 50*time.Millisecond || d < -50*time.Millisecond {
			apart++
		}
	}
	if apart < 10 {
		t.Fatalf("two standbys' tries were within 50ms of each other after %d of 20 tries, want them apart", 20-apart)
	}
}
