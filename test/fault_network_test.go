package e2e

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestFaultNetwork puts network faults between walrelay and its peers while the workload
// runs, all against one walrelay process that must never be restarted, and then checks
// that nothing was lost. Phases, in order, and the fault each exercises:
//
//   - pg_drop: the TCP proxy between walrelay and Postgres resets every connection and
//     refuses new ones for a few seconds (network cut / server unreachable). walrelay's
//     replication stream and heartbeat connections fail at once; it must reconnect with
//     backoff after the cut ends.
//   - pg_slow: the proxy throttles every connection to 16 KiB/s per direction (a
//     saturated link). Streaming slows down; nothing may break; it catches up after.
//   - pg_stall_resume: the proxy forwards nothing, in either direction, for a few seconds
//     (a stalled path; writes succeed into buffers, nothing arrives, nothing fails), then
//     resumes the same connections. walrelay may keep the connection or reconnect.
//   - pg_half_open: every open connection becomes a hostage: kept open, never forwarding
//     again, while new connections work (the old path died silently: a NAT or firewall
//     dropped its state, or the peer host vanished). Postgres ends its walsender after
//     wal_sender_timeout (set to 15 s on walrelay's connection through the DSN, so the
//     slot frees in CI time); walrelay never hears about it and must notice the silent
//     connection by itself, reconnect and resume. Bounded by WALRELAY_FAULT_HALFOPEN_WAIT
//     seconds (default 60); if walrelay has not recovered by then the test fails, resets
//     the hostages (walrelay then sees an error) and goes on to check for loss.
//   - kafka_outage: the broker is shut down (kafka.sh stop) and started again: connection
//     refused for every request meanwhile; nothing written meanwhile may be confirmed.
//   - kafka_stall: the broker process is frozen with SIGSTOP and continued with SIGCONT:
//     its sockets stay open and accept, nothing answers (half-open from the client's
//     view: franz-go's request timeouts must fire and retry); nothing written meanwhile
//     may be confirmed.
//
// Kafka is not proxied: a broker advertises its own address, so after the first metadata
// response a client would bypass a proxy; the shared broker cannot advertise the proxy.
func TestFaultNetwork(t *testing.T) {
	env := requireEnv(t)
	rng := testRand(t)
	s := newScenario(t, env, "fnet")
	broker := newFaultBroker(t, env)

	u, err := url.Parse(env.pgDSN)
	if err != nil || u.Host == "" {
		t.Fatalf("WALRELAY_TEST_PG_DSN %q: need a postgres:// URL with host:port (%v)", env.pgDSN, err)
	}
	proxy := newTCPProxy(t, "postgres", u.Host)
	pu := *u
	pu.Host = proxy.addr()
	// %20, not '+': libpq-style URL parsing does not decode '+' to a space.
	pu.RawQuery = strings.TrimPrefix(pu.RawQuery+"&options=-c%20wal_sender_timeout%3D15s", "&")
	args := faultWithFlag(s.runArgs("--status-interval", "200ms"), "--postgres-dsn", pu.String())
	p := s.startArgsReady(args...)

	fw := newFaultWriter(t, s, env.pgDSN, newRandFrom(rng))
	stop := fw.runSteady(faultSteady(t))

	var phases []string
	// recovered waits until walrelay confirmed what the writer committed by now and
	// returns how long that took since from.
	recovered := func(name string, from time.Time, bound time.Duration) time.Duration {
		t.Helper()
		target := fw.lastPostLSN()
		waitSlotLSN(t, env.pgDSN, s.name, target, bound, p)
		d := time.Since(from).Round(10 * time.Millisecond)
		acc, open := proxy.counts()
		t.Logf("phase=%s recovered_in=%s proxy_conns_accepted=%d open=%d reconnect_logs=%d",
			name, d, acc, open, faultLogCount(p, "replication stream lost"))
		phases = append(phases, fmt.Sprintf("%s:%s", name, d))
		return d
	}
	pause := func() { time.Sleep(2*time.Second + time.Duration(rng.Int64N(int64(time.Second)))) }

	// pg_drop
	pause()
	acc0, _ := proxy.counts()
	proxy.setMode(proxyDrop, 0)
	time.Sleep(faultDur(3 * time.Second))
	proxy.setMode(proxyPass, 0)
	recovered("pg_drop", time.Now(), time.Minute)
	if acc, _ := proxy.counts(); acc == acc0 {
		t.Errorf("pg_drop: walrelay opened no new connection after the cut")
	}

	// pg_slow
	pause()
	before := slotLSN(t, env.pgDSN, s.name)
	proxy.setMode(proxySlow, 16<<10)
	time.Sleep(faultDur(6 * time.Second))
	during := slotLSN(t, env.pgDSN, s.name)
	proxy.setMode(proxyPass, 0)
	t.Logf("pg_slow: slot moved %d bytes of WAL during the throttle", during-before)
	recovered("pg_slow", time.Now(), time.Minute)

	// pg_stall_resume
	pause()
	proxy.setMode(proxyStall, 0)
	time.Sleep(faultDur(5 * time.Second))
	proxy.setMode(proxyPass, 0)
	recovered("pg_stall_resume", time.Now(), time.Minute)

	// pg_half_open
	pause()
	oldPID := faultSlotPID(t, env.pgDSN, s.name)
	proxy.holdExisting()
	held := time.Now()
	wait := time.Duration(faultEnvInt(t, "WALRELAY_FAULT_HALFOPEN_WAIT", 60)) * time.Second
	var serverGone time.Duration
	detected := false
	for time.Since(held) < wait {
		if p.exited() {
			t.Fatalf("walrelay exited (%s) during the half-open phase\n%s", p.exitStatus(), p.tail(40))
		}
		pid := faultSlotPID(t, env.pgDSN, s.name)
		if pid != oldPID && serverGone == 0 {
			serverGone = time.Since(held).Round(100 * time.Millisecond)
			t.Logf("pg_half_open: Postgres ended walsender %d after %s (active_pid now %d)", oldPID, serverGone, pid)
		}
		if pid != 0 && pid != oldPID {
			detected = true
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if detected {
		t.Logf("pg_half_open: walrelay streams on a new connection %s after its old one went silent",
			time.Since(held).Round(100*time.Millisecond))
		recovered("pg_half_open", held, time.Minute)
	} else {
		t.Errorf("pg_half_open: walrelay did not notice within %s that its replication connection went silent "+
			"(Postgres ended its walsender after %s; walrelay kept waiting on the dead connection, slot stuck at %s, "+
			"reconnect log lines: %d). A half-open connection must be detected (e.g. no server message for longer than "+
			"a keepalive round trip) and replaced.", wait, serverGone, slotLSN(t, env.pgDSN, s.name), faultLogCount(p, "replication stream lost"))
		n := proxy.releaseHostages()
		t.Logf("pg_half_open: reset %d hostage connections so the rest of the test can check for loss", n)
		recovered("pg_half_open(after reset)", time.Now(), time.Minute)
	}

	// kafka_outage
	pause()
	broker.stop()
	deadAt := time.Now()
	time.Sleep(faultDur(4 * time.Second))
	faultNothingConfirmedSince(t, s, fw, p, deadAt, "kafka_outage")
	broker.start()
	recovered("kafka_outage", time.Now(), 2*time.Minute)

	// kafka_stall
	pause()
	broker.pause()
	pausedAt := time.Now()
	time.Sleep(faultDur(12 * time.Second))
	faultNothingConfirmedSince(t, s, fw, p, pausedAt, "kafka_stall")
	broker.resume()
	recovered("kafka_stall", time.Now(), 2*time.Minute)

	if p.exited() {
		t.Fatalf("walrelay exited (%s)\n%s", p.exitStatus(), p.tail(40))
	}
	faultFinish(t, s, fw, stop, p, "fault_network", "phases="+strings.Join(phases, ","),
		fmt.Sprintf("walrelay_reconnect_logs=%d", faultLogCount(p, "replication stream lost")),
		fmt.Sprintf("walrelay_restarts=%d", s.runs-1))
}

// faultNothingConfirmedSince asserts that no transaction the writer began after since (a
// moment from which Kafka could not acknowledge anything) is confirmed, and that
// walrelay is still running.
func faultNothingConfirmedSince(t *testing.T, s *scenario, fw *faultWriter, p *walrelayProc, since time.Time, phase string) {
	t.Helper()
	if p.exited() {
		t.Fatalf("%s: walrelay exited (%s) while Kafka was unavailable; it must retry\n%s", phase, p.exitStatus(), p.tail(40))
	}
	first := fw.firstCommittedAfter(since)
	confirmed := slotLSN(t, fw.dsn, s.name)
	if first == nil {
		t.Logf("%s: no transaction committed since the fault began (slot at %s)", phase, confirmed)
		return
	}
	if confirmed > first.PreCommit {
		t.Errorf("%s: confirmed_flush_lsn %s is past %s, before the commit of txn %d written while Kafka was unavailable",
			phase, confirmed, first.PreCommit, first.Index)
		return
	}
	t.Logf("%s: slot at %s, before txn %d (commit after %s) written during the fault", phase, confirmed, first.Index, first.PreCommit)
}
