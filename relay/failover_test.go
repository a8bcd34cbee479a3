package relay

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/walrelay/walrelay/checkpoint"
	"github.com/walrelay/walrelay/replication"
)

// TestAdoptDropsPositionOnAnotherWALHistory: a connection to the same system
// and timeline keeps the tracker; another system identifier or timeline
// replaces it with one that starts at the new slot's position, logged at WARN
// with both identities, and acknowledgements of records read from the old
// server move only the old tracker.
func TestAdoptDropsPositionOnAnotherWALHistory(t *testing.T) {
	ctx := context.Background()
	tr, err := checkpoint.New(checkpoint.Config{MaxInFlight: 10}, 0x1000)
	if err != nil {
		t.Fatal(err)
	}
	// The old server: one transaction acknowledged (watermark 0/4000), one
	// ending at 0/5000 with a record still in flight.
	var pending checkpoint.Ack
	for i, end := range []pglogrepl.LSN{0x4000, 0x5000} {
		if err := tr.Begin(ctx); err != nil {
			t.Fatal(err)
		}
		ack, err := tr.Add(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Commit(end); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			ack.Done()
		} else {
			pending = ack
		}
	}
	var logs bytes.Buffer
	var walEnd atomic.Uint64
	walEnd.Store(0x9000)
	a1 := replication.Identity{SystemID: "7000000000000000001", Timeline: 1}
	r := &runner{opts: Options{MaxInFlight: 10}, rcfg: replication.Config{Slot: "s"}, log: slog.New(slog.NewJSONHandler(&logs, nil)), tr: tr,
		cur: newTrackerRef(tr), system: a1, walEnd: &walEnd}

	// Reconnect to the same server (a restart): nothing changes.
	if err := r.adopt(&replication.Conn{System: a1, Start: 0x3000}); err != nil {
		t.Fatal(err)
	}
	if r.tr != tr || r.tr.Watermark() != 0x4000 || logs.Len() != 0 {
		t.Fatalf("same history: tracker replaced or moved (watermark %s, logs %q)", r.tr.Watermark(), logs.String())
	}

	// Failover to another cluster whose slot is behind.
	b1 := replication.Identity{SystemID: "7000000000000000002", Timeline: 1}
	if err := r.adopt(&replication.Conn{System: b1, Start: 0x800}); err != nil {
		t.Fatal(err)
	}
	if r.tr == tr || r.tr.Watermark() != 0x800 || r.cur.Load() != r.tr || r.system != b1 || walEnd.Load() != 0 {
		t.Fatalf("other system: tracker %p (old %p) watermark %s, gauge tracker %p, system %v, wal end %d; want a new tracker at 0/800",
			r.tr, tr, r.tr.Watermark(), r.cur.Load(), r.system, walEnd.Load())
	}
	for _, want := range []string{`"level":"WARN"`, `"old_system_id":"7000000000000000001"`, `"new_system_id":"7000000000000000002"`,
		`"old_timeline":1`, `"new_timeline":1`, `"old_lsn":"0/4000"`, `"lsn":"0/800"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log %q lacks %s", logs.String(), want)
		}
	}
	// The old server's last record is acknowledged now: only the old tracker moves.
	newTr := r.tr
	pending.Done()
	if tr.Watermark() != 0x5000 || newTr.Watermark() != 0x800 {
		t.Errorf("after the old record's ack: old tracker at %s (want 0/5000), new at %s (want 0/800)", tr.Watermark(), newTr.Watermark())
	}
	logs.Reset()

	// A promoted standby of the new cluster: same system, next timeline.
	b2 := replication.Identity{SystemID: b1.SystemID, Timeline: 2}
	if err := r.adopt(&replication.Conn{System: b2, Start: 0x700}); err != nil {
		t.Fatal(err)
	}
	if r.tr == newTr || r.tr.Watermark() != 0x700 || !strings.Contains(logs.String(), `"new_timeline":2`) {
		t.Fatalf("other timeline: watermark %s, log %q; want a new tracker at 0/700", r.tr.Watermark(), logs.String())
	}
}
