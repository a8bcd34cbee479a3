package e2e

import (
	"fmt"
	"sort"
	"testing"
	"time"
)

// TestCrashKill9 is the key fault test (STYLE.md 20): while a workload commits and rolls
// back transactions continuously, walrelay is killed with SIGKILL at random moments and
// restarted. In the end every committed event must have arrived at least once, the first
// deliveries of each aggregate must follow commit order, and no rolled-back event may
// appear. Duplicates are expected (at-least-once) and reported.
func TestCrashKill9(t *testing.T) {
	env := requireEnv(t)
	rng := testRand(t)
	s := newScenario(t, env, "crash")
	// Frequent status updates leave a premature confirmation less time to hide behind
	// the acknowledgement that follows it.
	runArgs := []string{"--status-interval", "100ms"}
	p := s.startReady(runArgs...)

	w := newWorkload(t, env, s.table, 200, newRandFrom(rng))
	stop := w.runContinuous(continuousOpts{maxEvents: 20, rollbackPct: 10, maxPause: 2 * time.Millisecond})
	t.Cleanup(func() { _ = stop() })

	kills := 5 + rng.IntN(2)
	for i := 1; i <= kills; i++ {
		time.Sleep(500*time.Millisecond + time.Duration(rng.Int64N(int64(2500*time.Millisecond))))
		up := time.Since(p.started).Round(time.Millisecond)
		p.kill9()
		txns, _, events, _ := w.stats()
		t.Logf("kill -9 #%d of walrelay %s after %s (workload: %d transactions, %d committed events, slot at %s)",
			i, p.name, up, txns, events, slotLSN(t, env.pgDSN, s.name))
		if rng.IntN(3) == 0 {
			time.Sleep(time.Duration(rng.Int64N(int64(500 * time.Millisecond))))
		}
		p = s.start(runArgs...)
	}
	if err := stop(); err != nil {
		t.Fatalf("workload: %v", err)
	}
	target := currentLSN(t, env.pgDSN)
	txns, ctxns, events, rbevents := w.stats()
	t.Logf("workload stopped: %d transactions (%d committed, %d events; %d rolled-back events); final LSN %s",
		txns, ctxns, events, rbevents, target)

	p.waitReady(60 * time.Second)
	waitSlotLSN(t, env.pgDSN, s.name, target, 120*time.Second, p)
	res := verify(t, s, w)
	res.requireClean(t)
	t.Log(res.summary("crash", fmt.Sprintf("kills=%d", kills)))
}

// TestSIGTERMDrains: under load, SIGTERM makes walrelay drain, confirm its final
// watermark and exit 0 within the shutdown timeout. A second run then delivers the rest.
//
// What may be delivered twice: walrelay stops reading at an arbitrary point of the
// stream, possibly inside a transaction T (pgoutput has sent BEGIN and some INSERTs of T
// but not yet its COMMIT). Records of T already handed to the producer are drained and
// land in Kafka, but T's commit was never seen, so the watermark — and with it the
// confirmed_flush_lsn — stays at the end of the transaction before T. The next run
// streams from there and sends T again, whole. Every transaction before T was fully read,
// its records acknowledged during the drain and covered by the final watermark, so it is
// never sent again. Hence: duplicates may come from at most one transaction, and that
// transaction must end after the confirmed LSN of the first run. Anything more means the
// final watermark was not confirmed (or was confirmed too early — then events are lost,
// which requireClean catches).
func TestSIGTERMDrains(t *testing.T) {
	env := requireEnv(t)
	rng := testRand(t)
	s := newScenario(t, env, "sigterm")
	const shutdownTimeout = 20 * time.Second
	p := s.startReady("--shutdown-timeout", shutdownTimeout.String())

	w := newWorkload(t, env, s.table, 50, newRandFrom(rng))
	stop := w.runContinuous(continuousOpts{maxEvents: 20, rollbackPct: 10, maxPause: 2 * time.Millisecond})
	t.Cleanup(func() { _ = stop() })
	time.Sleep(3*time.Second + time.Duration(rng.Int64N(int64(time.Second))))

	p.sigterm()
	termAt := time.Now()
	if !p.waitExit(shutdownTimeout + 10*time.Second) {
		t.Fatalf("walrelay did not exit within %s of SIGTERM\n%s", shutdownTimeout+10*time.Second, p.tail(40))
	}
	took := time.Since(termAt)
	t.Logf("walrelay exited %s after SIGTERM with %s", took.Round(time.Millisecond), p.exitStatus())
	if code := p.exitCode(); code != 0 {
		t.Errorf("exit code after SIGTERM: %d (%s), want 0\n%s", code, p.exitStatus(), p.tail(40))
	}
	if took > shutdownTimeout+2*time.Second {
		t.Errorf("shutdown took %s, more than --shutdown-timeout %s", took, shutdownTimeout)
	}

	// The workload goes on a little while nobody reads, then stops.
	time.Sleep(500 * time.Millisecond)
	if err := stop(); err != nil {
		t.Fatalf("workload: %v", err)
	}
	confirmed := slotLSN(t, env.pgDSN, s.name)
	target := currentLSN(t, env.pgDSN)
	txns, ctxns, events, _ := w.stats()
	t.Logf("after the first run: slot confirmed at %s; workload %d transactions (%d committed, %d events), final LSN %s",
		confirmed, txns, ctxns, events, target)
	if confirmed == 0 {
		t.Fatal("the first run confirmed nothing")
	}

	p2 := s.startReady("--shutdown-timeout", shutdownTimeout.String())
	waitSlotLSN(t, env.pgDSN, s.name, target, 120*time.Second, p2)
	res := verify(t, s, w)
	res.requireClean(t)

	dupTxns := make([]*txnRec, 0, len(res.dupEvents))
	for tx := range res.dupEvents {
		dupTxns = append(dupTxns, tx)
	}
	sort.Slice(dupTxns, func(i, j int) bool { return dupTxns[i].Index < dupTxns[j].Index })
	for _, tx := range dupTxns {
		t.Logf("  duplicates: txn %d (%d events, %d delivered twice), commit end in (%s, %s], first run confirmed %s",
			tx.Index, len(tx.Events), res.dupEvents[tx], tx.PreCommit, tx.PostLSN, confirmed)
		if tx.PostLSN <= confirmed {
			t.Errorf("txn %d ends at or before the confirmed LSN %s (commit end ≤ %s) yet was delivered again", tx.Index, confirmed, tx.PostLSN)
		}
	}
	if len(dupTxns) > 1 {
		t.Errorf("duplicates from %d transactions; at most the one open at SIGTERM may repeat", len(dupTxns))
	}
	t.Log(res.summary("sigterm", fmt.Sprintf("dup_txns=%d", len(dupTxns)), "shutdown="+took.Round(time.Millisecond).String()))
}
