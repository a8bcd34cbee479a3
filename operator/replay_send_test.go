package operator

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walrelay/walrelay/internal/testwait"
	"github.com/walrelay/walrelay/sink"
)

// TestRowWindowNeverSkips: whatever order Kafka acknowledges rows in, the
// window's resume point is never past a row not acknowledged, and it
// reaches the last row once all are.
func TestRowWindowNeverSkips(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, seed*7+1))
		capacity := 2 + rng.IntN(20)
		w := newRowWindow(capacity)
		n := 1 + rng.IntN(300)
		keys := make([]string, n)
		for i := range keys { // non-decreasing order values, with ties (one transaction's rows)
			keys[i] = fmt.Sprintf("k%06d", i/(1+rng.IntN(4)))
		}
		acked := make([]bool, n)
		var inFlight []int64
		check := func(when string) {
			first := -1
			for i := range n {
				if !acked[i] {
					first = i
					break
				}
			}
			k, ok := w.resumeFrom()
			if first >= 0 && int64(first) < w.next && (!ok || k > keys[first]) {
				t.Fatalf("seed %d %s: resume at %q (%v) past row %d (%q) not acknowledged", seed, when, k, ok, first, keys[first])
			}
		}
		for next := 0; next < n || len(inFlight) > 0; {
			w.mu.Lock()
			room := w.next-w.head < int64(capacity) // add blocks on a full window
			w.mu.Unlock()
			if next < n && room && (len(inFlight) == 0 || rng.IntN(2) == 0) {
				seq, err := w.add(context.Background(), keys[next])
				if err != nil || seq != int64(next) {
					t.Fatalf("seed %d: add %d = %d, %v", seed, next, seq, err)
				}
				inFlight = append(inFlight, seq)
				next++
			} else {
				i := rng.IntN(len(inFlight))
				seq := inFlight[i]
				inFlight = append(inFlight[:i], inFlight[i+1:]...)
				acked[seq] = true
				w.ack(seq)
			}
			check("during the run")
		}
		if k, ok := w.resumeFrom(); !ok || k != keys[n-1] {
			t.Fatalf("seed %d: all acknowledged, resume at %q (%v), want the last row's %q", seed, k, ok, keys[n-1])
		}
	}
}

// TestCommitAfter: a replay's transaction stays open for the commit
// interval, and never more than half the transaction timeout.
func TestCommitAfter(t *testing.T) {
	for _, c := range []struct{ interval, timeout, want time.Duration }{
		{100 * time.Millisecond, time.Minute, 100 * time.Millisecond},
		{time.Minute, time.Minute, 30 * time.Second},
		{time.Minute, 0, time.Minute},
		{10 * time.Second, time.Second, 500 * time.Millisecond},
	} {
		if got := commitAfter(c.interval, c.timeout); got != c.want {
			t.Errorf("commitAfter(%v, %v) = %v, want %v", c.interval, c.timeout, got, c.want)
		}
	}
}

// failingCommits is a transactional producer whose commits fail.
type failingCommits struct {
	replayProducer
	commits atomic.Int32
}

func (f *failingCommits) BeginTxn() error                                         { return nil }
func (f *failingCommits) Send(_ context.Context, _ sink.Record, done func(error)) { done(nil) }
func (f *failingCommits) Flush(context.Context) error                             { return nil }
func (f *failingCommits) EndTxn(_ context.Context, commit bool) error {
	if commit {
		f.commits.Add(1)
		return errors.New("broker says no")
	}
	return nil
}

// TestTxnSenderTimerCommitFailureFails: a commit the timer makes while the
// replay waits, and that fails, fails the replay: its rows are not
// acknowledged, and finish reports the failure though nothing is open.
func TestTxnSenderTimerCommitFailureFails(t *testing.T) {
	p := &failingCommits{}
	failed, fail := context.WithCancelCause(context.Background())
	defer fail(nil)
	win := newRowWindow(4)
	acks := 0
	ts := &txnSender{s: p, win: win, fail: fail, failed: failed, produceCtx: context.Background(), maxRecords: 100,
		maxOpen: 20 * time.Millisecond, timeout: time.Second, onAck: func(bool) { acks++ }}
	seq, err := win.add(context.Background(), "k1")
	if err != nil {
		t.Fatal(err)
	}
	if err := ts.send(context.Background(), sink.Record{}, seq, false); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 5*time.Second, "the timer's commit", func() bool { return p.commits.Load() == 1 })
	if err := ts.finish(context.Background()); err == nil || !strings.Contains(err.Error(), "broker says no") {
		t.Fatalf("finish after the timer's failed commit: %v, want its error", err)
	}
	if _, ok := win.resumeFrom(); acks != 0 || !ok {
		t.Fatalf("%d rows acknowledged, want 0", acks)
	}
}
