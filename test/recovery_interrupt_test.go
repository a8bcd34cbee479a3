package e2e

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestRecoveryKilledThenPruneThenRetried: the slot is lost while walrelay
// is down and writes go on; the recovery is killed with -9 in the middle of
// its replay; `walrelay prune --older-than 1h` runs; the recovery runs
// again. Prune deletes no row of the gap, and Kafka holds every gap event at
// the end. (The gap's rows are dated two hours back, so that prune would
// reach them; the recovery margin covers them.)
func TestRecoveryKilledThenPruneThenRetried(t *testing.T) {
	env := requireEnv(t)
	s := newScenario(t, env, "rkillp")
	recovering := s.name + "_recovering"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = dropSlot(ctx, t, env.pgDSN, recovering)
	})
	p := s.startReady()
	for range 5 {
		pgExec(t, env.pgDSN, "INSERT INTO "+faultQuote(s.table)+" (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', 'delivered', 'e', '{}')")
	}
	waitSlotLSN(t, env.pgDSN, s.name, currentLSN(t, env.pgDSN), time.Minute, p)
	if got := consumeAll(t, env.kafka, s.name+".", []string{s.name + ".order"}); len(got[s.name+".order"]) != 5 {
		t.Fatalf("walrelay delivered %d events, want 5", len(got[s.name+".order"]))
	}
	p.sigterm()
	p.waitExit(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := dropSlot(ctx, t, env.pgDSN, s.name); err != nil {
		t.Fatal(err)
	}
	const gap = 300
	pgExec(t, env.pgDSN, "INSERT INTO "+faultQuote(s.table)+
		" (aggregate_type, aggregate_id, event_type, payload, created_at) SELECT 'order', 'gap-' || i, 'e', '{}', now() - interval '2 hours' FROM generate_series(1, $1) i", gap)

	recover := s.commonArgs("replay", "--since-last-delivered", "--recovery-margin", "3h")
	s.runs++
	r := startWalrelay(t, "recovery#1", filepath.Join(s.logDir, "recovery-1.log"), append(recover, "--rate", "50", "--progress-interval", "200ms"), nil)
	deadline := time.Now().Add(time.Minute)
	for progressAcked(r) == 0 {
		if r.exited() || time.Now().After(deadline) {
			t.Fatalf("recovery exited (%s) or made no progress before the kill\n%s", r.exitStatus(), r.tail(20))
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.kill9()
	t.Logf("killed the recovery at %d of %d rows acknowledged", progressAcked(r), gap)

	code, out, _ := s.cmdRun(time.Minute, "prune", "--postgres-dsn", env.pgDSN, "--kafka-brokers", env.kafka, "--slot", s.name, "--table", s.table,
		"--topic", s.topicTemplate(), "--older-than", "1h", "--recovery-margin", "3h")
	var left int
	if err := pgPool(t, env.pgDSN).scan(ctx, "SELECT count(*) FROM "+faultQuote(s.table)+" WHERE aggregate_id LIKE 'gap-%'", nil, &left); err != nil {
		t.Fatal(err)
	}
	if code != 0 || left != gap || !strings.Contains(out, "unfinished") {
		t.Fatalf("prune after the killed recovery: exit %d, %d of %d gap rows left; want all kept, naming the unfinished recovery", code, left, gap)
	}

	code, out, _ = s.cmdRun(3*time.Minute, recover...)
	if code != 0 || !strings.Contains(out, "recovery done") || !strings.Contains(out, "kept replication slot") {
		t.Fatalf("retried recovery: exit %d; want it to keep the unfinished recovery's slot and finish", code)
	}
	if !querySlotExists(t, env.pgDSN, s.name) || querySlotExists(t, env.pgDSN, recovering) {
		t.Fatalf("after the recovery: slot %s exists %v, %s exists %v; want only the former",
			s.name, querySlotExists(t, env.pgDSN, s.name), recovering, querySlotExists(t, env.pgDSN, recovering))
	}
	seen := map[string]bool{}
	for _, r := range consumeAll(t, env.kafka, s.name+".", []string{s.name + ".order"})[s.name+".order"] {
		seen[string(r.Key)] = true
	}
	missing := 0
	for i := 1; i <= gap; i++ {
		if !seen["gap-"+strconv.Itoa(i)] {
			missing++
		}
	}
	if missing != 0 {
		t.Fatalf("%d of %d gap events are not in Kafka after the retried recovery", missing, gap)
	}
}
