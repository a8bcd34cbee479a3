package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// eosKill9 runs the kill -9 scenario (as TestFaultKill9) with the given
// delivery mode, kills and status interval, and verifies with a
// read_committed consumer. With streamFirst every instance is streaming
// before it is killed.
func eosKill9(t *testing.T, delivery string, kills int, statusInterval string, streamFirst bool) *result {
	env := requireEnv(t)
	rng := testRand(t)
	s := newScenario(t, env, "eoskill")
	s.readCommitted = true
	args := s.runArgs("--status-interval", statusInterval, "--delivery", delivery)
	p := s.startArgsReady(args...)

	fw := newFaultWriter(t, s, env.pgDSN, newRandFrom(rng))
	stop := fw.runSteady(faultSteady(t))
	for i := 1; i <= kills; i++ {
		if streamFirst {
			p.waitReady(60 * time.Second)
		}
		time.Sleep(200*time.Millisecond + time.Duration(rng.Int64N(int64(1300*time.Millisecond))))
		up := time.Since(p.started).Round(10 * time.Millisecond)
		p.kill9()
		if i%5 == 0 || i == kills {
			_, _, events, _ := fw.stats()
			t.Logf("kill -9 #%d after %s (workload: %d committed events, slot at %s)", i, up, events, slotLSN(t, env.pgDSN, s.name))
		}
		if rng.IntN(4) == 0 {
			time.Sleep(time.Duration(rng.Int64N(int64(300 * time.Millisecond))))
		}
		p = s.startArgs(args...)
	}
	p.waitReady(60 * time.Second)
	return faultFinish(t, s, fw, stop, p, "eos_kill9_"+delivery, fmt.Sprintf("kills=%d", kills))
}

// TestExactlyOnceKill9: walrelay in exactly-once mode is killed with SIGKILL at
// random moments while the fault workload runs (20 kills, more with
// WALRELAY_FAULT_SCALE); a read_committed consumer sees every committed event
// exactly once, in commit order per aggregate. The same verifier in
// at-least-once mode must see duplicates, so it can see them: 5 kills of a
// streaming instance whose slot is confirmed every second (the default), so
// each kill leaves events sent and not confirmed.
func TestExactlyOnceKill9(t *testing.T) {
	t.Run("at-least-once_sees_duplicates", func(t *testing.T) {
		res := eosKill9(t, "at-least-once", 5, "1s", true)
		if res.duplicates == 0 {
			t.Errorf("at-least-once with 5 kills -9: the read_committed verifier saw no duplicate; it cannot prove their absence")
		}
	})
	t.Run("exactly-once", func(t *testing.T) {
		res := eosKill9(t, "exactly-once", faultCount(20), "100ms", false)
		if res.duplicates != 0 {
			t.Errorf("exactly-once: duplicates=%d for a read_committed consumer, want 0", res.duplicates)
		}
	})
}

