package e2e

import (
	"context"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walrelay/walrelay/internal/testwait"
)

// TestFailoverToOtherWALHistory: walrelay streams from Postgres A through a TCP proxy (a
// stable address: virtual IP, DNS, pooler); the proxy is switched to Postgres B, another
// cluster (other system identifier) prepared like a failover target whose slot lags: the
// same outbox table and publication, a slot of the same name created at a position far
// BEHIND where walrelay had confirmed on A, and events committed on B after it.
//
// walrelay reconnects by itself and lands on B. The positions it tracked on A mean
// nothing on B: had it reported its watermark from A to B, B's slot would be confirmed
// past B's events before Kafka acknowledged them, and the next restart would skip them
// (silent loss). The test pauses Kafka before the switch, so nothing from B can be
// acknowledged, and checks that B's slot never moves past its first unacknowledged
// transaction; then it kills walrelay (the records in flight die with it), resumes Kafka,
// starts walrelay again and requires every event committed on B after B's slot position
// to arrive, in order per aggregate, and the WARN line naming both system identifiers.
func TestFailoverToOtherWALHistory(t *testing.T) {
	env := requireEnv(t)
	rng := testRand(t)
	s := newScenario(t, env, "failover")
	benv, _ := startPrivateCluster(t, env)
	s.migrate(benv.pgDSN, s.table)
	pgExec(t, benv.pgDSN, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert', publish_via_partition_root = true)",
		pgx.Identifier{s.name}.Sanitize(), pgx.Identifier(strings.Split(s.table, ".")).Sanitize()))
	broker := newFaultBroker(t, env)

	au, err := url.Parse(env.pgDSN)
	if err != nil || au.Host == "" {
		t.Fatalf("WALRELAY_TEST_PG_DSN %q: need a postgres:// URL with host:port (%v)", env.pgDSN, err)
	}
	proxy := newTCPProxy(t, "postgres", au.Host)
	pu := *au
	pu.Host = proxy.addr()
	args := faultWithFlag(s.runArgs("--status-interval", "200ms", "--heartbeat-interval", "1s"), "--postgres-dsn", pu.String())
	p := s.startArgsReady(args...)

	idA, idB := walHistory(t, env.pgDSN), walHistory(t, benv.pgDSN)
	sysA, sysB := idA[0], idB[0]
	if sysA == sysB {
		t.Fatalf("clusters A and B have the same system identifier %s", sysA)
	}

	// A: events walrelay relays and confirms.
	wA := newWorkload(t, env, s.table, 30, newRandFrom(rng))
	for i := range 5 {
		wA.mustWriteTxn(1+rng.IntN(10), i == 2)
	}

	// B: the slot, far behind, then events after it.
	var slotB string
	if err := pgPool(t, benv.pgDSN).scan(context.Background(), "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')",
		[]any{s.name}, &slotB); err != nil {
		t.Fatalf("create slot on B: %v", err)
	}
	wB := newWorkload(t, benv, s.table, 30, newRandFrom(rng))
	for i := range wB.aggs {
		wB.aggs[i].id = "b-" + wB.aggs[i].id // B's aggregates are its own: order is checked per aggregate
	}
	var firstB *txnRec
	for i := range 5 {
		tx := wB.mustWriteTxn(1+rng.IntN(10), i == 1)
		if firstB == nil && tx.Committed {
			firstB = tx
		}
	}

	// A's WAL well past B's, and walrelay confirmed there: the old watermark is a
	// position B never sent.
	bEnd := currentLSN(t, benv.pgDSN)
	fill := pgx.Identifier{"public", s.name + "_fill"}.Sanitize()
	pgExec(t, env.pgDSN, "CREATE TABLE "+fill+" (x int)")
	t.Cleanup(func() { pgExec(t, env.pgDSN, "DROP TABLE IF EXISTS "+fill) })
	for i := 0; currentLSN(t, env.pgDSN) < bEnd+64<<20; i++ {
		if i > 40 {
			t.Fatalf("A's WAL at %s does not pass B's %s + 64 MiB", currentLSN(t, env.pgDSN), bEnd)
		}
		pgExec(t, env.pgDSN, "INSERT INTO "+fill+" VALUES (1)")
		pgExec(t, env.pgDSN, "SELECT pg_switch_wal()")
	}
	wmA := waitSlotLSN(t, env.pgDSN, s.name, currentLSN(t, env.pgDSN), time.Minute, p)
	t.Logf("A (system %s): slot confirmed at %s; B (system %s): slot at %s, first event txn commits after %s, WAL end %s",
		sysA, wmA, sysB, slotB, firstB.PreCommit, bEnd)

	failoverAndVerify(t, rng, failoverRun{s: s, args: args, p: p, proxy: proxy, broker: broker, newEnv: benv,
		oldWrites: []*workload{wA}, newWrites: wB, firstNew: firstB, oldWatermark: wmA, newSlotStart: slotB,
		oldID: idA, newID: idB})
}

