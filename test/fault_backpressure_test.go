package e2e

import (
	"fmt"
	"strconv"
	"testing"
	"time"
)

// TestFaultKafkaDownBackpressure: Kafka stays down (kafka.sh stop) far longer than the
// in-flight cap lasts: with --max-in-flight 2000 the workload keeps writing ~50,000 events
// (WALRELAY_FAULT_BACKLOG) while the broker is down. walrelay must stop reading WAL at the
// cap (backpressure), keep its memory bounded (VmRSS sampled every 200 ms stays under
// WALRELAY_FAULT_RSS_MB, default 100 MiB; measured ~35 MiB while down, ~48 MiB peak
// during the catch-up), keep the slot's confirmed_flush_lsn exactly
// where it was (the slot holds the WAL), and once the broker is back deliver everything.
func TestFaultKafkaDownBackpressure(t *testing.T) {
	env := requireEnv(t)
	rng := testRand(t)
	s := newScenario(t, env, "fbp")
	broker := newFaultBroker(t, env)
	const maxInFlight = 2000
	p := s.startArgsReady(s.runArgs("--max-in-flight", strconv.Itoa(maxInFlight))...)
	rss := startFaultRSS(t, p.cmd.Process.Pid, 200*time.Millisecond)
	boundMiB := float64(faultEnvInt(t, "WALRELAY_FAULT_RSS_MB", 100))
	backlog := faultEnvInt(t, "WALRELAY_FAULT_BACKLOG", faultCount(50000))

	fw := newFaultWriter(t, s, env.pgDSN, newRandFrom(rng))
	o := faultSteady(t)
	o.rate = float64(faultEnvInt(t, "WALRELAY_FAULT_BACKLOG_RATE", 100))
	stop := fw.runSteady(o)
	time.Sleep(3 * time.Second)
	warmRSS, _, _ := rss.peak()

	took := broker.stop()
	deadAt := time.Now()
	time.Sleep(2 * time.Second) // acknowledgements from before the stop settle
	l0 := slotLSN(t, env.pgDSN, s.name)
	base := fw.eventCount()
	t.Logf("broker stopped in %s; slot at %s; writing %d events while it is down", took.Round(10*time.Millisecond), l0, backlog)

	var moved []string
	maxInFlightSeen := 0.0
	start := time.Now()
	for fw.eventCount()-base < backlog {
		if p.exited() {
			t.Fatalf("walrelay exited (%s) while the broker was down; it must wait\n%s", p.exitStatus(), p.tail(40))
		}
		if c := slotLSN(t, env.pgDSN, s.name); c != l0 && len(moved) < 10 {
			moved = append(moved, fmt.Sprintf("%s at +%s", c, time.Since(start).Round(time.Millisecond)))
		}
		if m, err := p.metrics(); err == nil {
			maxInFlightSeen = max(maxInFlightSeen, m["walrelay_in_flight_records"])
		}
		if time.Since(start) > 5*time.Minute {
			t.Fatalf("the workload wrote only %d of %d events in 5 minutes", fw.eventCount()-base, backlog)
		}
		time.Sleep(200 * time.Millisecond)
	}
	written := fw.eventCount() - base
	retained := currentLSN(t, env.pgDSN) - l0
	downRSS, _, _ := rss.peak()
	if len(moved) > 0 {
		t.Errorf("confirmed_flush_lsn moved from %s while the broker was down: %v", l0, moved)
	}
	faultNothingConfirmedSince(t, s, fw, p, deadAt, "kafka_down")
	if maxInFlightSeen > maxInFlight {
		t.Errorf("walrelay_in_flight_records reached %.0f, above --max-in-flight %d", maxInFlightSeen, maxInFlight)
	}
	metrics := ""
	if m, err := p.metrics(); err == nil {
		metrics = fmt.Sprintf("in_flight=%.0f lag_bytes=%.0f", m["walrelay_in_flight_records"], m["walrelay_lag_bytes"])
	}
	t.Logf("broker down %s: %d events written, slot stayed at %s, WAL retained %.1f MiB, peak in-flight %.0f, %s",
		time.Since(deadAt).Round(100*time.Millisecond), written, l0, float64(retained)/(1<<20), maxInFlightSeen, metrics)

	broker.start()
	up := time.Now()
	time.Sleep(2 * time.Second)
	faultFinish(t, s, fw, stop, p, "fault_kafka_down_backpressure",
		fmt.Sprintf("backlog_events=%d", written), fmt.Sprintf("wal_retained_mib=%.1f", float64(retained)/(1<<20)),
		fmt.Sprintf("slot_moved_while_down=%v", len(moved) > 0), fmt.Sprintf("catch_up_and_verify=%s", time.Since(up).Round(100*time.Millisecond)))
	rss.stop()
	peak, hwm, samples := rss.peak()
	line := fmt.Sprintf("fault_kafka_down_backpressure memory: rss_warm=%.1fMiB rss_peak_broker_down=%.1fMiB rss_peak=%.1fMiB vmhwm=%.1fMiB samples=%d bound=%.0fMiB max_in_flight=%d",
		warmRSS, downRSS, peak, hwm, samples, boundMiB, maxInFlight)
	t.Log(line)
	if peak > boundMiB || hwm > boundMiB {
		t.Errorf("walrelay's memory exceeded the bound: %s", line)
	}
}
