package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestFaultBrokerKill9: the Kafka broker is killed with SIGKILL (kafka.sh kill) and
// restarted (kafka.sh restart) at least 3 times while the workload runs. walrelay must
// ride it out without exiting (franz-go retries without limit; backpressure holds the
// WAL), must not confirm anything written while the broker was dead, and in the end every
// committed event is there, in commit order per aggregate. The broker is restored in
// t.Cleanup whatever happens.
func TestFaultBrokerKill9(t *testing.T) { faultBrokerKill9(t, "fbkill", nil) }

// faultBrokerKill9 runs the scenario; eos holds the exactly-once flags (nil: at-least-once).
func faultBrokerKill9(t *testing.T, short string, eos []string) *result {
	env := requireEnv(t)
	rng := testRand(t)
	s := newScenario(t, env, short)
	s.readCommitted = eos != nil
	broker := newFaultBroker(t, env)
	p := s.startArgsReady(s.runArgs(append([]string{"--status-interval", "200ms"}, eos...)...)...)

	fw := newFaultWriter(t, s, env.pgDSN, newRandFrom(rng))
	stop := fw.runSteady(faultSteady(t))

	cycles := faultCount(3)
	var recoveries []string
	for i := 1; i <= cycles; i++ {
		time.Sleep(2*time.Second + time.Duration(rng.Int64N(int64(2*time.Second))))
		broker.kill()
		deadAt := time.Now()
		down := time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))
		time.Sleep(down)
		// Whatever was written after the broker died cannot have been acknowledged.
		first := fw.firstCommittedAfter(deadAt)
		confirmed := slotLSN(t, env.pgDSN, s.name)
		if first != nil && confirmed > first.PreCommit {
			t.Errorf("kill #%d: confirmed_flush_lsn %s is past %s, before the commit of txn %d written while the broker was dead",
				i, confirmed, first.PreCommit, first.Index)
		}
		if p.exited() {
			t.Fatalf("walrelay exited (%s) while the broker was dead; it must retry\n%s", p.exitStatus(), p.tail(40))
		}
		downFor := time.Since(deadAt)
		took := broker.restart()
		restarted := time.Now()
		target := fw.lastPostLSN()
		waitSlotLSN(t, env.pgDSN, s.name, target, 2*time.Minute, p)
		rec := time.Since(restarted).Round(10 * time.Millisecond)
		recoveries = append(recoveries, rec.String())
		t.Logf("broker kill #%d: down %s (+%s restart); slot caught up to %s %s after the broker answered",
			i, downFor.Round(10*time.Millisecond), took.Round(10*time.Millisecond), target, rec)
	}
	time.Sleep(time.Second)
	if p.exited() {
		t.Fatalf("walrelay exited (%s); it must survive broker crashes\n%s", p.exitStatus(), p.tail(40))
	}
	return faultFinish(t, s, fw, stop, p, map[bool]string{false: "fault_broker_kill9", true: "eos_broker_kill9"}[eos != nil], fmt.Sprintf("broker_kills=%d", cycles),
		"recovery="+strings.Join(recoveries, ","), fmt.Sprintf("walrelay_restarts=%d", s.runs-1))
}