// failoverRun is a failover prepared by a test: walrelay (p, started with args) streams
// through proxy from the old server and has confirmed oldWatermark there; the new server
// (newEnv) has the slot at newSlotStart and events after it, written by newWrites, the
// first committed one in firstNew. oldWrites wrote the old server's events, all
// acknowledged already. oldID and newID are {system identifier, timeline}.
type failoverRun struct {
	s            *scenario
	args         []string
	p            *walrelayProc
	proxy        *tcpProxy
	broker       *faultBroker
	newEnv       *testEnv
	oldWrites    []*workload
	newWrites    *workload
	firstNew     *txnRec
	oldWatermark lsn
	newSlotStart string
	oldID, newID [2]string
}

// failoverAndVerify pauses Kafka, switches the proxy to the new server, checks that the
// new slot never moves past its first unacknowledged event and that walrelay logged the
// change of WAL history, kills walrelay, resumes Kafka, restarts walrelay and requires
// every event of both servers' workloads to arrive.
func failoverAndVerify(t *testing.T, rng *mrand.Rand, f failoverRun) {
	t.Helper()
	s, benv, wB, firstB, wmA, p := f.s, f.newEnv, f.newWrites, f.firstNew, f.oldWatermark, f.p
	bu, err := url.Parse(benv.pgDSN)
	if err != nil {
		t.Fatal(err)
	}
	// Kafka stops answering, then the failover.
	f.broker.pause()
	f.proxy.retarget(bu.Host)
	si := waitSlotStreaming(t, benv.pgDSN, s.name, time.Minute, p)
	t.Logf("walrelay streams from the new server (walsender %d)", si.activePID)
	for i := range 3 {
		wB.mustWriteTxn(1+rng.IntN(10), i == 1)
	}
	// Nothing from the new server can be acknowledged: its slot must stay before its
	// first event.
	var maxB lsn
	for deadline := time.Now().Add(4 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		maxB = max(maxB, slotLSN(t, benv.pgDSN, s.name))
	}
	if maxB > firstB.PreCommit {
		t.Errorf("failover: the new server's slot was confirmed up to %s, past its transaction %d (commit after %s) that Kafka "+
			"never acknowledged (walrelay's watermark on the old server was %s): a restart now skips its events", maxB, firstB.Index, firstB.PreCommit, wmA)
	} else {
		t.Logf("failover: the new server's slot stayed at or before %s while Kafka was paused (first event commits after %s)", maxB, firstB.PreCommit)
	}
	warned := false
	for _, m := range p.logLines() {
		if m["level"] == "WARN" && m["old_system_id"] == f.oldID[0] && m["new_system_id"] == f.newID[0] &&
			fmt.Sprint(m["old_timeline"]) == f.oldID[1] && fmt.Sprint(m["new_timeline"]) == f.newID[1] {
			warned = true
			t.Logf("walrelay: %v (old %v/%v, new %v/%v, old_lsn %v, lsn %v)", m["msg"], m["old_system_id"], m["old_timeline"],
				m["new_system_id"], m["new_timeline"], m["old_lsn"], m["lsn"])
		}
	}
	if !warned {
		t.Errorf("no WARN log line with old system/timeline %s/%s and new %s/%s after the failover", f.oldID[0], f.oldID[1], f.newID[0], f.newID[1])
	}

	// walrelay dies before Kafka acknowledged anything from the new server; then Kafka is
	// back and walrelay restarts (still through the proxy, now at the new server).
	p.kill9()
	f.broker.resume()
	p2 := s.startArgs(f.args...)
	p2.waitReady(time.Minute)
	waitSlotStreaming(t, benv.pgDSN, s.name, time.Minute, p2)
	for range 3 {
		wB.mustWriteTxn(1+rng.IntN(10), false)
	}
	waitSlotLSN(t, benv.pgDSN, s.name, currentLSN(t, benv.pgDSN), 2*time.Minute, p2)

	// Every committed event of the old server (acknowledged before the failover) and of
	// the new one arrives.
	var committed []*eventRec
	rolledBack := map[string]*eventRec{}
	rows := readOutbox(t, benv.pgDSN, s.table)
	nOld := 0
	for _, w := range f.oldWrites {
		committed = append(committed, w.committed...)
		nOld += len(w.committed)
		maps.Copy(rolledBack, w.rolledBack)
		maps.Copy(rows, readOutbox(t, w.conn.Config().ConnString(), s.table))
	}
	committed = append(committed, wB.committed...)
	maps.Copy(rolledBack, wB.rolledBack)
	byID := map[string]*eventRec{}
	topicSet := map[string]bool{}
	for _, ev := range committed {
		byID[ev.ID] = ev
		topicSet[s.name+"."+ev.AggType] = true
	}
	recs := consumeAllIsolation(t, s.env.kafka, s.name+".", slices.Sorted(maps.Keys(topicSet)), s.readCommitted)
	res := judge(t, s, committed, byID, rolledBack, rows, recs)
	t.Log(res.summary(t.Name(), fmt.Sprintf("old_events=%d", nOld), fmt.Sprintf("new_events=%d", len(wB.committed)),
		"old_watermark="+wmA.String(), "new_slot_start="+f.newSlotStart, "new_slot_max_while_paused="+maxB.String()))
	res.requireClean(t)
}

