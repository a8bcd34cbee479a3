package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// buildConsumer builds test/consumer into a temporary directory.
func buildConsumer(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "consumer")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./test/consumer")
	cmd.Dir = filepath.Dir(wd)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./test/consumer: %v\n%s", err, indent(string(b)))
	}
	return out
}

var consumerResultRE = regexp.MustCompile(`(?m)^applied=(\d+) duplicates=(\d+)$`)

// consumerRun is what one run of the consumer program reported.
type consumerRun struct{ applied, duplicates int }

// runConsumer runs the consumer program to its end (bounded) and parses its result line.
func runConsumer(t *testing.T, bin string, args ...string) consumerRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, bin, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("consumer %v: %v\n%s", args, err, indent(string(out)))
	}
	m := consumerResultRE.FindSubmatch(out)
	if m == nil {
		t.Fatalf("consumer printed no result line:\n%s", indent(string(out)))
	}
	a, _ := strconv.Atoi(string(m[1]))
	d, _ := strconv.Atoi(string(m[2]))
	t.Logf("consumer %v: applied=%d duplicates=%d in %s", args, a, d, time.Since(start).Round(time.Millisecond))
	return consumerRun{a, d}
}

// TestContractIdempotentConsumer: the consumer-side half of the contract. walrelay
// delivers at least once, so the example consumer (test/consumer, quoted in the README)
// deduplicates on the id header inside its own database transaction. The topic gets
// duplicates twice over: walrelay is killed with -9 mid-stream (transactions after the
// confirmed position are sent again) and some records are produced a second time on
// purpose. The consumer then runs three times — stopped after a third of the events,
// resumed to the end, and once more in a new group that re-reads everything — and every
// committed event must be applied exactly once, with one processed_events row per id.
func TestContractIdempotentConsumer(t *testing.T) {
	env := requireEnv(t)
	rng := testRand(t)
	c := newContract(t, env, "cconsumer")
	c.migrate(env.pgDSN, c.table)
	topic := c.name + ".events" // one fixed topic
	consumerDSN := c.createDatabase(c.name + "_db")
	bin := buildConsumer(t)

	runArgs := []string{"--topic", topic, "--status-interval", "100ms"}
	p := c.startReady(runArgs...)
	w := newWorkload(t, env, c.table, 30, newRandFrom(rng))
	w.nullPayloadEvery = 40 // tombstones are events too
	stop := w.runContinuous(continuousOpts{maxEvents: 8, rollbackPct: 10, maxPause: 3 * time.Millisecond})
	t.Cleanup(func() { _ = stop() })
	const kills = 2
	for i := 1; i <= kills; i++ {
		time.Sleep(700*time.Millisecond + time.Duration(rng.Int64N(int64(time.Second))))
		p.kill9()
		_, _, events, _ := w.stats()
		t.Logf("kill -9 #%d of walrelay (workload: %d committed events, slot at %s)", i, events, slotLSN(t, env.pgDSN, c.name))
		p = c.start(runArgs...)
	}
	time.Sleep(500 * time.Millisecond)
	if err := stop(); err != nil {
		t.Fatalf("workload: %v", err)
	}
	target := currentLSN(t, env.pgDSN)
	p.waitReady(60 * time.Second)
	waitSlotLSN(t, env.pgDSN, c.name, target, 120*time.Second, p)

	w.mu.Lock()
	committed := map[string]*eventRec{}
	for _, ev := range w.committed {
		committed[ev.ID] = ev
	}
	rolledBack := len(w.rolledBack)
	w.mu.Unlock()

	recs := consumeAll(t, env.kafka, topic, []string{topic})[topic]
	seen := map[string]int{}
	for _, r := range recs {
		seen[header(r, "id")]++
	}
	for id := range committed {
		if seen[id] == 0 {
			t.Fatalf("event %s is not in %s: walrelay lost it (TestCrashKill9 covers this); nothing to consume", id, topic)
		}
	}
	resent := len(recs) - len(seen)

	// Duplicates on purpose: produce some records a second time, as they are.
	const reproduce = 40
	cl := newKafkaClient(t, env.kafka)
	var dups []*kgo.Record
	for _, i := range rng.Perm(len(recs))[:min(reproduce, len(recs))] {
		r := recs[i]
		dups = append(dups, &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value, Headers: r.Headers, Timestamp: r.Timestamp})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, dups...).FirstErr(); err != nil {
		t.Fatalf("produce duplicates: %v", err)
	}
	cl.Close()
	total := len(recs) + len(dups)
	t.Logf("%s: %d records for %d committed events (%d sent again by walrelay after kill -9, %d produced again on purpose)",
		topic, total, len(committed), resent, len(dups))

	group := c.name + "_g1"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cl := newKafkaClient(t, env.kafka)
		defer cl.Close()
		_, _ = kadm.NewClient(cl).DeleteGroups(ctx, group, c.name+"_g2")
	})
	common := []string{"-brokers", env.kafka, "-topic", topic, "-dsn", consumerDSN, "-consumer", "billing"}
	first := runConsumer(t, bin, append(common, "-group", group, "-exit-after", strconv.Itoa(len(committed)/3))...)
	if first.applied != len(committed)/3 {
		t.Errorf("run 1 (-exit-after %d) applied %d events", len(committed)/3, first.applied)
	}
	// Resume to the last event (the idle timeout only bounds a run that would hang).
	second := runConsumer(t, bin, append(common, "-group", group,
		"-exit-after", strconv.Itoa(len(committed)-first.applied), "-idle-timeout", "30s")...)
	// A new group starts from the beginning: everything is a duplicate now.
	third := runConsumer(t, bin, append(common, "-group", c.name+"_g2", "-idle-timeout", "10s")...)
	if got := first.applied + second.applied; got != len(committed) {
		t.Errorf("runs 1 and 2 applied %d events, want %d (each committed event once)", got, len(committed))
	}
	if third.applied != 0 || third.duplicates != total {
		t.Errorf("run 3 (new group, re-reads all %d records): applied=%d duplicates=%d, want applied=0 duplicates=%d",
			total, third.applied, third.duplicates, total)
	}

	// The consumer's database: each event applied exactly once, one processed row per id,
	// and the applied payload is the outbox payload.
	db := connect(t, consumerDSN)
	applied := map[string]int{}
	appliedPayload := map[string]*string{}
	rows, err := db.Query(ctx, `SELECT event_id, payload::text FROM applied_events`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var payload *string
		if err := rows.Scan(&id, &payload); err != nil {
			t.Fatal(err)
		}
		applied[id]++
		appliedPayload[id] = payload
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var processedRows, processedIDs int
	if err := db.QueryRow(ctx, `SELECT count(*), count(DISTINCT event_id) FROM processed_events WHERE consumer = 'billing'`).
		Scan(&processedRows, &processedIDs); err != nil {
		t.Fatal(err)
	}
	outbox := readOutbox(t, env.pgDSN, c.table)
	appliedTwice, missingApplied, unknownApplied, payloadMismatch := 0, 0, 0, 0
	for id, n := range applied {
		if n > 1 {
			appliedTwice++
			if appliedTwice <= 10 {
				t.Errorf("event %s applied %d times", id, n)
			}
		}
		if committed[id] == nil {
			unknownApplied++
			t.Errorf("applied event %s was never committed by the workload", id)
			continue
		}
		want := outbox[id].payload
		if got := appliedPayload[id]; (got == nil) != (want == nil) || (got != nil && *got != *want) {
			payloadMismatch++
			if payloadMismatch <= 10 {
				t.Errorf("event %s: applied payload %v, outbox payload %v", id, deref(got), deref(want))
			}
		}
	}
	for id := range committed {
		if applied[id] == 0 {
			missingApplied++
			if missingApplied <= 10 {
				t.Errorf("committed event %s was never applied", id)
			}
		}
	}
	if processedRows != len(committed) || processedIDs != len(committed) {
		t.Errorf("processed_events: %d rows, %d distinct ids, want %d each", processedRows, processedIDs, len(committed))
	}
	t.Logf("scenario=contract/consumer committed=%d rolled_back=%d records=%d resent_by_walrelay=%d reproduced=%d kills=%d run1=%d/%d run2=%d/%d run3=%d/%d applied_ids=%d applied_twice=%d not_applied=%d unknown_applied=%d payload_mismatch=%d processed_rows=%d",
		len(committed), rolledBack, total, resent, len(dups), kills, first.applied, first.duplicates, second.applied, second.duplicates,
		third.applied, third.duplicates, len(applied), appliedTwice, missingApplied, unknownApplied, payloadMismatch, processedRows)
	if len(committed) == 0 {
		t.Error("the workload committed no event: the test proved nothing")
	}
}
