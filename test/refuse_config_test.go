package e2e

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestInvalidConfigFailsAtStart: a configuration only the decoder can judge
// (--header-columns trace,trace) makes walrelay exit non-zero at start, before it
// touches Postgres (no slot is created), with exactly one ERROR line naming the
// problem. It used to pass the startup checks, fail inside every replication session
// and reconnect forever.
func TestInvalidConfigFailsAtStart(t *testing.T) {
	env := requireEnv(t)
	s := newScenario(t, env, "badcfg")
	p := startWalrelay(t, "badcfg", filepath.Join(s.logDir, "run.log"), s.runArgs("--header-columns", "trace,trace"), nil)
	const limit = 30 * time.Second
	if !p.waitExit(limit) {
		t.Fatalf("walrelay still running %s after start; want a refusal at start\n%s", limit, p.tail(20))
	}
	took := time.Since(p.started).Round(time.Millisecond)
	if code := p.exitCode(); code <= 0 {
		t.Errorf("exit status %s, want a non-zero exit code", p.exitStatus())
	}
	var errorLines []string
	for _, raw := range strings.Split(p.log(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(raw), &m) == nil && strings.EqualFold(m["level"].(string), "ERROR") {
			errorLines = append(errorLines, raw)
		}
	}
	if len(errorLines) != 1 {
		t.Fatalf("%d ERROR lines, want exactly one:\n%s", len(errorLines), p.tail(20))
	}
	if line := errorLine(p.log(), []string{"header-columns", `\"trace\" listed twice`}); line == "" {
		t.Errorf("the ERROR line does not name header-columns and the duplicate: %s", errorLines[0])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if si, err := querySlot(ctx, t, env.pgDSN, s.name); err != nil {
		t.Fatal(err)
	} else if si.exists {
		t.Errorf("slot %s exists: walrelay went as far as Postgres before refusing the configuration", s.name)
	}
	t.Logf("scenario=badcfg exit=%d took=%s error_line=%s", p.exitCode(), took, errorLines[0])
}
