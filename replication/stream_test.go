package replication

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/walrelay/walrelay/internal/testwait"
	"github.com/walrelay/walrelay/test/pgtest"
)

// settledAt is a Position that never moves and has nothing outstanding.
type settledAt pglogrepl.LSN

func (p settledAt) Watermark() pglogrepl.LSN { return pglogrepl.LSN(p) }
func (p settledAt) Settled() bool            { return true }

// TestStreamBatchesStayBounded: inside one large transaction (no commit to end a
// batch early) batches hold at most BatchBytes, a message larger than BatchBytes gets a
// batch of its own, and a buffer grown for it is not kept in the pool. Before this
// was enforced, a batch that a message overflowed grew by append and kept filling,
// up to 4096 messages, and the pool kept the grown buffers: read-ahead memory then
// grew with the payload size instead of staying Batches x BatchBytes.
func TestStreamBatchesStayBounded(t *testing.T) {
	dsn := pgtest.Database(t, "repl")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	if _, err := db.Exec(ctx, "CREATE TABLE public.big (id int PRIMARY KEY, v text)"); err != nil {
		t.Fatal(err)
	}
	const batchBytes = 16 << 10
	c, err := Open(ctx, Config{DSN: dsn, Slot: "bounded", Publication: "bounded", Tables: []string{"public.big"},
		NoMessages: true, Batches: 2, BatchBytes: batchBytes, StatusInterval: 100 * time.Millisecond, ShutdownTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// One transaction: 500 rows of ~1 KB, one of 100 KB (md5 text; pgoutput sends an
	// inserted value whole), then 200 more of ~1 KB.
	const small1, small2, bigLen = 500, 200, 100 << 10
	_, err = db.Exec(ctx, `BEGIN;
		INSERT INTO public.big SELECT g, repeat(md5(g::text), 32) FROM generate_series(1, 500) AS g;
		INSERT INTO public.big SELECT 100000, string_agg(md5(g::text), '') FROM generate_series(1, 3200) AS g;
		INSERT INTO public.big SELECT g, repeat(md5(g::text), 32) FROM generate_series(501, 700) AS g;
		COMMIT`)
	if err != nil {
		t.Fatal(err)
	}

	s := c.NewStream(settledAt(c.Start))
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()

	inserts, bigSeen, batches := 0, false, 0
	for committed := false; !committed; {
		var b *Batch
		select {
		case b = <-s.Batches():
		case <-ctx.Done():
			t.Fatalf("timed out after %d inserts in %d batches", inserts, batches)
		}
		if b == nil {
			t.Fatalf("stream ended after %d inserts: %v", inserts, <-done)
		}
		batches++
		data := 0
		for _, m := range b.Msgs {
			if m.Keepalive {
				continue
			}
			data++
			switch m.Data[0] {
			case 'I':
				inserts++
				if len(m.Data) > bigLen {
					bigSeen = true
				}
			case 'C':
				committed = true
			}
		}
		if data > 1 && len(b.buf) > batchBytes {
			t.Errorf("batch %d: %d messages in %d bytes, more than BatchBytes %d", batches, data, len(b.buf), batchBytes)
		}
		if data > 1 && cap(b.buf) > batchBytes {
			t.Errorf("batch %d: %d messages in a buffer grown to %d bytes (BatchBytes %d)", batches, data, cap(b.buf), batchBytes)
		}
		s.Release(b)
	}
	if inserts != small1+small2+1 || !bigSeen {
		t.Errorf("read %d inserts (want %d), the 100 KB one seen: %v", inserts, small1+small2+1, bigSeen)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("%d inserts in %d batches of at most %d bytes", inserts, batches, batchBytes)
}

// movable is a Position whose watermark a test moves.
type movable struct{ w atomic.Uint64 }

func (p *movable) Watermark() pglogrepl.LSN { return pglogrepl.LSN(p.w.Load()) }
func (p *movable) Settled() bool            { return true }

// openFake connects to the fake walsender f as Open does after its checks.
func openFake(t *testing.T, f *fakeWalsender, cfg Config) *Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg.DSN, cfg.Slot, cfg.Publication = f.dsn(), "fake", "fake"
	c, err := connect(ctx, cfg)
	if err != nil {
		t.Fatalf("connect to the fake walsender: %v", err)
	}
	if err := c.identify(ctx); err != nil {
		_ = c.Close(context.Background())
		t.Fatalf("identify: %v", err)
	}
	c.Start = 0x100
	return c
}

// waitInReceive waits until goroutine g, running Stream.Run, is idle: waiting
// for the server in a receive.
func waitInReceive(t *testing.T, g int) {
	t.Helper()
	testwait.Eventually(t, 5*time.Second, "the stream to wait in a receive", func() bool {
		return testwait.Parked(g, "(*PgConn).ReceiveMessage")
	})
}

// TestStreamReportsAMovedWatermarkWhileIdle: a watermark that moves after the
// stream went quiet (Kafka acknowledged the last transaction) is reported about
// StatusInterval after the previous update, although nothing more arrives and the
// stream's keepalive interval is long: a receive waits only until the next status
// update is due, not for the next message.
func TestStreamReportsAMovedWatermarkWhileIdle(t *testing.T) {
	f := startFakeWalsender(t, Identity{SystemID: "7300000000000000002", Timeline: 1})
	hold := make(chan struct{})
	defer close(hold)
	status := make(chan pglogrepl.LSN, 64)
	f.scripts <- script{frames: [][]byte{xlogData(0x2000, 0x2000, []byte{'C', 0})}, hold: hold, status: status}
	c := openFake(t, f, Config{Batches: 2, BatchBytes: 4 << 10, StatusInterval: 100 * time.Millisecond,
		KeepaliveInterval: time.Minute, ShutdownTimeout: time.Second})
	pos := &movable{}
	pos.w.Store(uint64(c.Start))
	s := c.NewStream(pos, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	gid := make(chan int, 1)
	go func() {
		gid <- testwait.GoroutineID()
		errc <- s.Run(runCtx)
	}()
	defer func() {
		stop()
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	runG := <-gid
	select {
	case b := <-s.Batches():
		s.Release(b)
	case <-ctx.Done():
		t.Fatal("the commit was not handed over")
	}
	waitInReceive(t, runG)
	const acked = pglogrepl.LSN(0x2100)
	pos.w.Store(uint64(acked))
	movedAt := time.Now()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case lsn := <-status:
			if lsn == acked {
				if d := time.Since(movedAt); d > 2*time.Second {
					t.Errorf("moved watermark reported after %v, want about StatusInterval (100ms)", d)
				}
				return
			}
		case <-deadline:
			t.Fatalf("moved watermark %s not reported within 5s (StatusInterval 100ms)", acked)
		}
	}
}

// TestStreamStopsPromptlyWhenIdle: a stop request interrupts a receive at once,
// although an idle, confirmed stream waits up to KeepaliveInterval for a message.
func TestStreamStopsPromptlyWhenIdle(t *testing.T) {
	f := startFakeWalsender(t, Identity{SystemID: "7300000000000000003", Timeline: 1})
	hold := make(chan struct{})
	defer close(hold)
	f.scripts <- script{hold: hold}
	c := openFake(t, f, Config{Batches: 2, BatchBytes: 4 << 10, StatusInterval: 100 * time.Millisecond,
		KeepaliveInterval: time.Minute, ShutdownTimeout: time.Second})
	started := make(chan struct{})
	s := c.NewStream(settledAt(c.Start), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		WithOnStart(func() { close(started) }))
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	errc := make(chan error, 1)
	gid := make(chan int, 1)
	go func() {
		gid <- testwait.GoroutineID()
		errc <- s.Run(ctx)
	}()
	runG := <-gid
	<-started
	waitInReceive(t, runG)
	stop()
	stoppedAt := time.Now()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if d := time.Since(stoppedAt); d > 3*time.Second {
			t.Errorf("Run returned %v after the stop request", d)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within 20s of the stop request (KeepaliveInterval 1m)")
	}
}

// TestStreamBatchesCommitsAlreadyReceived: transactions that arrive together (one
// read) are handed over in one batch; a commit with nothing more received is handed
// over at once. Before, every commit ended a batch, which cost a hand-over (and a
// goroutine wake-up) per transaction on a busy stream.
func TestStreamBatchesCommitsAlreadyReceived(t *testing.T) {
	f := startFakeWalsender(t, Identity{SystemID: "7300000000000000004", Timeline: 1})
	hold := make(chan struct{})
	defer close(hold)
	var frames [][]byte
	for i := range 3 {
		lsn := pglogrepl.LSN(0x2000 + 0x100*i)
		frames = append(frames, xlogData(lsn, lsn, []byte{'B', 0}), xlogData(lsn+0x10, lsn, []byte{'I', 0}), xlogData(lsn+0x20, lsn, []byte{'C', 0}))
	}
	f.scripts <- script{frames: frames, hold: hold}
	c := openFake(t, f, Config{Batches: 4, BatchBytes: 64 << 10, StatusInterval: time.Second,
		KeepaliveInterval: time.Minute, ShutdownTimeout: time.Second})
	s := c.NewStream(settledAt(c.Start), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx) }()
	var sizes []int
	for n := 0; n < len(frames); {
		select {
		case b := <-s.Batches():
			sizes = append(sizes, len(b.Msgs))
			n += len(b.Msgs)
			s.Release(b)
		case <-time.After(10 * time.Second):
			t.Fatalf("got batches of %v messages, want all %d", sizes, len(frames))
		}
	}
	stop()
	if err := <-errc; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(sizes) != 1 {
		t.Errorf("3 transactions received in one read came in batches of %v messages, want one batch", sizes)
	}
}
