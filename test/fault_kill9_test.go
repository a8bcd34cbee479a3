package e2e

import (
	"fmt"
	"testing"
	"time"
)

// TestFaultKill9: while the fault workload runs, walrelay is killed with SIGKILL at
// random moments at least 20 times (WALRELAY_FAULT_SCALE raises it), 0.2–1.5 s after each
// start, so some kills land during startup, slot acquisition or a standby retry, and is
// restarted each time (sometimes after a short pause). Every committed event must arrive,
// first deliveries in commit order per aggregate, nothing rolled back; duplicates are
// expected (at-least-once) and counted.
func TestFaultKill9(t *testing.T) {
	env := requireEnv(t)
	rng := testRand(t)
	s := newScenario(t, env, "fkill")
	args := s.runArgs("--status-interval", "100ms")
	p := s.startArgsReady(args...)

	fw := newFaultWriter(t, s, env.pgDSN, newRandFrom(rng))
	stop := fw.runSteady(faultSteady(t))

	kills := faultCount(20)
	var uptimes []string
	for i := 1; i <= kills; i++ {
		time.Sleep(200*time.Millisecond + time.Duration(rng.Int64N(int64(1300*time.Millisecond))))
		up := time.Since(p.started).Round(10 * time.Millisecond)
		p.kill9()
		uptimes = append(uptimes, up.String())
		if i%5 == 0 || i == kills {
			_, _, events, _ := fw.stats()
			t.Logf("kill -9 #%d after %s (workload: %d committed events, slot at %s)", i, up, events, slotLSN(t, env.pgDSN, s.name))
		}
		if rng.IntN(4) == 0 {
			time.Sleep(time.Duration(rng.Int64N(int64(300 * time.Millisecond))))
		}
		p = s.startArgs(args...)
	}
	t.Logf("uptimes before each kill: %v", uptimes)
	p.waitReady(60 * time.Second)
	faultFinish(t, s, fw, stop, p, "fault_kill9", fmt.Sprintf("kills=%d", kills))
}
