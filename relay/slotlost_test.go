package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/walrelay/walrelay/checkpoint"
	"github.com/walrelay/walrelay/replication"
)

// A slot gone on reconnect stops the relay with what the operator needs:
// whether Postgres failed over (the identity is read before the slot), and
// the last transaction delivered, from which the outbox rows are
// re-published.
func TestSlotLost(t *testing.T) {
	ctx := context.Background()
	tr, err := checkpoint.New(checkpoint.Config{MaxInFlight: 10}, 0x100)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	if err := tr.Begin(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tr.CommitAt(0x4000, at); err != nil {
		t.Fatal(err)
	}
	old := replication.Identity{SystemID: "7300000000000000001", Timeline: 1}
	r := &runner{rcfg: replication.Config{Slot: "orders"}, tr: tr, system: old}
	missing := func(system replication.Identity, invalidated string) error {
		return fmt.Errorf("open: %w", &replication.PrereqError{Check: "slot", Problem: "gone", Fix: "x",
			Err: &replication.SlotLostError{Slot: "orders", System: system, Invalidated: invalidated}})
	}
	for _, tc := range []struct {
		name     string
		err      error
		failover bool
		says     []string
	}{
		{"promoted standby", missing(replication.Identity{SystemID: old.SystemID, Timeline: 2}, ""), true,
			[]string{"postgres failed over", "timeline 2, was 7300000000000000001 timeline 1", "failover slots", "ended at 0/4000", "2026-11-25T12:00:00Z", "replay since the last delivered event, which also creates the new slot"}},
		{"dropped", missing(old, ""), false, []string{`"orders" disappeared`, "ended at 0/4000", "start walrelay only after it"}},
		{"invalidated", missing(old, "wal_status lost, wal_removed"), false, []string{"invalidated (wal_status lost, wal_removed)", "Recover with a replay"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := r.slotLost(tc.err)
			var sl *SlotLostError
			if !errors.As(err, &sl) || sl.Failover != tc.failover {
				t.Fatalf("slotLost = %v, want a SlotLostError with failover %v", err, tc.failover)
			}
			for _, s := range tc.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%q does not say %q", err, s)
				}
			}
			if reconnectable(err) {
				t.Error("a lost slot is retried")
			}
		})
	}
	if err := errors.New("other"); r.slotLost(err) != err {
		t.Error("slotLost changed an unrelated error")
	}
}
