package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/walrelay/walrelay/cmd/walrelay/internal/config"
)

func TestLoadCutoverConfig(t *testing.T) {
	dsn := "postgres://u@127.0.0.1:5432/db"
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantKey string // ConfigError key; "" for success
		check   func(t *testing.T, c config.CutoverConfig)
	}{
		{name: "defaults", args: []string{"--postgres-dsn", dsn, "--from-slot", "debezium"},
			check: func(t *testing.T, c config.CutoverConfig) {
				if c.Slot != "walrelay" || c.Publication != "walrelay" || !c.Nudge || c.Timeout != 10*time.Minute || !c.CreatePublication {
					t.Errorf("defaults: %+v", c)
				}
			}},
		{name: "env", args: []string{"--from-slot", "debezium"}, env: map[string]string{"WALRELAY_POSTGRES_DSN": dsn, "WALRELAY_SLOT": "wr"},
			check: func(t *testing.T, c config.CutoverConfig) {
				if c.PostgresDSN != dsn || c.Slot != "wr" {
					t.Errorf("env not applied: %+v", c)
				}
			}},
		{name: "drop with start lsn", args: []string{"--postgres-dsn", dsn, "--from-slot", "debezium", "--drop-from-slot", "--start-lsn", "1/2A"},
			check: func(t *testing.T, c config.CutoverConfig) {
				if !c.DropFromSlot || c.StartLSN != pglogrepl.LSN(1<<32|0x2A) {
					t.Errorf("drop flags: %+v", c)
				}
			}},
		{name: "dsn required", args: []string{"--from-slot", "debezium"}, wantKey: "postgres-dsn"},
		{name: "from-slot required", args: []string{"--postgres-dsn", dsn}, wantKey: "from-slot"},
		{name: "from-slot is walrelay's own", args: []string{"--postgres-dsn", dsn, "--from-slot", "walrelay"}, wantKey: "from-slot"},
		{name: "bad timeout", args: []string{"--postgres-dsn", dsn, "--from-slot", "d", "--timeout", "0"}, wantKey: "timeout"},
		{name: "start-lsn without drop", args: []string{"--postgres-dsn", dsn, "--from-slot", "d", "--start-lsn", "0/1"}, wantKey: "start-lsn"},
		{name: "bad lsn", args: []string{"--postgres-dsn", dsn, "--from-slot", "d", "--drop-from-slot", "--start-lsn", "x"}, wantKey: "flags"},
		{name: "bad slot name", args: []string{"--postgres-dsn", dsn, "--from-slot", "d", "--slot", "Bad-Slot"}, wantKey: "slot"},
		{name: "stray argument", args: []string{"--postgres-dsn", dsn, "--from-slot", "d", "extra"}, wantKey: "flags"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := config.DefaultCutoverConfig()
			err := config.Load(config.Command{Name: "cutover"}, &c, tc.args, envMap(tc.env), io.Discard)
			if tc.wantKey == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				tc.check(t, c)
				return
			}
			var ce *config.Error
			if !errors.As(err, &ce) || ce.Key != tc.wantKey {
				t.Fatalf("error %v, want a ConfigError for %q", err, tc.wantKey)
			}
		})
	}
}

func TestCutoverHelp(t *testing.T) {
	var out bytes.Buffer
	c := config.DefaultCutoverConfig()
	err := config.Load(config.Command{Name: "cutover", Usage: cutoverUsage}, &c, []string{"-h"}, envMap(nil), &out)
	if !errors.Is(err, flag.ErrHelp) || !strings.Contains(out.String(), "--drop-from-slot") || !strings.Contains(out.String(), "from-slot") {
		t.Fatalf("help: err %v, output %q", err, out.String())
	}
	var stdout, stderr bytes.Buffer
	if code := Main(t.Context(), []string{"cutover"}, envMap(nil), &stdout, &stderr); code != ExitConfig {
		t.Fatalf("cutover without flags: exit %d, want %d (stderr %s)", code, ExitConfig, stderr.String())
	}
}

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
	if got := cutoverProgress("dbz", cutoverSlot{Active: true, Confirmed: 0x1000}, start); !strings.Contains(got, "4096 bytes to go") ||
		!strings.Contains(got, "0/1000") || !strings.Contains(got, "0/2000") {
		t.Errorf("progress: %q", got)
	}
	if got := cutoverProgress("dbz", cutoverSlot{Confirmed: 0x1000}, start); !strings.Contains(got, "INACTIVE") {
		t.Errorf("inactive progress: %q", got)
	}
	if got := cutoverProgress("dbz", cutoverSlot{Confirmed: 0x2000}, start); !strings.Contains(got, ">=") {
		t.Errorf("done progress: %q", got)
	}
	if got := stallHint("dbz", cutoverSlot{Active: true}, false); !strings.Contains(got, "heartbeat.interval.ms") ||
		!strings.Contains(got, "message.prefix.exclude.list="+config.CutoverNudgePrefix) {
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
