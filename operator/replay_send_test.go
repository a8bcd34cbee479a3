package operator

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
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