// walHistory returns the cluster's system identifier and its current timeline (from the
// name of the WAL file being written: exact right after a promotion).
func walHistory(t *testing.T, dsn string) [2]string {
	t.Helper()
	var id, file string
	if err := pgPool(t, dsn).scan(context.Background(),
		"SELECT system_identifier::text, pg_walfile_name(pg_current_wal_lsn()) FROM pg_control_system()", nil, &id, &file); err != nil {
		t.Fatalf("system identifier and timeline: %v", err)
	}
	tli, err := strconv.ParseUint(file[:8], 16, 32)
	if err != nil {
		t.Fatalf("timeline of WAL file %q: %v", file, err)
	}
	return [2]string{id, strconv.FormatUint(tli, 10)}
}

// TestFailoverToPromotedStandby: the Patroni-style failover. Primary P has a streaming
// standby S that got a copy of walrelay's slot (the slot's state file, as Patroni's
// permanent slots do, taken after a checkpoint: it lags what walrelay confirmed). S stops
// receiving WAL; walrelay goes on relaying from P and confirms far past the point where
// S's history forks (asynchronous replication). S is promoted (timeline 2, same system
// identifier), events are committed on it, and the proxy in front of Postgres switches to
// S. walrelay must notice the new timeline, resume from S's slot copy, never confirm its
// old position on S, and relay every event committed on S.
func TestFailoverToPromotedStandby(t *testing.T) { failoverToPromotedStandby(t, "at-least-once") }

// TestExactlyOnceFailoverToPromotedStandby is the same failover in exactly-once mode, read
// as a read_committed consumer: the Kafka checkpoint was committed on the old timeline
// past the point where the standby's history forks, and new transactions on the promoted
// standby have LSNs below it. The checkpoint covers only what the two histories share, so
// none of them is skipped (before the checkpoint carried its timeline, every event
// committed on the promoted standby below the old checkpoint was skipped for good).
func TestExactlyOnceFailoverToPromotedStandby(t *testing.T) {
	failoverToPromotedStandby(t, "exactly-once")
}

