package checkpoint

import (
	"context"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

func mustNew(t *testing.T, max int, start pglogrepl.LSN) *Tracker {
	t.Helper()
	tr, err := New(Config{MaxInFlight: max}, start)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestWatermarkRandomAckOrder is a property test: for random transactions and
// any order of acknowledgements, the watermark is monotonic, never passes a
// transaction with an unacknowledged record, and ends at the last end LSN.
func TestWatermarkRandomAckOrder(t *testing.T) {
	ctx := context.Background()
	for seed := int64(1); seed <= 300; seed++ {
		rng := rand.New(rand.NewSource(seed))
		ntx := 1 + rng.Intn(30)
		tr := mustNew(t, 100000, 100)
		type rec struct {
			tx  int
			ack Ack
		}
		var recs []rec
		ends := make([]pglogrepl.LSN, ntx)
		remaining := make([]int, ntx)
		lsn := pglogrepl.LSN(1000)
		for i := 0; i < ntx; i++ {
			if err := tr.Begin(ctx); err != nil {
				t.Fatal(err)
			}
			n := rng.Intn(6) // zero-record transactions too
			for j := 0; j < n; j++ {
				a, err := tr.Add(ctx)
				if err != nil {
					t.Fatal(err)
				}
				recs = append(recs, rec{i, a})
			}
			remaining[i] = n
			lsn += pglogrepl.LSN(1 + rng.Intn(500))
			ends[i] = lsn
			if err := tr.Commit(lsn); err != nil {
				t.Fatal(err)
			}
		}
		rng.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })

		// expected watermark: end of the longest fully-acked prefix.
		expect := func() pglogrepl.LSN {
			w := pglogrepl.LSN(100)
			for i := 0; i < ntx; i++ {
				if remaining[i] > 0 {
					break
				}
				w = ends[i]
			}
			return w
		}
		prev := tr.Watermark()
		if prev != expect() {
			t.Fatalf("seed %d: initial watermark %v, want %v", seed, prev, expect())
		}
		for _, r := range recs {
			r.ack.Done()
			remaining[r.tx]--
			w := tr.Watermark()
			if w < prev {
				t.Fatalf("seed %d: watermark moved back %v -> %v", seed, prev, w)
			}
			if w != expect() {
				t.Fatalf("seed %d: watermark %v, want %v", seed, w, expect())
			}
			prev = w
		}
		if got := tr.Watermark(); got != ends[ntx-1] {
			t.Fatalf("seed %d: final watermark %v, want %v", seed, got, ends[ntx-1])
		}
		if tr.InFlight() != 0 || tr.pending() != 0 {
			t.Fatalf("seed %d: in flight %d pending %d after all acks", seed, tr.InFlight(), tr.pending())
		}
	}
}

func TestOpenTransactionHoldsWatermark(t *testing.T) {
	ctx := context.Background()
	tr := mustNew(t, 10, 0)
	if err := tr.Begin(ctx); err != nil {
		t.Fatal(err)
	}
	a, _ := tr.Add(ctx)
	a.Done()
	if w := tr.Watermark(); w != 0 {
		t.Fatalf("watermark %v moved before commit was read", w)
	}
	if tr.AdvanceIdle(500) {
		t.Fatal("AdvanceIdle succeeded with an open transaction")
	}
	if err := tr.Commit(200); err != nil {
		t.Fatal(err)
	}
	if w := tr.Watermark(); w != 200 {
		t.Fatalf("watermark %v, want 200", w)
	}
}

func TestAdvanceIdle(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		setup  func(tr *Tracker)
		lsn    pglogrepl.LSN
		idle   bool
		expect pglogrepl.LSN
	}{
		{"idle moves up", func(*Tracker) {}, 900, true, 900},
		{"idle never moves back", func(*Tracker) {}, 50, true, 100},
		{"record in flight", func(tr *Tracker) {
			_ = tr.Begin(ctx)
			_, _ = tr.Add(ctx)
			_ = tr.Commit(300)
		}, 900, false, 100},
		{"committed zero-record txn is released", func(tr *Tracker) {
			_ = tr.Begin(ctx)
			_ = tr.Commit(300)
		}, 900, true, 900},
		{"open txn", func(tr *Tracker) { _ = tr.Begin(ctx) }, 900, false, 100},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := mustNew(t, 10, 100)
			tc.setup(tr)
			if got := tr.AdvanceIdle(tc.lsn); got != tc.idle {
				t.Fatalf("AdvanceIdle = %v, want %v", got, tc.idle)
			}
			if w := tr.Watermark(); w != tc.expect {
				t.Fatalf("watermark %v, want %v", w, tc.expect)
			}
		})
	}
}

func TestAbortNeverAdvances(t *testing.T) {
	ctx := context.Background()
	tr := mustNew(t, 10, 100)
	_ = tr.Begin(ctx)
	a, _ := tr.Add(ctx)
	tr.Abort()
	// after reconnecting, the same transaction is read again.
	_ = tr.Begin(ctx)
	b, _ := tr.Add(ctx)
	_ = tr.Commit(400)
	b.Done()
	if w := tr.Watermark(); w != 100 {
		t.Fatalf("watermark %v passed a record of the abandoned txn still in flight", w)
	}
	a.Done()
	if w := tr.Watermark(); w != 400 {
		t.Fatalf("watermark %v, want 400", w)
	}
	if tr.pending() != 0 {
		t.Fatalf("pending %d", tr.pending())
	}
}

