package replication

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestSessionString: a holder's line names pid, user, application, client,
// state and age, says "idle in transaction" as such, and says when Postgres
// hides the details.
func TestSessionString(t *testing.T) {
	for _, tc := range []struct {
		s    Session
		want []string
		not  []string
	}{
		{Session{PID: 42, User: "app", Application: "billing", ClientAddr: "10.0.0.7", Database: "shop", BackendType: "client backend", State: "idle in transaction", XactAge: 90 * time.Second},
			[]string{"pid 42", "user app", `application "billing"`, "client 10.0.0.7", "database shop", ", idle in transaction", "transaction open for 1m30s"}, []string{"client backend", "state idle"}},
		{Session{PID: 7, Application: "", State: "active", XactAge: time.Second},
			[]string{"pid 7", `application ""`, "state active"}, []string{"client", "idle in transaction"}},
		{Session{PID: 9, Application: "x", XactAge: -1},
			[]string{"state hidden (grant pg_read_all_stats to see it)"}, []string{"transaction open"}},
	} {
		got := tc.s.String()
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%q lacks %q", got, w)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(got, n) {
				t.Errorf("%q has %q", got, n)
			}
		}
	}
	if !(Session{State: "idle in transaction (aborted)"}).IdleInTransaction() || (Session{State: "active"}).IdleInTransaction() {
		t.Error("IdleInTransaction")
	}
}

// TestSafeWALNote: unlimited, lost, no WAL written, plenty and little time
// left; only the last is at risk.
func TestSafeWALNote(t *testing.T) {
	size := func(n int64) *int64 { return &n }
	with := func(s Slot) Slot { s.columns = map[string]bool{"safe_wal_size": true}; return s }
	perSec := func(b int64) WALRate { return WALRate{Bytes: b * 2, Period: 2 * time.Second} }
	for _, tc := range []struct {
		name   string
		s      Slot
		r      WALRate
		want   string
		atRisk bool
	}{
		{"old server", Slot{}, perSec(1), "", false},
		{"unlimited", with(Slot{}), perSec(1), "unlimited", false},
		{"lost", with(Slot{WALStatus: "lost"}), perSec(1), "invalidated", true},
		{"idle", with(Slot{SafeWALSize: size(1 << 30)}), WALRate{Period: 2 * time.Second}, "no time estimate", false},
		{"plenty", with(Slot{SafeWALSize: size(7200 << 20)}), perSec(1 << 20), "about 2h0m0s at the current WAL rate", false},
		{"little", with(Slot{SafeWALSize: size(600 << 20)}), perSec(1 << 20), "about 10m0s at the current WAL rate", true},
	} {
		note, atRisk := SafeWALNote(tc.s, tc.r, time.Hour)
		if !strings.Contains(note, tc.want) || (tc.want == "" && note != "") || atRisk != tc.atRisk {
			t.Errorf("%s: %q, at risk %v; want %q, at risk %v", tc.name, note, atRisk, tc.want, tc.atRisk)
		}
	}
}

// TestWalsenderString: a walsender silent for longer than walrelay's
// keepalive is called stale; the line always names wal_sender_timeout and
// the pid to end.
func TestWalsenderString(t *testing.T) {
	live := Walsender{PID: 5, Application: "walrelay", ClientAddr: "10.0.0.9", State: "streaming", ReplyAge: 2 * time.Second, SenderTimeout: time.Minute}
	if s := live.String(); strings.Contains(s, "stale") || !strings.Contains(s, "last reply 2s ago") || !strings.Contains(s, "wal_sender_timeout (1m0s") {
		t.Errorf("live: %q", s)
	}
	stale := live
	stale.ReplyAge = 45 * time.Second
	if s := stale.String(); !strings.Contains(s, "stale") || !strings.Contains(s, "pg_terminate_backend(5)") {
		t.Errorf("stale: %q", s)
	}
	off := live
	off.SenderTimeout = 0
	if s := off.String(); !strings.Contains(s, "wal_sender_timeout (off") {
		t.Errorf("timeout off: %q", s)
	}
}

// TestSlotWaitString: the wait names the blockers, or says why it cannot.
func TestSlotWaitString(t *testing.T) {
	w := SlotWait{Blockers: []Session{{PID: 1, Application: "a", State: "active", XactAge: time.Second}, {PID: 2, Application: "b", State: "idle in transaction", XactAge: time.Second}}}
	if s := w.String(); !strings.Contains(s, "pid 1") || !strings.Contains(s, "; pid 2") {
		t.Errorf("%q", s)
	}
	if s := (SlotWait{Err: errors.New("boom")}).String(); !strings.Contains(s, "cannot list them: boom") {
		t.Errorf("%q", s)
	}
	if s := (SlotWait{Standby: true}).String(); !strings.Contains(s, "standby snapshot") {
		t.Errorf("%q", s)
	}
}

// TestStandbyHealthProtected: protected only with every check OK and a copy.
func TestStandbyHealthProtected(t *testing.T) {
	ok := FailoverCheck{OK: true, Note: "fine"}
	bad := FailoverCheck{Note: "sync_replication_slots is off"}
	copyOf := &Slot{}
	for _, tc := range []struct {
		h       StandbyHealth
		want    bool
		problem string
	}{
		{StandbyHealth{Checks: []FailoverCheck{ok, ok}, Copy: copyOf}, true, ""},
		{StandbyHealth{Checks: []FailoverCheck{ok, bad}, Copy: copyOf}, false, "sync_replication_slots is off"},
		{StandbyHealth{Checks: []FailoverCheck{ok}}, false, "no copy of the slot"},
	} {
		if got := tc.h.Protected(); got != tc.want || tc.h.Problem() != tc.problem {
			t.Errorf("%+v: protected %v problem %q, want %v %q", tc.h, got, tc.h.Problem(), tc.want, tc.problem)
		}
	}
	f := FailoverHealth{Primary: &Slot{ConfirmedFlushLSN: 1000}}
	if lag := f.LagBytes(StandbyHealth{Copy: &Slot{ConfirmedFlushLSN: 400}}); lag != 600 {
		t.Errorf("lag %d, want 600", lag)
	}
	if lag := f.LagBytes(StandbyHealth{}); lag != -1 {
		t.Errorf("lag without a copy %d, want -1", lag)
	}
}
