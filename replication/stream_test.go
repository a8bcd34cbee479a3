package replication

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// testDB creates a database of its own for t on the integration Postgres (make test)
// and returns its DSN; the database and its slots are dropped when t ends.
func testDB(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv("WALRELAY_TEST_PG_DSN")
	if dsn == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("WALRELAY_TEST_PG_DSN is not set: run through `make test`")
		}
		t.Skip("WALRELAY_TEST_PG_DSN not set; run `make test` for the integration tests")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "repl_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = admin.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1", name)
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		_ = admin.Close(ctx)
	})
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		u.Path = "/" + name
		return u.String()
	}
	return dsn + " dbname=" + name
}

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
	dsn := testDB(t)
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
