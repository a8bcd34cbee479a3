package testwait

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	var calls atomic.Int32
	start := time.Now()
	err := Until(context.Background(), 10*time.Second, func() bool { return calls.Add(1) >= 4 })
	if err != nil {
		t.Fatalf("Until = %v, want nil", err)
	}
	if n := calls.Load(); n != 4 {
		t.Errorf("cond called %d times, want 4 (stop at the first true)", n)
	}
	// Pauses of 1, 2 and 4 ms: far below the timeout and the longest pause.
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Until took %v for a condition true at the 4th poll", took)
	}
}

func TestUntilTimesOut(t *testing.T) {
	var calls atomic.Int32
	start := time.Now()
	err := Until(context.Background(), 300*time.Millisecond, func() bool { calls.Add(1); return false })
	took := time.Since(start)
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "300ms") {
		t.Fatalf("Until = %v, want ErrTimeout naming 300ms", err)
	}
	if took < 300*time.Millisecond || took > 300*time.Millisecond+time.Second {
		t.Errorf("Until returned after %v, want about its 300ms timeout", took)
	}
	// 1+2+4+...+64 ms, then every MaxInterval: at least 8 polls, at most a few more.
	if n := calls.Load(); n < 8 || n > 20 {
		t.Errorf("cond polled %d times in 300ms, want pauses that double up to %v", n, MaxInterval)
	}
}

func TestUntilStopsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	err := Until(ctx, time.Minute, func() bool { return false })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Until = %v, want context.Canceled", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Until returned %v after the context ended", took)
	}
}

// recorder is a testing.TB that records a Fatalf instead of stopping the test.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
}

func TestEventuallyNamesWhatAndTimeout(t *testing.T) {
	r := &recorder{TB: t}
	Eventually(r, 20*time.Millisecond, "the broker to answer", func() bool { return false })
	if r.msg != "timed out after 20ms waiting for the broker to answer" {
		t.Errorf("Eventually failed with %q", r.msg)
	}
	r.msg = ""
	Eventually(r, time.Second, "a true condition", func() bool { return true })
	if r.msg != "" {
		t.Errorf("Eventually failed on a condition that holds: %q", r.msg)
	}
}

func TestParkedSeesAGoroutineWaitInAFunction(t *testing.T) {
	release := make(chan struct{})
	ids := make(chan int, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ids <- GoroutineID()
		waitForRelease(release)
	}()
	id := <-ids
	if id == GoroutineID() {
		t.Fatalf("GoroutineID %d is the test's own", id)
	}
	Eventually(t, 5*time.Second, "the goroutine to wait in waitForRelease", func() bool {
		return Parked(id, "testwait.waitForRelease")
	})
	if Parked(id, "testwait.notOnItsStack") {
		t.Errorf("Parked reports a function that is not on the goroutine's stack")
	}
	close(release)
	<-done
	if Parked(id, "testwait.waitForRelease") {
		t.Errorf("Parked reports a goroutine that has ended")
	}
}

//go:noinline
func waitForRelease(release <-chan struct{}) { <-release }
