package testwait

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// MaxInterval is the longest pause between two polls of a condition.
const MaxInterval = 100 * time.Millisecond

// ErrTimeout reports that a condition did not hold within its timeout.
var ErrTimeout = errors.New("timed out")

// Eventually polls cond until it returns true. When it does not within
// timeout, Eventually fails t with FailNow, naming what was awaited and the
// timeout ("timed out after 5s waiting for <what>"); it must therefore run in
// the test's goroutine. Use Until elsewhere.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := Until(context.Background(), timeout, cond); err != nil {
		t.Fatalf("%v waiting for %s", err, what)
	}
}

// Until polls cond until it returns true (nil), ctx ends (ctx.Err()) or
// timeout passes (an error wrapping ErrTimeout that names the timeout). It
// never touches a testing.T, so it is safe in any goroutine.
func Until(ctx context.Context, timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	pause := time.Millisecond
	for !cond() {
		if !time.Now().Before(deadline) {
			return fmt.Errorf("%w after %v", ErrTimeout, timeout)
		}
		wait := min(pause, time.Until(deadline))
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
		}
		pause = min(2*pause, MaxInterval)
	}
	return nil
}
