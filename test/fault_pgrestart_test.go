package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestFaultPostgresRestart: Postgres crashes and recovers (pg.sh restart-immediate: every
// backend killed, crash recovery) at least twice while the workload runs. It runs on a
// private cluster, so the restarts cannot break tests of other packages that use the
// shared one concurrently.
//
// walrelay must reconnect by itself (no restart of the process) and resume from the slot;
// the slot itself may fall back to its last checkpointed position after a crash, so
// duplicates are expected. The writer reconnects too; a transaction whose COMMIT got no
// answer is classified from its marker row once its backend is gone (faultWriter), so
// "committed" in the summary is what Postgres really committed.
func TestFaultPostgresRestart(t *testing.T) { faultPostgresRestart(t, "fpgrst", nil) }

// faultPostgresRestart runs the scenario; eos holds the exactly-once flags (nil: at-least-once).
func faultPostgresRestart(t *testing.T, short string, eos []string) *result {
	env := requireEnv(t)
	rng := testRand(t)
	penv, pgScript := startPrivateCluster(t, env)
	s := newScenario(t, penv, short)
	s.readCommitted = eos != nil
	p := s.startArgsReady(s.runArgs(append([]string{"--status-interval", "200ms"}, eos...)...)...)

	fw := newFaultWriter(t, s, penv.pgDSN, newRandFrom(rng))
	stop := fw.runSteady(faultSteady(t))

	restarts := faultCount(2)
	var recoveries []string
	for i := 1; i <= restarts; i++ {
		time.Sleep(2*time.Second + time.Duration(rng.Int64N(int64(2*time.Second))))
		// Crash while a commit's answer is pending: odd restarts after the COMMIT ran
		// (committed, the client sees a connection error), even ones before it (not
		// committed, same error). The writer must tell them apart from the marker row.
		hook := fw.holdNextCommit(i%2 == 1, 5*time.Second)
		select {
		case <-hook.sent:
		case <-time.After(30 * time.Second):
			t.Fatal("the writer did not reach a commit within 30 s")
		}
		time.Sleep(300 * time.Millisecond)
		oldPID := faultSlotPID(t, penv.pgDSN, s.name)
		start := time.Now()
		if err := runEnvScript(t, env, 2*time.Minute, pgScript, "pg.sh", "restart-immediate"); err != nil {
			t.Fatal(err)
		}
		faultResetPool(t, penv.pgDSN)
		up := time.Since(start)
		si := waitSlotStreaming(t, penv.pgDSN, s.name, 90*time.Second, p)
		// Something the writer committed after the restart must get through.
		time.Sleep(time.Second)
		target := fw.lastPostLSN()
		waitSlotLSN(t, penv.pgDSN, s.name, target, 90*time.Second, p)
		rec := time.Since(start).Round(10 * time.Millisecond)
		fw.mu.Lock()
		recorded, committed := len(fw.txns) > hook.txn.Index, hook.txn.Committed
		fw.mu.Unlock()
		if !recorded {
			t.Fatalf("restart #%d: the writer has not classified txn %d yet", i, hook.txn.Index)
		}
		if committed != hook.afterCommit {
			t.Errorf("restart #%d: txn %d crashed %s COMMIT was classified committed=%v", i, hook.txn.Index,
				map[bool]string{true: "after", false: "before"}[hook.afterCommit], committed)
		}
		recoveries = append(recoveries, rec.String())
		t.Logf("postgres restart #%d: up again after %s; walsender %d -> %d; slot past %s %s after the restart began",
			i, up.Round(10*time.Millisecond), oldPID, si.activePID, target, rec)
	}
	time.Sleep(time.Second)
	if p.exited() {
		t.Fatalf("walrelay exited (%s); it must reconnect to Postgres by itself\n%s", p.exitStatus(), p.tail(40))
	}
	return faultFinish(t, s, fw, stop, p, map[bool]string{false: "fault_pg_restart", true: "eos_pg_restart"}[eos != nil], fmt.Sprintf("pg_restarts=%d", restarts),
		"recovery="+strings.Join(recoveries, ","),
		fmt.Sprintf("walrelay_reconnect_logs=%d", faultLogCount(p, "replication stream lost")),
		fmt.Sprintf("walrelay_restarts=%d", s.runs-1))
}
