package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/walrelay/walrelay/internal/testwait"
)

// A restart after a lost slot, against the real Postgres and Kafka: the
// slot walrelay streamed from is dropped while walrelay is down and writes
// go on. A plain `walrelay run` must not create a new slot past the gap: it
// stops with one line naming the recovery command, in both delivery modes.
// With on-slot-lost recover it performs that recovery itself, and every
// committed event reaches Kafka.

// lostSlotWhileDown runs walrelay in mode, writes, stops it (kill -9), drops
// its slot and writes more: the events of the gap are only in the outbox
// table. It returns the run's arguments, the workload still writing (stop
// ends it) and the events committed by the loss.
func lostSlotWhileDown(t *testing.T, s *scenario, mode string, extra ...string) (args []string, fw *faultWriter, stop func() error, atLoss int) {
	t.Helper()
	s.readCommitted = mode == "exactly-once"
	args = s.runArgs(append([]string{"--delivery", mode, "--status-interval", "100ms"}, extra...)...)
	p := s.startArgsReady(args...)
	fw = newFaultWriter(t, s, s.env.pgDSN, newRandFrom(testRand(t)))
	fw.deletePct = 0 // a recovery re-publishes kept rows; a row deleted in its transaction is lost with the slot
	stop = fw.runSteady(faultSteady(t))
	testwait.Eventually(t, time.Minute, "events committed before the loss", func() bool {
		_, _, n, _ := fw.stats()
		return n >= 200
	})
	waitSlotLSN(t, s.env.pgDSN, s.name, currentLSN(t, s.env.pgDSN), time.Minute, p)
	p.kill9()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := dropSlot(ctx, t, s.env.pgDSN, s.name); err != nil {
		t.Fatal(err)
	}
	// Writes go on without a slot: only the outbox table keeps them.
	_, _, before, _ := fw.stats()
	testwait.Eventually(t, time.Minute, "events committed while no slot exists", func() bool {
		_, _, n, _ := fw.stats()
		return n >= before+20
	})
	_, _, atLoss, _ = fw.stats()
	return args, fw, stop, atLoss
}

// TestRunRefusesLostSlot: `walrelay run` after its slot was dropped while
// it was down stops (exit 1) naming the recovery command, and creates no
// slot, in both delivery modes.
func TestRunRefusesLostSlot(t *testing.T) {
	for _, mode := range []string{"at-least-once", "exactly-once"} {
		t.Run(mode, func(t *testing.T) {
			env := requireEnv(t)
			s := newScenario(t, env, "lostrun")
			args, _, stop, _ := lostSlotWhileDown(t, s, mode)
			defer func() { _ = stop() }()
			p := s.startArgs(args...)
			if !p.waitExit(time.Minute) {
				slot := querySlotExists(t, env.pgDSN, s.name)
				p.kill9()
				t.Fatalf("walrelay run after the loss kept running (slot created: %v), want exit 1 naming the recovery:\n%s", slot, p.tail(8))
			}
			want := "walrelay replay --since-last-delivered --slot=" + s.name
			if p.exitCode() != 1 || !strings.Contains(p.log(), want) || querySlotExists(t, env.pgDSN, s.name) {
				t.Fatalf("walrelay run after the loss: %s, want exit 1, the slot not created, and the recovery command %q:\n%s", p.exitStatus(), want, p.tail(8))
			}
			for _, m := range p.logLines() {
				if m["level"] == "ERROR" {
					t.Logf("refusal (%s): %v: %v %v", mode, m["msg"], m["error"], m["command"])
				}
			}
			if !strings.Contains(p.log(), "walrelay's mark") && !strings.Contains(p.log(), "exactly-once checkpoint") {
				t.Errorf("the refusal does not say what shows the loss (walrelay's mark):\n%s", p.tail(8))
			}
		})
	}
}

// TestRunRecoversLostSlot: with on-slot-lost recover, `walrelay run` after
// its slot was dropped while it was down replays since the last delivered
// event, creates the new slot and streams from it: every committed event
// reaches Kafka, the recovery is logged as an ERROR and counted in
// walrelay_slot_recoveries_total.
func TestRunRecoversLostSlot(t *testing.T) {
	for _, mode := range []string{"at-least-once", "exactly-once"} {
		t.Run(mode, func(t *testing.T) {
			env := requireEnv(t)
			s := newScenario(t, env, "lostrec")
			args, fw, stop, atLoss := lostSlotWhileDown(t, s, mode, "--on-slot-lost", "recover")
			p := s.startArgs(args...)
			testwait.Eventually(t, 3*time.Minute, "walrelay to recover and stream from the new slot", func() bool {
				if p.exited() {
					t.Fatalf("walrelay run with on-slot-lost recover exited: %s\n%s", p.exitStatus(), p.tail(12))
				}
				for _, m := range p.logLines() {
					if m["msg"] == "streaming" {
						return true
					}
				}
				return false
			})
			time.Sleep(time.Second) // writes after the hand-over to the new slot
			if err := stop(); err != nil {
				t.Fatalf("workload: %v", err)
			}
			waitSlotLSN(t, env.pgDSN, s.name, currentLSN(t, env.pgDSN), 3*time.Minute, p)
			res := recoveryVerify(t, s, fw)
			t.Logf("on-slot-lost recover (%s): %d events committed (%d by the loss); %s", mode, res.committed, atLoss, res.summary("lostrec_"+mode))
			if res.lost != 0 || res.rolledBackDelivered != 0 || res.unknown != 0 {
				t.Fatalf("on-slot-lost recover: lost=%d rolled_back_delivered=%d unknown=%d", res.lost, res.rolledBackDelivered, res.unknown)
			}
			if res.committed <= atLoss {
				t.Fatal("no event was written after the recovery: the hand-over to the new slot was not exercised")
			}
			loud := false
			addr := ""
			for _, m := range p.logLines() {
				if m["level"] == "ERROR" && strings.HasPrefix(m["msg"].(string), "replication slot lost: recovering by itself") {
					loud = true
				}
				if m["msg"] == "metrics listening" {
					addr, _ = m["addr"].(string) // the last: the Run after the recovery
				}
			}
			if !loud {
				t.Error("the recovery was not logged as an ERROR")
			}
			if v, ok := metricValue(t, addr, "walrelay_slot_recoveries_total"); !ok || v != 1 {
				t.Errorf("walrelay_slot_recoveries_total = %v (exposed %v), want 1", v, ok)
			}
			p.sigterm()
			if !p.waitExit(30*time.Second) || p.exitCode() != 0 {
				t.Errorf("walrelay after SIGTERM: %s", p.exitStatus())
			}
		})
	}
}