// TestExactlyOnceZombieFenced: a walrelay paused with SIGSTOP loses its
// replication connection (pg_terminate_backend of its walsender) and a second
// instance takes the slot, which fences the first's transactional producer.
// Resumed with SIGCONT, the first exits with the fenced message (or, when
// its client never saw its transaction start, stands by); a read_committed
// consumer sees every event exactly once.
func TestExactlyOnceZombieFenced(t *testing.T) {
	env := requireEnv(t)
	rng := testRand(t)
	s := newScenario(t, env, "eoszombie")
	s.readCommitted = true
	args := s.runArgs("--status-interval", "100ms", "--delivery", "exactly-once", "--txn-commit-interval", "2s",
		"--standby-retry-interval", "200ms")
	a := s.startArgsReady(args...)
	fw := newFaultWriter(t, s, env.pgDSN, newRandFrom(rng))
	burst, burstDone := make(chan int), make(chan *txnRec)
	o := faultSteady(t)
	o.burst, o.burstDone = burst, burstDone
	stop := fw.runSteady(o)
	time.Sleep(1500 * time.Millisecond)

	// The zombie must be paused inside an open Kafka transaction, so that it
	// has something to commit when it resumes. It commits as soon as the
	// stream is idle, so it is paused right after a burst of events, and the
	// broker must show its transactional id Ongoing; otherwise it is resumed
	// and the next burst tried.
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			_ = a.cmd.Process.Signal(syscall.SIGCONT)
		}
	})
	txnID := "walrelay-" + s.name
	for try := 0; ; try++ {
		if try == 20 {
			t.Fatalf("the zombie was never paused inside an open Kafka transaction in 20 tries:\n%s", a.tail(20))
		}
		burst <- 2000
		<-burstDone
		time.Sleep(time.Duration(try%5) * 15 * time.Millisecond)
		if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatalf("SIGSTOP: %v", err)
		}
		if state := txnState(t, env.kafka, txnID); state == "Ongoing" {
			t.Logf("paused inside an open Kafka transaction (try %d)", try+1)
			break
		}
		if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatalf("SIGCONT: %v", err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	pid := faultSlotPID(t, env.pgDSN, s.name)
	if pid == 0 {
		t.Fatal("the paused walrelay holds no walsender")
	}
	pgExec(t, env.pgDSN, "select pg_terminate_backend($1)", pid)
	t.Logf("paused walrelay %s, terminated its walsender (pid %d)", a.name, pid)

	b := s.startArgs(args...)
	b.waitReady(60 * time.Second)
	waitSlotStreaming(t, env.pgDSN, s.name, 60*time.Second, b)
	time.Sleep(2 * time.Second) // b commits transactions of its own

	resumed = true
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT: %v", err)
	}
	// The takeover's InitProducerId aborted the zombie's transaction and
	// bumped the epoch. The zombie usually learns it at once (its commit or
	// abort is refused: it exits with the fenced message). When its client
	// had no produce response of that transaction yet, franz-go ends it
	// without asking the broker and the zombie does not learn it: it then
	// finds the slot in use and stands by, producing nothing. Both are safe;
	// the verifier below requires duplicates=0 either way.
	if a.waitExit(30 * time.Second) {
		if a.exitCode() == 0 {
			t.Errorf("zombie exited with code 0, want non-zero")
		}
		if !strings.Contains(a.log(), "fenced by another instance") {
			t.Errorf("zombie's log has no fenced message:\n%s", a.tail(20))
		}
		t.Logf("zombie exited (%s): %s", a.exitStatus(), lastLine(a.tail(3)))
	} else {
		if n := strings.Count(a.log(), "standing by"); n == 0 {
			t.Fatalf("the resumed zombie neither exited within 30s nor stood by:\n%s", a.tail(30))
		}
		t.Logf("zombie did not learn it was fenced (no produce response of its transaction yet) and stands by: %s", lastLine(a.tail(3)))
	}

	res := faultFinish(t, s, fw, stop, b, "eos_zombie")
	if res.duplicates != 0 {
		t.Errorf("exactly-once: duplicates=%d after a fenced zombie, want 0", res.duplicates)
	}
	if b.exited() {
		t.Errorf("the instance that took over exited: %s", b.exitStatus())
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

var eosFlags = []string{"--delivery", "exactly-once"}

// TestExactlyOnceBrokerKill9 is TestFaultBrokerKill9 in exactly-once mode:
// also no duplicate for a read_committed consumer.
func TestExactlyOnceBrokerKill9(t *testing.T) {
	if res := faultBrokerKill9(t, "eosbkill", eosFlags); res.duplicates != 0 {
		t.Errorf("exactly-once: duplicates=%d after broker kills, want 0", res.duplicates)
	}
}

// TestExactlyOncePostgresRestart is TestFaultPostgresRestart in exactly-once
// mode: also no duplicate for a read_committed consumer.
func TestExactlyOncePostgresRestart(t *testing.T) {
	if res := faultPostgresRestart(t, "eospgrst", eosFlags); res.duplicates != 0 {
		t.Errorf("exactly-once: duplicates=%d after Postgres restarts, want 0", res.duplicates)
	}
}

// TestExactlyOnceStandbyTakeover is TestStandbyTakeover in exactly-once mode:
// the standby that takes the slot initialises the same transactional id,
// which fences the killed instance's producer and aborts its open
// transaction; a read_committed consumer sees no duplicate.
func TestExactlyOnceStandbyTakeover(t *testing.T) {
	if res := standbyTakeover(t, "eosha", eosFlags); res.duplicates != 0 {
		t.Errorf("exactly-once: duplicates=%d after standby takeovers, want 0", res.duplicates)
	}
}

// TestExactlyOnceSIGTERM: SIGTERM in exactly-once mode (3 times under the
// fault workload) exits 0 and, after each restart, a read_committed consumer
// sees no event twice and none missing.
func TestExactlyOnceSIGTERM(t *testing.T) {
	env := requireEnv(t)
	rng := testRand(t)
	s := newScenario(t, env, "eosterm")
	s.readCommitted = true
	args := s.runArgs(append([]string{"--status-interval", "100ms"}, eosFlags...)...)
	p := s.startArgsReady(args...)
	fw := newFaultWriter(t, s, env.pgDSN, newRandFrom(rng))
	stop := fw.runSteady(faultSteady(t))
	for i := 1; i <= 3; i++ {
		time.Sleep(time.Second + time.Duration(rng.Int64N(int64(time.Second))))
		p.sigterm()
		if !p.waitExit(40 * time.Second) {
			t.Fatalf("SIGTERM #%d: walrelay did not exit\n%s", i, p.tail(20))
		}
		if code := p.exitCode(); code != 0 {
			t.Fatalf("SIGTERM #%d: exit code %d, want 0\n%s", i, code, p.tail(20))
		}
		p = s.startArgsReady(args...)
	}
	res := faultFinish(t, s, fw, stop, p, "eos_sigterm", "sigterms=3")
	if res.duplicates != 0 {
		t.Errorf("exactly-once: duplicates=%d after SIGTERM restarts, want 0", res.duplicates)
	}
}

// txnState is the broker's state of the transactional id ("" when unknown).
func txnState(t *testing.T, brokers, txnID string) string {
	t.Helper()
	cl := newKafkaClient(t, brokers)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := kadm.NewClient(cl).DescribeTransactions(ctx, txnID)
	if err != nil {
		t.Fatalf("describe transactional id %s: %v", txnID, err)
	}
	tx, err := d.On(txnID, nil)
	if err != nil || tx.Err != nil {
		return ""
	}
	return tx.State
}
