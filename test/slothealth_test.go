package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walrelay/walrelay/internal/testwait"
)

// TestSlotHolderNamed: a session that wrote in a transaction and then sits idle in it,
// opened before a write burst, holds the slot back (catalog_xmin and restart_lsn stay
// at its transaction while walrelay relays and confirms the burst). The slot poll's
// walrelay_slot_holder_xact_age_seconds shows its age, walrelay logs a warning naming
// its pid once it is older than --slot-holder-alert-after, `walrelay status` names its
// pid, application and state on a held_back_by line, and `walrelay doctor` warns
// about it. After it commits, the metric falls back to 0 and status says nothing
// holds the slot.
func TestSlotHolderNamed(t *testing.T) {
	env := requireEnv(t)
	s := newScenario(t, env, "holder")
	p := s.startReady("--slot-metrics-interval", "300ms", "--slot-holder-alert-after", "2s")
	addr := p.metricsAddr()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	scratch := pgx.Identifier{"public", s.name + "_scratch"}.Sanitize()
	pgExec(t, env.pgDSN, "CREATE TABLE "+scratch+" (x int)")
	t.Cleanup(func() { pgExec(t, env.pgDSN, "DROP TABLE IF EXISTS "+scratch) })

	const app = "slot-holder-e2e"
	cfg, err := pgx.ParseConfig(env.pgDSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = app
	holder, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	var pid int
	if err := holder.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+scratch+" VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	opened := time.Now()

	// The write burst: walrelay relays and confirms it; the slot's catalog_xmin and
	// restart_lsn stay at the open transaction.
	for i := range 20 {
		pgExec(t, env.pgDSN, fmt.Sprintf(`INSERT INTO %s (aggregate_type, aggregate_id, event_type, payload)
			SELECT 'holder', g::text, 'burst', jsonb_build_object('n', g) FROM generate_series(%d, %d) g`, s.table, i*500, i*500+499))
	}
	burstEnd := currentLSN(t, env.pgDSN)
	waitSlotLSN(t, env.pgDSN, s.name, burstEnd, 60*time.Second, p)

	ageSeries := fmt.Sprintf("walrelay_slot_holder_xact_age_seconds{slot=%q}", s.name)
	var age float64
	testwait.Eventually(t, 30*time.Second, "walrelay_slot_holder_xact_age_seconds to show the idle transaction's age", func() bool {
		age, _ = metricValue(t, addr, ageSeries)
		return age >= 2
	})
	if lived := time.Since(opened).Seconds(); age > lived+1 {
		t.Errorf("%s = %.1f s, but the transaction is only %.1f s old", ageSeries, age, lived)
	}
	if v, ok := metricValue(t, addr, fmt.Sprintf("walrelay_slot_holder_alert_after_seconds{slot=%q}", s.name)); !ok || v != 2 {
		t.Errorf("walrelay_slot_holder_alert_after_seconds = %v (exposed %v), want 2", v, ok)
	}
	t.Logf("%s = %.1f s after a burst of 10000 events", ageSeries, age)

	pidRE := regexp.MustCompile(`pid ` + strconv.Itoa(pid) + `\b`)
	testwait.Eventually(t, 10*time.Second, "a warning naming the holder's pid in walrelay's log", func() bool {
		for _, l := range p.logLines() {
			if l["level"] == "WARN" && strings.Contains(fmt.Sprint(l["msg"]), "holds the replication slot back") && pidRE.MatchString(fmt.Sprint(l["holder"])) {
				return true
			}
		}
		return false
	})

	code, out := runCommand(t, time.Minute, "status", "--postgres-dsn", env.pgDSN, "--slot", s.name, "--table", s.table)
	if code != 0 {
		t.Fatalf("status: exit %d", code)
	}
	held := statusLines(out, "held_back_by")
	if len(held) == 0 || !pidRE.MatchString(held[0]) || !strings.Contains(held[0], strconv.Quote(app)) || !strings.Contains(held[0], "idle in transaction") {
		t.Errorf("status does not name pid %d, application %q, idle in transaction on its first held_back_by line:\n%s", pid, app, out)
	}

	code, out = runCommand(t, time.Minute, s.commonArgs("doctor")...)
	if !regexp.MustCompile(`(?m)^WARN slot-holder +pid ` + strconv.Itoa(pid) + `\b.*` + regexp.QuoteMeta(strconv.Quote(app))).MatchString(out) {
		t.Errorf("doctor (exit %d) has no WARN slot-holder line naming pid %d and %q:\n%s", code, pid, app, out)
	}

	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 30*time.Second, "walrelay_slot_holder_xact_age_seconds back to 0 after the commit", func() bool {
		v, _ := metricValue(t, addr, ageSeries)
		return v == 0
	})
	_, out = runCommand(t, time.Minute, "status", "--postgres-dsn", env.pgDSN, "--slot", s.name, "--table", s.table)
	if held := statusLines(out, "held_back_by"); len(held) != 1 || !strings.HasPrefix(held[0], "nothing") {
		t.Errorf("status after the commit: held_back_by %q, want nothing", held)
	}
}

