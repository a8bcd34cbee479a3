package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walrelay/walrelay/internal/testwait"
)

// TestSIGTERMDuringBackoffDrainsAndConfirms: SIGTERM while walrelay waits to reconnect to
// Postgres still drains and confirms. Kafka is paused (SIGSTOP) so that the records of a
// few transactions are in flight; Postgres is then stopped (immediate), so the session
// ends and walrelay sits in its reconnect backoff. Kafka resumes and acknowledges the
// records, which nothing can confirm to the slot while Postgres is down.
//
//  1. SIGTERM, then Postgres comes back within --shutdown-timeout: walrelay must confirm
//     the final position over one short connection and exit 0. The slot's
//     confirmed_flush_lsn must equal the end LSN of the last acknowledged transaction
//     (from an observer slot), not stay behind it.
//  2. The same, but Postgres stays down: walrelay exits 0 within --shutdown-timeout and
//     says in one WARN line which position was not confirmed; the slot stays behind it
//     (the transactions are sent again: at-least-once).
func TestSIGTERMDuringBackoffDrainsAndConfirms(t *testing.T) {
	env := requireEnv(t)
	penv, pgScript := startPrivateCluster(t, env)
	s := newScenario(t, penv, "termbo")
	broker := newFaultBroker(t, env)
	pgDown := false
	startPG := func() {
		t.Helper()
		if err := runEnvScript(t, env, 2*time.Minute, pgScript, "pg.sh", "start"); err != nil {
			t.Fatal(err)
		}
		faultResetPool(t, penv.pgDSN)
		pgDown = false
	}
	t.Cleanup(func() { // before the scenario's cleanup, which needs Postgres
		if pgDown {
			startPG()
		}
	})
	obs := s.name + "_obs"
	pgExec(t, penv.pgDSN, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", obs)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := dropSlot(ctx, t, penv.pgDSN, obs); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	events := 0
	insertTxns := func(n, per int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, penv.pgDSN)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		for i := 0; i < n; i++ {
			err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				for j := 0; j < per; j++ {
					if _, err := tx.Exec(ctx, "INSERT INTO "+s.table+" (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', $1, 'Created', '{}')",
						fmt.Sprintf("o-%d", events)); err != nil {
						return err
					}
					events++
				}
				return nil
			})
			if err != nil {
				t.Fatalf("write transaction: %v", err)
			}
		}
	}
	metric := func(p *walrelayProc, name string) float64 {
		m, err := p.metrics()
		if err != nil {
			return -1
		}
		return m[name]
	}
	// inFlightThenPostgresDown leaves p in its reconnect backoff with the records of n
	// transactions acknowledged by Kafka and not confirmed to the slot. It returns the
	// end LSN of the last of them and the slot's position before the outage.
	inFlightThenPostgresDown := func(p *walrelayProc, n int) (lastEnd, slotBefore lsn) {
		t.Helper()
		insertTxns(1, 1) // the topic exists and the slot is past everything older
		waitSlotLSN(t, penv.pgDSN, s.name, currentLSN(t, penv.pgDSN), 60*time.Second, p)
		acked := metric(p, "walrelay_events_acked_total")
		broker.pause()
		insertTxns(n, 3)
		target := currentLSN(t, penv.pgDSN)
		testwait.Eventually(t, 30*time.Second, "the walsender to send the transactions", func() bool {
			var sent *string
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = pgPool(t, penv.pgDSN).scan(ctx, `SELECT r.sent_lsn::text FROM pg_stat_replication r JOIN pg_replication_slots s ON s.active_pid = r.pid WHERE s.slot_name = $1`,
				[]any{s.name}, &sent)
			l, err := lsn(0), error(nil)
			if sent != nil {
				l, err = parseLSN(*sent)
			}
			return err == nil && l >= target
		})
		time.Sleep(500 * time.Millisecond) // decoded and handed to the producer
		if in := metric(p, "walrelay_in_flight_records"); in < 1 {
			t.Fatalf("walrelay_in_flight_records = %v while Kafka is paused, want records in flight", in)
		}
		slotBefore = slotLSN(t, penv.pgDSN, s.name)
		ends := slices.Sorted(maps.Values(faultCommitEnds(t, penv.pgDSN, obs, s.name)))
		lastEnd = ends[len(ends)-1]
		if slotBefore >= lastEnd {
			t.Fatalf("slot at %s already confirms the unacknowledged transactions ending at %s", slotBefore, lastEnd)
		}
		lost := faultLogCount(p, "replication stream lost")
		pgDown = true
		if err := runEnvScript(t, env, 2*time.Minute, pgScript, "pg.sh", "kill"); err != nil {
			t.Fatal(err)
		}
		faultResetPool(t, penv.pgDSN)
		testwait.Eventually(t, 30*time.Second, "walrelay to lose its session", func() bool { return faultLogCount(p, "replication stream lost") > lost })
		broker.resume()
		want := acked + float64(3*n)
		testwait.Eventually(t, 90*time.Second, fmt.Sprintf("Kafka to acknowledge the records (walrelay_events_acked_total %v)", want), func() bool {
			return metric(p, "walrelay_events_acked_total") >= want && metric(p, "walrelay_in_flight_records") == 0
		})
		if p.exited() {
			t.Fatalf("walrelay exited (%s) while Postgres was down; it must wait to reconnect\n%s", p.exitStatus(), p.tail(30))
		}
		return lastEnd, slotBefore
	}
	finalLog := func(p *walrelayProc, msg string) map[string]any {
		for _, m := range p.logLines() {
			if strings.HasPrefix(fmt.Sprint(m["msg"]), msg) {
				return m
			}
		}
		return nil
	}

	// 1. Postgres back within the shutdown timeout.
	const timeout1 = 60 * time.Second
	p := s.startReady("--heartbeat-interval", "0", "--status-interval", "200ms", "--shutdown-timeout", timeout1.String())
	lastEnd, before := inFlightThenPostgresDown(p, 4)
	p.sigterm()
	termAt := time.Now()
	time.Sleep(time.Second) // in the backoff, Postgres still down
	if p.exited() {
		t.Logf("walrelay exited %s after SIGTERM, before Postgres was back", time.Since(termAt).Round(time.Millisecond))
	}
	startPG()
	if !p.waitExit(timeout1 + 15*time.Second) {
		t.Fatalf("walrelay did not exit within %s of SIGTERM\n%s", timeout1+15*time.Second, p.tail(30))
	}
	took := time.Since(termAt).Round(time.Millisecond)
	if code := p.exitCode(); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0\n%s", code, p.tail(20))
	}
	confirmed := slotLSN(t, penv.pgDSN, s.name)
	t.Logf("phase 1: slot before the outage %s, last acknowledged transaction ends at %s, slot after SIGTERM %s (exit %d after %s)",
		before, lastEnd, confirmed, p.exitCode(), took)
	if confirmed != lastEnd {
		t.Errorf("slot confirmed_flush_lsn %s after SIGTERM in the backoff, want %s, the end of the last transaction Kafka acknowledged", confirmed, lastEnd)
	}
	if m := finalLog(p, "final position confirmed"); m == nil || m["lsn"] != lastEnd.String() {
		t.Errorf("no \"final position confirmed\" log line with lsn %s (got %v)", lastEnd, m)
	}

	// 2. Postgres stays down: exit 0 within the timeout, saying what was not confirmed.
	const timeout2 = 4 * time.Second
	p2 := s.startReady("--heartbeat-interval", "0", "--status-interval", "200ms", "--shutdown-timeout", timeout2.String())
	lastEnd2, before2 := inFlightThenPostgresDown(p2, 2)
	p2.sigterm()
	termAt = time.Now()
	if !p2.waitExit(timeout2 + 15*time.Second) {
		t.Fatalf("walrelay did not exit within %s of SIGTERM with Postgres down\n%s", timeout2+15*time.Second, p2.tail(30))
	}
	took2 := time.Since(termAt).Round(time.Millisecond)
	if code := p2.exitCode(); code != 0 {
		t.Errorf("exit code %d after SIGTERM with Postgres down, want 0\n%s", code, p2.tail(20))
	}
	m := finalLog(p2, "shutdown: final position not confirmed")
	if m == nil || m["level"] != "WARN" || m["lsn"] != lastEnd2.String() {
		t.Errorf("no WARN line saying that %s was not confirmed (got %v)\n%s", lastEnd2, m, p2.tail(20))
	}
	startPG()
	confirmed2 := slotLSN(t, penv.pgDSN, s.name)
	if confirmed2 >= lastEnd2 {
		t.Errorf("slot at %s, at or past %s, although Postgres was down until walrelay exited", confirmed2, lastEnd2)
	}
	t.Logf("phase 2: slot before the outage %s, last acknowledged transaction ends at %s, not confirmed; slot %s; exit %d after %s",
		before2, lastEnd2, confirmed2, p2.exitCode(), took2)
	t.Logf("scenario=sigterm_in_backoff confirmed=%s last_acked_end=%s exit=%d took=%s pg_down_exit=%d pg_down_took=%s",
		confirmed, lastEnd, p.exitCode(), took, p2.exitCode(), took2)
}
