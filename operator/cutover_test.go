package operator

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

func TestCheckFromSlot(t *testing.T) {
	ok := cutoverSlot{Plugin: "pgoutput", Logical: true, SameDB: true}
	tests := []struct {
		name string
		s    cutoverSlot
		want string
	}{
		{"fine", ok, ""},
		{"physical", cutoverSlot{SameDB: true}, "not a logical"},
		{"other database", cutoverSlot{Logical: true}, "another database"},
		{"lost", cutoverSlot{Logical: true, SameDB: true, WALStatus: "lost"}, "invalidated"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := checkFromSlot("dbz", tc.s)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("checkFromSlot = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestDropVerdict(t *testing.T) {
	const start = pglogrepl.LSN(1000)
	tests := []struct {
		name  string
		s     cutoverSlot
		exact bool
		want  string
	}{
		{"inactive and past start", cutoverSlot{Confirmed: 1000}, true, ""},
		{"inactive and past own slot", cutoverSlot{Confirmed: 2000}, false, ""},
		{"still active", cutoverSlot{Active: true, Confirmed: 5000}, true, "stop Debezium first"},
		{"below start", cutoverSlot{Confirmed: 999}, true, "below walrelay's start"},
		{"below own slot's position", cutoverSlot{Confirmed: 999}, false, "pass --start-lsn"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := dropVerdict("dbz", tc.s, start, tc.exact)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("dropVerdict = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestCutoverProgressAndHints(t *testing.T) {
	start := pglogrepl.LSN(0x2000)
	if got := cutoverProgress("dbz", cutoverSlot{Active: true, Confirmed: 0x1000}, start, 0); !strings.Contains(got, "4096 bytes to go") ||
		!strings.Contains(got, "0/1000") || !strings.Contains(got, "0/2000") {
		t.Errorf("progress: %q", got)
	}
	// Standing still while Debezium works: the line says what it waits for.
	if got := cutoverProgress("dbz", cutoverSlot{Active: true, Confirmed: 0x1000}, start, 42*time.Second); !strings.Contains(got, "unchanged for 42s") ||
		!strings.Contains(got, "next offset commit") || !strings.Contains(got, "offset.flush.interval.ms") {
		t.Errorf("progress while the slot stands still: %q", got)
	}
	if got := cutoverProgress("dbz", cutoverSlot{Confirmed: 0x1000}, start, 0); !strings.Contains(got, "INACTIVE") {
		t.Errorf("inactive progress: %q", got)
	}
	if got := cutoverProgress("dbz", cutoverSlot{Confirmed: 0x2000}, start, 0); !strings.Contains(got, ">=") {
		t.Errorf("done progress: %q", got)
	}
	// The next steps name what walrelay run needs: the table and, for Debezium's
	// layout, --columns debezium.
	var cfg CutoverOptions
	cfg.Slot, cfg.Publication, cfg.Tables, cfg.FromSlot = "wr", "wr_pub", []string{"app.outbox"}, "dbz"
	if got := nextSteps(cfg, start, "debezium"); !strings.Contains(got, "walrelay run --slot wr --publication wr_pub --table app.outbox --columns debezium --create-slot=false") {
		t.Errorf("next steps for a Debezium table: %q", got)
	}
	cfg.Tables = []string{"public.outbox"}
	if got := nextSteps(cfg, start, "default"); !strings.Contains(got, "walrelay run --slot wr --publication wr_pub --create-slot=false;") {
		t.Errorf("next steps for walrelay's table: %q", got)
	}
	if got := stallHint("dbz", cutoverSlot{Active: true}, false); !strings.Contains(got, "heartbeat.interval.ms") ||
		!strings.Contains(got, "message.prefix.exclude.list="+CutoverNudgePrefix) {
		t.Errorf("active stall hint: %q", got)
	}
	if got := stallHint("dbz", cutoverSlot{}, true); !strings.Contains(got, "--slot dbz --create-slot=false") {
		t.Errorf("inactive stall hint: %q", got)
	}
}

// TestCheckOwnSlot: Debezium's slot may only be given up while walrelay's own
// slot exists, is valid, and (while cutover waits, before anything streams
// from it) is still at walrelay's start.
func TestCheckOwnSlot(t *testing.T) {
	const start = pglogrepl.LSN(1000)
	ok := cutoverSlot{Plugin: "pgoutput", Logical: true, SameDB: true, Confirmed: start}
	with := func(f func(*cutoverSlot)) cutoverSlot { s := ok; f(&s); return s }
	missing := fmt.Errorf("slot %q: %w", "walrelay", ErrSlotMissing)
	tests := []struct {
		name  string
		s     cutoverSlot
		err   error
		phase ownSlotPhase
		want  string // "" when the slot still takes over at start
	}{
		{"waiting, at start", ok, nil, waitPhase, ""},
		{"waiting, below start", with(func(s *cutoverSlot) { s.Confirmed = start - 1 }), nil, waitPhase, ""},
		{"waiting, past start", with(func(s *cutoverSlot) { s.Confirmed = start + 1 }), nil, waitPhase, "past walrelay's start 0/3E8"},
		{"waiting, dropped", cutoverSlot{}, missing, waitPhase, "was dropped while waiting"},
		{"waiting, wal lost", with(func(s *cutoverSlot) { s.WALStatus = "lost" }), nil, waitPhase, "invalidated (wal_status lost)"},
		{"waiting, invalidation reason", with(func(s *cutoverSlot) { s.InvalidationReason = "rows_removed" }), nil, waitPhase,
			"invalidated (invalidation_reason rows_removed)"},
		{"waiting, conflicting", with(func(s *cutoverSlot) { s.Conflicting = true }), nil, waitPhase, "conflicting with recovery"},
		{"waiting, replaced by another plugin", with(func(s *cutoverSlot) { s.Plugin = "test_decoding" }), nil, waitPhase, "no longer a pgoutput"},
		{"waiting, read failed", cutoverSlot{}, errors.New("conn closed"), waitPhase, "conn closed"},
		{"drop, streamed past start", with(func(s *cutoverSlot) { s.Confirmed = start + 5000; s.Active = true }), nil, dropPhase, ""},
		{"drop, missing", cutoverSlot{}, missing, dropPhase, "does not exist"},
		{"drop, invalidated", with(func(s *cutoverSlot) { s.WALStatus = "lost" }), nil, dropPhase, "invalidated"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := checkOwnSlot("walrelay", tc.s, tc.err, start, tc.phase, "dbz")
			if tc.want == "" {
				if err != nil {
					t.Fatalf("checkOwnSlot = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("checkOwnSlot = %v, want %q", err, tc.want)
			}
			// Past a failed read: one line naming Debezium's slot and what to run next.
			msg := err.Error()
			next := strings.Contains(msg, "cutover again") || strings.Contains(msg, "run walrelay on it")
			if (tc.err == nil || errors.Is(tc.err, ErrSlotMissing)) && (strings.Contains(msg, "\n") || !strings.Contains(msg, "dbz") || !next) {
				t.Errorf("message %q: want one line naming Debezium's slot and what to run", msg)
			}
		})
	}
}
