package relay

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/walrelay/walrelay/internal/promtest"
	"github.com/walrelay/walrelay/relay/relayprom"
	"github.com/walrelay/walrelay/replication"
)

var gather = promtest.Gather

// newMetrics is walrelay's Prometheus Observer on reg, for slot.
func newMetrics(reg *prometheus.Registry, slot string) *relayprom.Metrics {
	return relayprom.New(reg, slot, relayprom.Build{Version: "test", Revision: "test"})
}

// TestStandbyRetries: a slot in use gives the fixed interval (not the
// backoff), one log line per standby period, one count, role standby; a
// stream that starts makes the instance active; a lost connection uses the
// backoff and clears the role.
func TestStandbyRetries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg, "s1")
	var logs bytes.Buffer
	sb := newStandby(time.Second, "s1", m, slog.New(slog.NewJSONHandler(&logs, nil)))
	inUse := fmt.Errorf("start replication on slot s1: %w: active for PID 42", replication.ErrSlotInUse)
	role := func() string {
		g := gather(t, reg)
		switch {
		case g["walrelay_role{role=active,slot=s1}"] == 1 && g["walrelay_role{role=standby,slot=s1}"] == 0:
			return "active"
		case g["walrelay_role{role=active,slot=s1}"] == 0 && g["walrelay_role{role=standby,slot=s1}"] == 1:
			return "standby"
		case g["walrelay_role{role=active,slot=s1}"] == 0 && g["walrelay_role{role=standby,slot=s1}"] == 0:
			return ""
		}
		return "both"
	}
	for i := range 5 {
		wait, standing := sb.after(inUse, 16*time.Second)
		if wait < 800*time.Millisecond || wait >= 1200*time.Millisecond || !standing {
			t.Fatalf("try %d: wait %v standing %v, want 1s ± 20%% true", i, wait, standing)
		}
	}
	if n := strings.Count(logs.String(), "standing by"); n != 1 {
		t.Errorf("%d standing-by log lines for 5 tries, want 1:\n%s", n, logs.String())
	}
	if got := gather(t, reg)["walrelay_reconnects_total{cause=slot_in_use}"]; got != 1 {
		t.Errorf("slot_in_use count %v, want 1 (one standby period)", got)
	}
	if r := role(); r != "standby" {
		t.Errorf("role %q, want standby", r)
	}
	sb.streaming()
	if r := role(); r != "active" {
		t.Errorf("role %q after streaming, want active", r)
	}
	if !strings.Contains(logs.String(), "took over") {
		t.Errorf("no takeover log line:\n%s", logs.String())
	}
	// A second standby period logs and counts again.
	sb.after(inUse, time.Second)
	if n := strings.Count(logs.String(), "standing by"); n != 2 {
		t.Errorf("%d standing-by log lines after a second standby period, want 2", n)
	}
	wait, standing := sb.after(errors.New("unexpected EOF"), 4*time.Second)
	if wait != 4*time.Second || standing {
		t.Errorf("lost connection: wait %v standing %v, want the backoff 4s, false", wait, standing)
	}
	if r := role(); r != "" {
		t.Errorf("role %q while reconnecting, want neither", r)
	}
	if got := gather(t, reg)["walrelay_reconnects_total{cause=connection}"]; got != 1 {
		t.Errorf("connection count %v, want 1", got)
	}
}
