package e2e

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestSlotFailover: --slot-failover on a server without failover slots (before
// Postgres 17, as the suite's Postgres 15) makes walrelay exit 1 at start with one ERROR
// line that names the setting and the version it needs, and creates no slot. On
// Postgres 17+ the slot is created with failover = true.
func TestSlotFailover(t *testing.T) {
	env := requireEnv(t)
	s := newScenario(t, env, "failover")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var version int
	if err := pgPool(t, env.pgDSN).scan(ctx, "SELECT current_setting('server_version_num')::int", nil, &version); err != nil {
		t.Fatal(err)
	}
	p := s.start("--slot-failover")
	if version >= 170000 {
		p.waitReady(60 * time.Second)
		var failover bool
		if err := pgPool(t, env.pgDSN).scan(ctx, "SELECT failover FROM pg_replication_slots WHERE slot_name = $1", []any{s.name}, &failover); err != nil {
			t.Fatal(err)
		}
		if !failover {
			t.Fatalf("Postgres %d: slot %s created without failover", version, s.name)
		}
		return
	}
	if !p.waitExit(60 * time.Second) {
		t.Fatalf("walrelay --slot-failover on Postgres %d still running after 60s\n%s", version, p.tail(20))
	}
	if code := p.exitCode(); code != 1 {
		t.Fatalf("exit code %d, want 1\n%s", code, p.tail(20))
	}
	var errs []string
	for _, m := range p.logLines() {
		if m["level"] == "ERROR" {
			errs = append(errs, strings.TrimSpace(m["msg"].(string)+": "+toString(m["error"])))
		}
	}
	if len(errs) != 1 {
		t.Fatalf("%d ERROR lines, want 1:\n%s", len(errs), p.tail(20))
	}
	for _, kw := range []string{"failover slot", "Postgres 17", "turn slot failover off"} {
		if !strings.Contains(errs[0], kw) {
			t.Errorf("ERROR line lacks %q: %s", kw, errs[0])
		}
	}
	if strings.Contains(errs[0], "\n") {
		t.Errorf("ERROR is not one line: %q", errs[0])
	}
	if si, err := querySlot(ctx, t, env.pgDSN, s.name); err != nil || si.exists {
		t.Errorf("slot %s exists=%v (err %v) after the refusal, want none", s.name, si.exists, err)
	}
	t.Logf("Postgres %d: %s", version, errs[0])
}

func toString(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return ""
}