func TestStateErrors(t *testing.T) {
	ctx := context.Background()
	tr := mustNew(t, 10, 0)
	if _, err := tr.Add(ctx); err != ErrNoOpenTxn {
		t.Fatalf("Add without txn: %v", err)
	}
	if err := tr.Commit(1); err != ErrNoOpenTxn {
		t.Fatalf("Commit without txn: %v", err)
	}
	_ = tr.Begin(ctx)
	if err := tr.Begin(ctx); err != ErrTxnOpen {
		t.Fatalf("Begin twice: %v", err)
	}
	if _, err := New(Config{MaxInFlight: 1}, 0); err == nil {
		t.Fatal("MaxInFlight 1 accepted")
	}
}

// TestCapBlocksUntilAck shows the backpressure: Add blocks at the cap and
// resumes when a record is acknowledged; ctx cancellation unblocks it.
func TestCapBlocksUntilAck(t *testing.T) {
	ctx := context.Background()
	tr := mustNew(t, 3, 0) // 1 for the txn + 2 records
	_ = tr.Begin(ctx)
	a1, _ := tr.Add(ctx)
	_, _ = tr.Add(ctx)

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := tr.Add(short); err == nil {
		t.Fatal("Add beyond the cap did not block")
	}

	got := make(chan error, 1)
	go func() {
		_, err := tr.Add(ctx)
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("Add returned %v before any ack", err)
	case <-time.After(50 * time.Millisecond):
	}
	a1.Done()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Add still blocked after an ack freed a unit")
	}
}

// TestConcurrentAcks runs a reader against concurrent ackers with a small cap
// (run with -race): the watermark must only move up and end at the last LSN.
func TestConcurrentAcks(t *testing.T) {
	ctx := context.Background()
	tr := mustNew(t, 16, 0)
	acks := make(chan Ack, 64)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(seed int64) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(seed))
			for a := range acks {
				if rng.Intn(4) == 0 {
					time.Sleep(time.Microsecond)
				}
				a.Done()
			}
		}(int64(w))
	}
	stop := make(chan struct{})
	monotonic := make(chan bool, 1)
	go func() {
		prev := pglogrepl.LSN(0)
		ok := true
		for {
			select {
			case <-stop:
				monotonic <- ok
				return
			default: // poll: the reader (replication) polls it too
				w := tr.Watermark()
				if w < prev {
					ok = false
				}
				prev = w
			}
		}
	}()
	rng := rand.New(rand.NewSource(7))
	var last pglogrepl.LSN
	for i := 1; i <= 2000; i++ {
		if err := tr.Begin(ctx); err != nil {
			t.Fatal(err)
		}
		for j := rng.Intn(8); j > 0; j-- {
			a, err := tr.Add(ctx)
			if err != nil {
				t.Fatal(err)
			}
			acks <- a
		}
		last = pglogrepl.LSN(i * 100)
		if err := tr.Commit(last); err != nil {
			t.Fatal(err)
		}
	}
	close(acks)
	wg.Wait()
	close(stop)
	if !<-monotonic {
		t.Fatal("watermark moved backwards")
	}
	if w := tr.Watermark(); w != last {
		t.Fatalf("final watermark %v, want %v", w, last)
	}
}

func BenchmarkTrackRecord(b *testing.B) {
	ctx := context.Background()
	tr, _ := New(Config{MaxInFlight: 1 << 16}, 0)
	b.ReportAllocs()
	_ = tr.Begin(ctx)
	for i := 0; i < b.N; i++ {
		a, _ := tr.Add(ctx)
		a.Done()
		if i%10 == 9 {
			_ = tr.Commit(pglogrepl.LSN(i))
			_ = tr.Begin(ctx)
		}
	}
}

// Delivered reports the last transaction released in stream order with its
// commit time: not one whose records are still unacknowledged, nor an
// abandoned one.
func TestDelivered(t *testing.T) {
	ctx := context.Background()
	tr, err := New(Config{MaxInFlight: 10}, 0x100)
	if err != nil {
		t.Fatal(err)
	}
	if l, at := tr.Delivered(); l != 0 || !at.IsZero() {
		t.Fatalf("Delivered before any transaction = %s %v, want nothing", l, at)
	}
	t1 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	var acks []Ack
	for i, end := range []pglogrepl.LSN{0x200, 0x300} {
		if err := tr.Begin(ctx); err != nil {
			t.Fatal(err)
		}
		a, err := tr.Add(ctx)
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, a)
		if err := tr.CommitAt(end, t1.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	acks[1].Done()
	if l, _ := tr.Delivered(); l != 0 {
		t.Fatalf("Delivered = %s with the first transaction unacknowledged, want nothing", l)
	}
	acks[0].Done()
	if l, at := tr.Delivered(); l != 0x300 || !at.Equal(t1.Add(time.Second)) {
		t.Fatalf("Delivered = %s %v, want 0/300 at %v", l, at, t1.Add(time.Second))
	}
	if err := tr.Begin(ctx); err != nil {
		t.Fatal(err)
	}
	tr.Abort()
	if l, _ := tr.Delivered(); l != 0x300 {
		t.Fatalf("Delivered after an abandoned transaction = %s, want 0/300", l)
	}
}
