package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
	benv, _ := faultPrivateCluster(t, env)
	s.migrate(benv.pgDSN, s.table)
	pgExec(t, benv.pgDSN, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert', publish_via_partition_root = true)",
		pgx.Identifier{s.name}.Sanitize(), pgx.Identifier(strings.Split(s.table, ".")).Sanitize()))
	broker := newFaultBroker(t, env)

	au, err := url.Parse(env.pgDSN)
	if err != nil || au.Host == "" {
		t.Fatalf("WALRELAY_TEST_PG_DSN %q: need a postgres:// URL with host:port (%v)", env.pgDSN, err)
	}
	bu, err := url.Parse(benv.pgDSN)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newTCPProxy(t, "postgres", au.Host)
	pu := *au
	pu.Host = proxy.addr()
	args := faultWithFlag(s.runArgs("--status-interval", "200ms", "--heartbeat-interval", "1s"), "--postgres-dsn", pu.String())
	p := faultStartReady(s, args)

	sysA, sysB := systemID(t, env.pgDSN), systemID(t, benv.pgDSN)
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

	// Kafka stops answering, then the failover.
	broker.pause()
	proxy.retarget(bu.Host)
	si := waitSlotStreaming(t, benv.pgDSN, s.name, time.Minute, p)
	t.Logf("walrelay streams from B (walsender %d)", si.activePID)
	for i := range 3 {
		wB.mustWriteTxn(1+rng.IntN(10), i == 1)
	}
	// Nothing from B can be acknowledged: B's slot must stay before its first event.
	var maxB lsn
	for deadline := time.Now().Add(4 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		maxB = max(maxB, slotLSN(t, benv.pgDSN, s.name))
	}
	if maxB > firstB.PreCommit {
		t.Errorf("failover: B's slot was confirmed up to %s, past B's transaction %d (commit after %s) that Kafka never "+
			"acknowledged (walrelay's watermark on A was %s): a restart now skips B's events", maxB, firstB.Index, firstB.PreCommit, wmA)
	} else {
		t.Logf("failover: B's slot stayed at or before %s while Kafka was paused (first B event commits after %s)", maxB, firstB.PreCommit)
	}
	warned := false
	for _, m := range p.logLines() {
		if m["level"] == "WARN" && m["old_system_id"] == sysA && m["new_system_id"] == sysB {
			warned = true
			t.Logf("walrelay: %v (old %v/%v, new %v/%v, old_lsn %v, lsn %v)", m["msg"], m["old_system_id"], m["old_timeline"],
				m["new_system_id"], m["new_timeline"], m["old_lsn"], m["lsn"])
		}
	}
	if !warned {
		t.Errorf("no WARN log line with old_system_id=%s new_system_id=%s after the failover", sysA, sysB)
	}

	// walrelay dies before Kafka acknowledged anything from B; then Kafka is back and
	// walrelay restarts (still through the proxy, now at B).
	p.kill9()
	broker.resume()
	p2 := faultStart(s, args)
	p2.waitReady(time.Minute)
	waitSlotStreaming(t, benv.pgDSN, s.name, time.Minute, p2)
	for range 3 {
		wB.mustWriteTxn(1+rng.IntN(10), false)
	}
	waitSlotLSN(t, benv.pgDSN, s.name, currentLSN(t, benv.pgDSN), 2*time.Minute, p2)

	// Every committed event of A (acknowledged before the failover) and of B arrives.
	committed := append(slices.Clone(wA.committed), wB.committed...)
	rolledBack := maps.Clone(wA.rolledBack)
	maps.Copy(rolledBack, wB.rolledBack)
	rows := readOutbox(t, env.pgDSN, s.table)
	maps.Copy(rows, readOutbox(t, benv.pgDSN, s.table))
	byID := map[string]*eventRec{}
	topicSet := map[string]bool{}
	for _, ev := range committed {
		byID[ev.ID] = ev
		topicSet[s.name+"."+ev.AggType] = true
	}
	recs := consumeAll(t, env.kafka, s.name+".", slices.Sorted(maps.Keys(topicSet)))
	res := judge(t, s, committed, byID, rolledBack, rows, recs)
	t.Log(res.summary("failover", fmt.Sprintf("a_events=%d", len(wA.committed)), fmt.Sprintf("b_events=%d", len(wB.committed)),
		"a_watermark="+wmA.String(), "b_slot_start="+slotB, "b_slot_max_while_paused="+maxB.String()))
	res.requireClean(t)
}

// systemID is the cluster's system identifier.
func systemID(t *testing.T, dsn string) string {
	t.Helper()
	var id string
	if err := pgPool(t, dsn).scan(context.Background(), "SELECT system_identifier::text FROM pg_control_system()", nil, &id); err != nil {
		t.Fatalf("system identifier: %v", err)
	}
	return id
}
