package e2e

import (
	"net"
	"os"
	"testing"
	"time"
)

// kafkaScriptEnv makes kafka.sh act on the broker the tests were given.
func kafkaScriptEnv(env *testEnv) []string {
	if os.Getenv("WALRELAY_TEST_KAFKA_PORT") != "" {
		return nil
	}
	if _, port, err := net.SplitHostPort(env.kafka); err == nil {
		return []string{"WALRELAY_TEST_KAFKA_PORT=" + port}
	}
	return nil
}

// TestAckDiscipline (real broker): the slot is confirmed only up to what Kafka
// acknowledged. With the broker stopped, transactions written meanwhile must not move
// confirmed_flush_lsn past their start — not through keepalives and not through
// heartbeats (1 s here) — and once the broker is back everything arrives and the slot
// catches up.
func TestAckDiscipline(t *testing.T) {
	env := requireEnv(t)
	rng := testRand(t)
	s := newScenario(t, env, "ack")

	brokerDown := false
	t.Cleanup(func() {
		// Runs after walrelay was killed and before the scenario's cleanup needs the broker.
		if brokerDown {
			if err := runEnvScript(t, env, 3*time.Minute, kafkaScriptEnv(env), "kafka.sh", "start"); err != nil {
				t.Errorf("cleanup: could not bring the broker back: %v", err)
			}
		}
	})

	p := s.startReady("--heartbeat-interval", "1s", "--status-interval", "1s")
	w := newWorkload(t, env, s.table, 20, newRandFrom(rng))
	for range 5 {
		w.mustWriteTxn(5, false)
	}
	waitSlotLSN(t, env.pgDSN, s.name, w.lastPostLSN(), 60*time.Second, p)

	brokerDown = true
	if err := runEnvScript(t, env, 2*time.Minute, kafkaScriptEnv(env), "kafka.sh", "stop"); err != nil {
		t.Fatal(err)
	}
	before := slotLSN(t, env.pgDSN, s.name)

	// The first transaction's commit record ends after bound (sampled in the same round
	// trip as its COMMIT): while its records are unacknowledged the watermark stays below.
	var first *txnRec
	for i := range 20 {
		tx := w.mustWriteTxn(1+rng.IntN(10), i%5 == 4)
		if first == nil && tx.Committed {
			first = tx
		}
	}
	bound := first.PreCommit
	t.Logf("broker stopped; slot at %s; first transaction's commit ends after %s; last commit ≤ %s",
		before, bound, w.lastPostLSN())

	const watch = 8 * time.Second
	var highest lsn
	for end := time.Now().Add(watch); time.Now().Before(end); {
		c := slotLSN(t, env.pgDSN, s.name)
		highest = max(highest, c)
		if c > bound {
			t.Errorf("confirmed_flush_lsn %s moved past %s while the broker was down: the slot confirmed unacknowledged records", c, bound)
			break
		}
		if p.exited() {
			t.Fatalf("walrelay exited (%s) while the broker was down; it must retry\n%s", p.exitStatus(), p.tail(40))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("while the broker was down (%s): confirmed_flush_lsn stayed within [%s, %s], bound %s", watch, before, highest, bound)

	if err := runEnvScript(t, env, 3*time.Minute, kafkaScriptEnv(env), "kafka.sh", "restart"); err != nil {
		t.Fatal(err)
	}
	brokerDown = false
	waitSlotLSN(t, env.pgDSN, s.name, w.lastPostLSN(), 3*time.Minute, p)
	res := verify(t, s, w)
	t.Log(res.summary("ack", "bound="+bound.String(), "max_confirmed_while_down="+highest.String()))
	res.requireClean(t)
}
