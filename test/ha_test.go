package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// haTakeoverLimit is the promise: a standby streams within 5 s of the active
// instance's death.
const haTakeoverLimit = 5 * time.Second

// TestStandbyTakeover: two walrelay instances on one slot under a continuous workload.
// The active one is killed with SIGKILL three times; each time the standby must stream
// (the slot's walsender changes and the standby's /readyz turns 200) within 5 s of the
// kill, and the killed instance is started again and becomes the new standby. The
// standby logs once that it stands by, exposes walrelay_role{role="standby"} 1 and
// /readyz 503. The first standby stands by for 16 s first, so a retry with exponential
// backoff would miss the 5 s. At the end every committed event arrived (the harness
// verifier).
func TestStandbyTakeover(t *testing.T) { standbyTakeover(t, "ha", nil) }

// standbyTakeover runs the scenario; eos holds the exactly-once flags (nil: at-least-once).
func standbyTakeover(t *testing.T, short string, eos []string) *result {
	env := requireEnv(t)
	rng := testRand(t)
	s := newScenario(t, env, short)
	s.readCommitted = eos != nil
	args := s.runArgs(append([]string{"--status-interval", "100ms", "--standby-retry-interval", "1s"}, eos...)...)
	active := s.startArgsReady(args...)
	standby := s.startArgs(args...)
	haWaitStandby(t, standby, s.name)

	fw := newFaultWriter(t, s, env.pgDSN, newRandFrom(rng))
	stop := fw.runSteady(faultSteady(t))

	var takeovers []time.Duration
	for i := 1; i <= 3; i++ {
		// The first standby waits long enough that an exponential backoff (0.5 s doubling)
		// would be past 8 s by then: only a fixed retry interval takes over in time.
		wait := 2*time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))
		if i == 1 {
			wait = 16 * time.Second
		}
		time.Sleep(wait)
		// The standby has been retrying for a while: still one log line about it.
		if n := faultLogCount(standby, "standing by"); n != 1 {
			t.Errorf("standby %s logged %d 'standing by' lines, want exactly 1\n%s", standby.name, n, standby.tail(20))
		}
		oldPID := faultSlotPID(t, env.pgDSN, s.name)
		killed := time.Now()
		active.kill9()
		took := haWaitTakeover(t, env.pgDSN, s.name, oldPID, standby, killed)
		takeovers = append(takeovers, took)
		_, _, events, _ := fw.stats()
		t.Logf("takeover #%d: %s took over %s after kill -9 of %s (workload: %d committed events)",
			i, standby.name, took.Round(time.Millisecond), active.name, events)
		if took > haTakeoverLimit {
			t.Errorf("takeover #%d took %s, want <= %s", i, took.Round(time.Millisecond), haTakeoverLimit)
		}
		if n := faultLogCount(standby, "took over the replication slot"); n != 1 {
			t.Errorf("%s logged %d takeover lines, want 1", standby.name, n)
		}
		// The killed instance comes back as the new standby.
		active, standby = standby, s.startArgs(args...)
		haWaitStandby(t, standby, s.name)
	}
	t.Logf("takeover times (kill -9 to the standby streaming): %v", takeovers)
	return faultFinish(t, s, fw, stop, active, short+"_takeover", fmt.Sprintf("takeovers=%v", takeovers))
}

// haWaitStandby waits until p stands by: walrelay_role{role="standby"} is 1, role active
// is 0, walrelay_ready is 0 and /readyz answers 503.
func haWaitStandby(t *testing.T, p *walrelayProc, slot string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last string
	for {
		if p.exited() {
			t.Fatalf("walrelay %s exited (%s) instead of standing by\n%s", p.name, p.exitStatus(), p.tail(40))
		}
		if m, err := p.metrics(); err == nil {
			sb := m[fmt.Sprintf(`walrelay_role{role="standby",slot=%q}`, slot)]
			act := m[fmt.Sprintf(`walrelay_role{role="active",slot=%q}`, slot)]
			code := haReadyz(p)
			last = fmt.Sprintf("role standby=%v active=%v ready=%v /readyz=%d", sb, act, m["walrelay_ready"], code)
			if sb == 1 && act == 0 && m["walrelay_ready"] == 0 && code == http.StatusServiceUnavailable {
				t.Logf("walrelay %s stands by (%s)", p.name, last)
				return
			}
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("walrelay %s not standing by within 60s (%s)\n%s", p.name, last, p.tail(40))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// haWaitTakeover waits until a new walsender (not oldPID) holds the slot and p's /readyz
// answers 200, and returns the time since killed. p's role gauge must say active then.
func haWaitTakeover(t *testing.T, dsn, slot string, oldPID int, p *walrelayProc, killed time.Time) time.Duration {
	t.Helper()
	deadline := killed.Add(60 * time.Second)
	for {
		if p.exited() {
			t.Fatalf("standby %s exited (%s) instead of taking over\n%s", p.name, p.exitStatus(), p.tail(40))
		}
		pid := faultSlotPID(t, dsn, slot)
		if pid != 0 && pid != oldPID && haReadyz(p) == http.StatusOK {
			took := time.Since(killed)
			m, err := p.metrics()
			if err != nil {
				t.Fatalf("metrics of %s: %v", p.name, err)
			}
			if m[fmt.Sprintf(`walrelay_role{role="active",slot=%q}`, slot)] != 1 || m[fmt.Sprintf(`walrelay_role{role="standby",slot=%q}`, slot)] != 0 {
				t.Errorf("%s streams but its role gauge says otherwise: %v", p.name, haSeries(m, "walrelay_role"))
			}
			return took
		}
		if time.Now().After(deadline) {
			t.Fatalf("standby %s did not take over within 60s of the kill (slot walsender %d, was %d)\n%s", p.name, pid, oldPID, p.tail(40))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// haReadyz returns the status code of p's /readyz (0 when it does not answer).
func haReadyz(p *walrelayProc) int {
	addr := p.metricsAddr()
	if addr == "" {
		return 0
	}
	client := &http.Client{Timeout: time.Second}
	resp, err := client.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// haSeries returns the series of metric name in m, for messages.
func haSeries(m map[string]float64, name string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			out[k] = v
		}
	}
	return out
}