func failoverToPromotedStandby(t *testing.T, delivery string) {
	env := requireEnv(t)
	rng := testRand(t)
	penv, pScript := startPrivateCluster(t, env)
	s := newScenario(t, penv, "fopromo")
	s.readCommitted = delivery == "exactly-once"
	broker := newFaultBroker(t, env)
	au, err := url.Parse(penv.pgDSN)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newTCPProxy(t, "postgres", au.Host)
	pu := *au
	pu.Host = proxy.addr()
	args := faultWithFlag(s.runArgs("--status-interval", "200ms", "--heartbeat-interval", "1s", "--delivery", delivery), "--postgres-dsn", pu.String())
	p := s.startArgsReady(args...)

	wP := newWorkload(t, penv, s.table, 30, newRandFrom(rng))
	for i := range 5 {
		wP.mustWriteTxn(1+rng.IntN(10), i == 2)
	}
	waitSlotLSN(t, penv.pgDSN, s.name, currentLSN(t, penv.pgDSN), time.Minute, p)
	pgExec(t, penv.pgDSN, "CHECKPOINT") // the slot's state file as a copy would take it
	senv := standbyWithSlotCopy(t, env, penv, pScript, s.name)

	// S stops receiving WAL; P goes on, and walrelay confirms far past the fork.
	pgExec(t, senv.pgDSN, "ALTER SYSTEM SET primary_conninfo = ''")
	pgExec(t, senv.pgDSN, "SELECT pg_reload_conf()")
	testwait.Eventually(t, 30*time.Second, "the standby's WAL receiver to stop", func() bool {
		var n int
		err := pgPool(t, senv.pgDSN).scan(context.Background(), "SELECT count(*) FROM pg_stat_wal_receiver", nil, &n)
		return err == nil && n == 0
	})
	for range 3 {
		wP.mustWriteTxn(1+rng.IntN(10), false) // relayed, never on S
	}
	fill := pgx.Identifier{"public", s.name + "_fill"}.Sanitize()
	pgExec(t, penv.pgDSN, "CREATE TABLE "+fill+" (x int)")
	for range 3 {
		pgExec(t, penv.pgDSN, "INSERT INTO "+fill+" VALUES (1)")
		pgExec(t, penv.pgDSN, "SELECT pg_switch_wal()")
	}
	wmP := waitSlotLSN(t, penv.pgDSN, s.name, currentLSN(t, penv.pgDSN), time.Minute, p)

	var promoted bool
	if err := pgPool(t, senv.pgDSN).scan(context.Background(), "SELECT pg_promote(true, 60)", nil, &promoted); err != nil || !promoted {
		t.Fatalf("promote the standby: %v (promoted %v)", err, promoted)
	}
	faultResetPool(t, senv.pgDSN)
	oldID, newID := walHistory(t, penv.pgDSN), walHistory(t, senv.pgDSN)
	if oldID[0] != newID[0] || oldID[1] == newID[1] {
		t.Fatalf("after promotion: primary %v, standby %v; want the same system identifier on another timeline", oldID, newID)
	}
	slotS := slotLSN(t, senv.pgDSN, s.name)
	wS := newWorkload(t, senv, s.table, 30, newRandFrom(rng))
	for i := range wS.aggs {
		wS.aggs[i].id = "s-" + wS.aggs[i].id
	}
	var firstS *txnRec
	for i := range 5 {
		tx := wS.mustWriteTxn(1+rng.IntN(10), i == 1)
		if firstS == nil && tx.Committed {
			firstS = tx
		}
	}
	if wmP <= firstS.PostLSN {
		t.Fatalf("walrelay's position on P (%s) is not past S's first event (%s): the scenario proves nothing", wmP, firstS.PostLSN)
	}
	t.Logf("P %v: slot confirmed at %s; S %v: slot copy at %s, first event commits after %s",
		oldID, wmP, newID, slotS, firstS.PreCommit)

	failoverAndVerify(t, rng, failoverRun{s: s, args: args, p: p, proxy: proxy, broker: broker, newEnv: senv,
		oldWrites: []*workload{wP}, newWrites: wS, firstNew: firstS, oldWatermark: wmP, newSlotStart: slotS.String(),
		oldID: oldID, newID: newID})
}

