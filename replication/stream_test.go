package replication

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

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