// statusLines are the values of the lines of `walrelay status` output named key.
func statusLines(out, key string) []string {
	var vals []string
	for _, l := range strings.Split(out, "\n") {
		k, v, _ := strings.Cut(l, " ")
		if k == key {
			vals = append(vals, strings.TrimSpace(v))
		}
	}
	return vals
}

// TestSlotInvalidationTimeLeft: with max_slot_wal_keep_size set (a private cluster:
// ALTER SYSTEM must not touch the shared one) and a session holding the slot back while
// WAL is written, walrelay_slot_safe_wal_size_bytes falls below the limit,
// walrelay_slot_wal_time_left_seconds shows a finite time left, `walrelay status` prints
// a safe_wal_size line with the bytes and the time left at the current WAL rate, and
// `walrelay doctor` a slot-wal line. Once the session commits and the slot moves again,
// the time left goes back to -1 although WAL is still written.
func TestSlotInvalidationTimeLeft(t *testing.T) {
	env := requireEnv(t)
	penv, _ := startPrivateCluster(t, env)
	pgExec(t, penv.pgDSN, "ALTER SYSTEM SET max_slot_wal_keep_size = '512MB'")
	pgExec(t, penv.pgDSN, "SELECT pg_reload_conf()")
	s := newScenario(t, penv, "timeleft")
	p := s.startReady("--slot-metrics-interval", "300ms")
	addr := p.metricsAddr()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	scratch := pgx.Identifier{"public", s.name + "_scratch"}.Sanitize()
	pgExec(t, penv.pgDSN, "CREATE TABLE "+scratch+" (x int, pad text)")
	holder, err := pgx.Connect(ctx, penv.pgDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, "INSERT INTO "+scratch+" VALUES (0, '')"); err != nil {
		t.Fatal(err)
	}

	// WAL written steadily (about 150 kB per round, 1.5 MB/s) while the holder pins
	// restart_lsn: safe_wal_size must shrink for a minute before a time left is shown.
	wctx, stopWriting := context.WithCancel(ctx)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		pool := pgPool(t, penv.pgDSN)
		for wctx.Err() == nil {
			_ = pool.Exec(wctx, "INSERT INTO "+scratch+" SELECT g, repeat('x', 900) FROM generate_series(1, 150) g")
			select {
			case <-wctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	defer func() { stopWriting(); <-writerDone }()

	safeSeries := fmt.Sprintf("walrelay_slot_safe_wal_size_bytes{slot=%q}", s.name)
	leftSeries := fmt.Sprintf("walrelay_slot_wal_time_left_seconds{slot=%q}", s.name)
	var safe, left float64
	testwait.Eventually(t, 2*time.Minute, "walrelay_slot_wal_time_left_seconds to show a time left while WAL is written", func() bool {
		safe, _ = metricValue(t, addr, safeSeries)
		left, _ = metricValue(t, addr, leftSeries)
		return safe > 0 && safe < 512<<20 && left > 0
	})
	t.Logf("%s = %.0f, %s = %.1f s", safeSeries, safe, leftSeries, left)
	if left > 3600 {
		t.Errorf("%s = %.0f s: at about 1.5 MB/s, 512 MB last a few minutes", leftSeries, left)
	}

	code, out := runCommand(t, time.Minute, "status", "--postgres-dsn", penv.pgDSN, "--slot", s.name, "--table", s.table)
	if code != 0 {
		t.Fatalf("status: exit %d", code)
	}
	lineRE := regexp.MustCompile(`^\d+ bytes of WAL left before max_slot_wal_keep_size invalidates the slot: about (\S+) at the current WAL rate`)
	if lines := statusLines(out, "safe_wal_size"); len(lines) != 1 || !lineRE.MatchString(lines[0]) {
		t.Errorf("status has no safe_wal_size line with the time left:\n%s", out)
	}
	_, out = runCommand(t, time.Minute, s.commonArgs("doctor")...)
	if !regexp.MustCompile(`(?m)^(ok  |WARN) slot-wal +safe_wal_size: \d+ bytes of WAL left .* about \S+ at the current WAL rate`).MatchString(out) {
		t.Errorf("doctor has no slot-wal line with the time left:\n%s", out)
	}

	// Once the holder ends, the slot keeps up with the WAL still written: safe_wal_size
	// grows back and no time left is shown (the alert stays quiet on a slot that moves).
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 60*time.Second, "walrelay_slot_wal_time_left_seconds back to -1 once the slot moves again", func() bool {
		left, _ = metricValue(t, addr, leftSeries)
		return left == -1
	})
}

// TestSlotCreationNamesBlockers: creating the slot waits for a transaction that wrote
// and stays open. walrelay logs the blocker (pid, application) within a few seconds,
// gives up at --slot-create-timeout with one ERROR line naming it, and leaves no slot
// behind; once the transaction ends, walrelay creates the slot and streams.
func TestSlotCreationNamesBlockers(t *testing.T) {
	env := requireEnv(t)
	s := newScenario(t, env, "createwait")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	scratch := pgx.Identifier{"public", s.name + "_scratch"}.Sanitize()
	pgExec(t, env.pgDSN, "CREATE TABLE "+scratch+" (x int)")
	t.Cleanup(func() { pgExec(t, env.pgDSN, "DROP TABLE IF EXISTS "+scratch) })
	const app = "slot-create-blocker-e2e"
	cfg, err := pgx.ParseConfig(env.pgDSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = app
	blocker, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Close(context.Background())
	var pid int
	if err := blocker.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	tx, err := blocker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+scratch+" VALUES (1)"); err != nil {
		t.Fatal(err)
	}

	started := time.Now()
	p := s.start("--slot-create-timeout", "8s")
	names := regexp.MustCompile(`pid ` + strconv.Itoa(pid) + `\b.*` + regexp.QuoteMeta(strconv.Quote(app)))
	var loggedAfter time.Duration
	testwait.Eventually(t, 7*time.Second, "a WARN line naming the blocking pid and application while the slot creation waits", func() bool {
		for _, l := range p.logLines() {
			if l["level"] == "WARN" && strings.Contains(fmt.Sprint(l["msg"]), "creating the replication slot waits") && names.MatchString(fmt.Sprint(l["waiting_for"])) {
				loggedAfter = time.Since(started)
				return true
			}
		}
		return false
	})
	t.Logf("blocker named %s after the start", loggedAfter.Round(100*time.Millisecond))
	if !p.waitExit(30 * time.Second) {
		t.Fatalf("walrelay still runs 30 s after the start with --slot-create-timeout 8s\n%s", p.tail(20))
	}
	if p.exitCode() == 0 {
		t.Errorf("walrelay exited 0 after giving up on the slot")
	}
	var gaveUp []string
	for _, l := range p.logLines() {
		if l["level"] == "ERROR" {
			gaveUp = append(gaveUp, fmt.Sprint(l["error"]))
		}
	}
	t.Logf("ERROR lines: %q", gaveUp)
	if len(gaveUp) != 1 || !strings.Contains(gaveUp[0], "gave up after 8s") || !names.MatchString(gaveUp[0]) {
		t.Errorf("want one ERROR line that gives up after 8s naming pid %d and %q, got %q", pid, app, gaveUp)
	}
	if si, err := querySlot(ctx, t, env.pgDSN, s.name); err != nil || si.exists {
		t.Errorf("slot after the give-up: exists %v (%v), want none", si.exists, err)
	}

	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	s.startReady("--slot-create-timeout", "8s")
}

// TestFailoverSlotHealth: walrelay with --slot-failover and a multi-host DSN (primary
// and streaming standby). On Postgres 17+ walrelay_failover_slot_protected of the
// standby reaches 1 once its synced copy exists; with sync_replication_slots turned off
// on the standby it drops to 0 within one poll (walrelay_failover_protected_standbys 0,
// a WARN line naming the standby and the setting), and `walrelay doctor` FAILs the
// standby's sync_replication_slots. Before 17 walrelay refuses --slot-failover
// (TestSlotFailover), and doctor FAILs the standby for its version.
func TestFailoverSlotHealth(t *testing.T) {
	env := requireEnv(t)
	h := newHAPair(t, env)
	s := newScenario(t, h.primary, "fohealth")
	standby := fmt.Sprintf("127.0.0.1:%d", h.sbPort)
	if h.version < 170000 {
		_, out := runCommand(t, time.Minute, faultWithFlag(s.commonArgs("doctor", "--slot-failover"), "--postgres-dsn", h.multiDSN)...)
		if !regexp.MustCompile(`(?m)^FAIL standby ` + regexp.QuoteMeta(standby) + ` standby on Postgres \d+: failover slots need 17`).MatchString(out) {
			t.Errorf("doctor --slot-failover on Postgres %d does not FAIL for the version:\n%s", h.version, out)
		}
		return
	}
	const poll = 500 * time.Millisecond
	args := faultWithFlag(s.runArgs("--slot-failover", "--slot-metrics-interval", poll.String()), "--postgres-dsn", h.multiDSN)
	p := s.startArgsReady(args...)
	addr := p.metricsAddr()
	protected := fmt.Sprintf("walrelay_failover_slot_protected{slot=%q,standby=%q}", s.name, standby)
	lag := fmt.Sprintf("walrelay_failover_slot_lag_bytes{slot=%q,standby=%q}", s.name, standby)
	count := fmt.Sprintf("walrelay_failover_protected_standbys{slot=%q}", s.name)
	testwait.Eventually(t, time.Minute, "the standby's synced copy to protect the slot", func() bool {
		v, _ := metricValue(t, addr, protected)
		n, _ := metricValue(t, addr, count)
		return v == 1 && n == 1
	})
	l, _ := metricValue(t, addr, lag)
	t.Logf("Postgres %d: %s = 1, lag %.0f bytes", h.version, protected, l)
	if l < 0 {
		t.Errorf("%s = %v while the standby holds a synced copy, want >= 0", lag, l)
	}

	pgExec(t, h.standby.pgDSN, "ALTER SYSTEM SET sync_replication_slots = off")
	pgExec(t, h.standby.pgDSN, "SELECT pg_reload_conf()")
	off := time.Now()
	testwait.Eventually(t, 30*time.Second, "walrelay_failover_slot_protected to report the loss", func() bool {
		v, _ := metricValue(t, addr, protected)
		return v == 0
	})
	took := time.Since(off)
	t.Logf("loss reported %s after sync_replication_slots = off (poll %s)", took.Round(10*time.Millisecond), poll)
	if took > 3*poll+2*time.Second {
		t.Errorf("the loss took %s to show, more than one poll (%s) plus the reload", took, poll)
	}
	if n, _ := metricValue(t, addr, count); n != 0 {
		t.Errorf("%s = %v, want 0", count, n)
	}
	testwait.Eventually(t, 10*time.Second, "a WARN line naming the standby that no longer protects the slot", func() bool {
		for _, m := range p.logLines() {
			if m["level"] == "WARN" && m["standby"] == standby && strings.Contains(fmt.Sprint(m["problem"]), "sync_replication_slots is off") {
				return true
			}
		}
		return false
	})
	// With slot-failover the failover metrics that TestObservability cannot see (the
	// dashboard, the alerts and docs/operations.md name them) are exposed.
	_, families := obsExposedNames(t, p)
	for n := range obsOnlyWithFailover {
		if !families[n] {
			t.Errorf("%s not exposed with --slot-failover", n)
		}
	}

	code, out := runCommand(t, time.Minute, faultWithFlag(s.commonArgs("doctor", "--slot-failover"), "--postgres-dsn", h.multiDSN)...)
	if code == 0 || !regexp.MustCompile(`(?m)^FAIL standby `+regexp.QuoteMeta(standby)+` sync_replication_slots is off`).MatchString(out) {
		t.Errorf("doctor (exit %d) does not FAIL the standby's sync_replication_slots:\n%s", code, out)
	}
}

// TestStaleWalsenderNamed: an active walrelay frozen with SIGSTOP leaves its walsender
// holding the slot. A second instance standing by names it (pid, client, last reply,
// wal_sender_timeout) in its WARN line and in its /readyz answer, and `walrelay status`
// prints a walsender line that calls it stale once it has not replied for longer than a
// live walrelay ever stays silent.
func TestStaleWalsenderNamed(t *testing.T) {
	env := requireEnv(t)
	s := newScenario(t, env, "stalewal")
	args := s.runArgs("--status-interval", "100ms", "--standby-retry-interval", "1s")
	active := s.startArgsReady(args...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	si, err := querySlot(ctx, t, env.pgDSN, s.name)
	if err != nil || si.activePID == 0 {
		t.Fatalf("slot %s: active pid %d (%v)", s.name, si.activePID, err)
	}
	if err := syscall.Kill(active.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(active.cmd.Process.Pid, syscall.SIGCONT) })
	frozen := time.Now()

	standby := s.startArgs(args...)
	haWaitStandby(t, standby, s.name)
	names := regexp.MustCompile(`walsender pid ` + strconv.Itoa(si.activePID) + `\b.*client 127\.0\.0\.1.*last reply .*wal_sender_timeout \(`)
	testwait.Eventually(t, 10*time.Second, "the standby's WARN line naming the walsender that holds the slot", func() bool {
		for _, m := range standby.logLines() {
			if m["level"] == "WARN" && strings.Contains(fmt.Sprint(m["msg"]), "in use by another process") && names.MatchString(fmt.Sprint(m["error"])) {
				return true
			}
		}
		return false
	})
	resp, err := http.Get("http://" + standby.metricsAddr() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !names.Match(body) {
		t.Errorf("/readyz of the standby: %d %q, want 503 naming walsender pid %d", resp.StatusCode, body, si.activePID)
	}

	// A live walrelay replies at least every 10 s: past that, status calls it stale.
	testwait.Eventually(t, 30*time.Second, "the frozen walrelay's walsender to have no reply for over 10 s", func() bool {
		var age float64
		err := pgPool(t, env.pgDSN).scan(ctx, "SELECT extract(epoch FROM clock_timestamp() - reply_time)::float8 FROM pg_stat_replication WHERE pid = $1",
			[]any{si.activePID}, &age)
		return err == nil && age > 10.5
	})
	t.Logf("walsender pid %d silent for over 10 s, %s after the freeze", si.activePID, time.Since(frozen).Round(100*time.Millisecond))
	_, out := runCommand(t, time.Minute, "status", "--postgres-dsn", env.pgDSN, "--slot", s.name, "--table", s.table)
	lines := statusLines(out, "walsender")
	if len(lines) != 1 || !names.MatchString(lines[0]) || !strings.Contains(lines[0], "stale") {
		t.Errorf("status does not name the stale walsender pid %d:\n%s", si.activePID, out)
	}
}

// TestPreparedTransactionHolderNamed: a prepared transaction that wrote (PREPARE
// TRANSACTION, never committed) holds the slot back like an open session: `walrelay
// status` names its gid on a held_back_by line, walrelay_slot_holder_xact_age_seconds
// shows its age, and after COMMIT PREPARED both say nothing holds the slot. A private
// cluster: max_prepared_transactions needs a restart.
func TestPreparedTransactionHolderNamed(t *testing.T) {
	env := requireEnv(t)
	penv, pScript := startPrivateCluster(t, env)
	pgExec(t, penv.pgDSN, "ALTER SYSTEM SET max_prepared_transactions = 5")
	if err := runEnvScript(t, env, 2*time.Minute, pScript, "pg.sh", "restart-immediate"); err != nil {
		t.Fatal(err)
	}
	faultResetPool(t, penv.pgDSN) // its connections died with the restart
	s := newScenario(t, penv, "prepared")
	p := s.startReady("--slot-metrics-interval", "300ms")
	addr := p.metricsAddr()
	scratch := pgx.Identifier{"public", s.name + "_scratch"}.Sanitize()
	pgExec(t, penv.pgDSN, "CREATE TABLE "+scratch+" (x int)")
	gid := s.name + "_gid"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, penv.pgDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, q := range []string{"BEGIN", "INSERT INTO " + scratch + " VALUES (1)", "PREPARE TRANSACTION '" + gid + "'"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	committed := false
	t.Cleanup(func() {
		if !committed {
			pgExec(t, penv.pgDSN, "ROLLBACK PREPARED '"+gid+"'")
		}
	})

	ageSeries := fmt.Sprintf("walrelay_slot_holder_xact_age_seconds{slot=%q}", s.name)
	testwait.Eventually(t, 30*time.Second, "walrelay_slot_holder_xact_age_seconds to show the prepared transaction's age", func() bool {
		v, _ := metricValue(t, addr, ageSeries)
		return v >= 1
	})
	_, out := runCommand(t, time.Minute, "status", "--postgres-dsn", penv.pgDSN, "--slot", s.name, "--table", s.table)
	held := statusLines(out, "held_back_by")
	if len(held) != 1 || !strings.Contains(held[0], "prepared transaction "+strconv.Quote(gid)) || !strings.Contains(held[0], "COMMIT PREPARED") {
		t.Errorf("status does not name prepared transaction %q:\n%s", gid, out)
	}

	pgExec(t, penv.pgDSN, "COMMIT PREPARED '"+gid+"'")
	committed = true
	testwait.Eventually(t, 30*time.Second, "walrelay_slot_holder_xact_age_seconds back to 0 after COMMIT PREPARED", func() bool {
		v, _ := metricValue(t, addr, ageSeries)
		return v == 0
	})
}