// standbyWithSlotCopy makes a streaming standby of the private cluster penv (pg.sh
// environment pScript) with pg_basebackup, gives it a copy of the slot's state file and
// the older WAL segments the slot still needs (what Patroni does for permanent slots),
// starts it and waits until it replayed the primary's current position. It is stopped
// and removed at the end of the test. Where the server binaries have no pg_basebackup
// (the Maven builds of 14, 16, 17, 18; Debian's 15 one refuses newer servers), pg.sh
// standby-create copies the running primary between pg_backup_start and pg_backup_stop
// instead, with all of its WAL.
func standbyWithSlotCopy(t *testing.T, env, penv *testEnv, pScript []string, slot string) *testEnv {
	t.Helper()
	var pDir string
	for _, kv := range pScript {
		if v, ok := strings.CutPrefix(kv, "WALRELAY_TEST_DIR="); ok {
			pDir = v
		}
	}
	pu, err := url.Parse(penv.pgDSN)
	if err != nil || pDir == "" {
		t.Fatalf("primary: dsn %q, dir %q: %v", penv.pgDSN, pDir, err)
	}
	dir, port, extra, dsn := privateClusterPlace(t, env, "walrelay-standby-", "the standby")
	pgBin := env.pgBin
	if pgBin == "" {
		pgBin = "/usr/lib/postgresql/15/bin"
	}
	stateDir, data := filepath.Join(dir, "pg"), filepath.Join(dir, "pg", "data")
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	asPG := func(name string, args ...string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		if os.Geteuid() == 0 {
			cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", name}, args...)...)
		}
		cmd.Dir = "/tmp"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, indent(string(out)))
		}
	}
	how := "base backup"
	if _, err := os.Stat(filepath.Join(pgBin, "pg_basebackup")); err != nil {
		how = "pg.sh standby-create"
		if err := runEnvScript(t, env, 3*time.Minute, pScript, "pg.sh", "standby-create", "--no-start", dir, strconv.Itoa(port)); err != nil {
			t.Fatalf("copy the primary: %v", err)
		}
	} else {
		if err := os.MkdirAll(stateDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if os.Geteuid() == 0 {
			asRoot := exec.Command("chown", "postgres:", stateDir)
			if out, err := asRoot.CombinedOutput(); err != nil {
				t.Fatalf("chown %s: %v\n%s", stateDir, err, out)
			}
		}
		asPG(filepath.Join(pgBin, "pg_basebackup"), "-h", pu.Hostname(), "-p", pu.Port(), "-U", "postgres", "-D", data,
			"-R", "-X", "stream", "-c", "fast")
	}
	pData := filepath.Join(pDir, "pg", "data")
	asPG("mkdir", "-p", filepath.Join(data, "pg_replslot", slot))
	asPG("cp", filepath.Join(pData, "pg_replslot", slot, "state"), filepath.Join(data, "pg_replslot", slot, "state"))
	// The slot needs WAL from its restart position on, older than the base backup.
	have, err := os.ReadDir(filepath.Join(data, "pg_wal"))
	if err != nil {
		t.Fatal(err)
	}
	oldest := ""
	for _, e := range have {
		if n := e.Name(); len(n) == 24 && (oldest == "" || n < oldest) {
			oldest = n
		}
	}
	segs, err := os.ReadDir(filepath.Join(pData, "pg_wal"))
	if err != nil {
		t.Fatal(err)
	}
	copied := 0
	for _, e := range segs {
		if n := e.Name(); len(n) == 24 && strings.HasPrefix(n, "00000001") && n < oldest {
			asPG("cp", filepath.Join(pData, "pg_wal", n), filepath.Join(data, "pg_wal", n))
			copied++
		}
	}
	t.Logf("standby: %s in %s, slot %s copied, %d older WAL segments copied (oldest of the backup %s)", how, data, slot, copied, oldest)
	if err := runEnvScript(t, env, 3*time.Minute, extra, "pg.sh", "start"); err != nil {
		t.Fatalf("start the standby: %v", err)
	}
	waitReplayed(t, dsn, currentLSN(t, penv.pgDSN))
	senv := *penv
	senv.pgDSN = dsn
	return &senv
}

// waitReplayed waits until the standby at dsn has replayed the WAL up to target (a
// position of its primary), so that what the primary committed before target is there.
func waitReplayed(t *testing.T, dsn string, target lsn) {
	t.Helper()
	testwait.Eventually(t, time.Minute, "the standby to replay "+target.String(), func() bool {
		var s *string
		if err := pgPool(t, dsn).scan(context.Background(), "SELECT pg_last_wal_replay_lsn()::text", nil, &s); err != nil || s == nil {
			return false
		}
		l, err := parseLSN(*s)
		return err == nil && l >= target
	})
}
