package e2e

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walrelay/walrelay/internal/testwait"
)

// The replay and recovery suite: `walrelay replay` (a time range, a resume
// after kill -9, recovery after a lost slot in both delivery modes),
// `walrelay dlq redrive` and `walrelay prune`'s guard, against the real
// Postgres and Kafka.

// Headers only the WAL knows, which a replayed record carries instead of
// walrelay.replay.
const (
	hdrLSN    = "walrelay.lsn"
	hdrXID    = "walrelay.xid"
	hdrReplay = "walrelay.replay"
)

// commonArgs are the settings every walrelay command of the scenario shares
// with `walrelay run`: Postgres, the slot, the table, Kafka and routing.
func (s *scenario) commonArgs(cmd ...string) []string {
	return append(cmd, "--postgres-dsn", s.env.pgDSN, "--kafka-brokers", s.env.kafka, "--slot", s.name,
		"--publication", s.name, "--table", s.table, "--topic", s.topicTemplate())
}

// cmdRun runs walrelay with args to completion and returns its exit code,
// stdout and stderr.
func (s *scenario) cmdRun(timeout time.Duration, args ...string) (code int, stdout, stderr string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, walrelayBin, args...)
	cmd.Env = childEnv(nil)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			s.t.Fatalf("walrelay %s: %v\n%s", strings.Join(args[:2], " "), err, errb.String())
		}
		code = ee.ExitCode()
	}
	s.t.Logf("walrelay %s: exit %d\nstdout:\n%s\nstderr (tail):\n%s", args[0], code, indent(out.String()), indent(lastLines(errb.String(), 12)))
	return code, out.String(), errb.String()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// serverNow is the server's clock_timestamp(): rows written by transactions
// that start after it have a later created_at.
func serverNow(t *testing.T, dsn string) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var ts time.Time
	if err := pgPool(t, dsn).scan(ctx, "SELECT clock_timestamp()", nil, &ts); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond)
	return ts.UTC()
}

// splitReplays separates the relay's records (by id) from the replays'.
func splitReplays(recs map[string][]*kgo.Record) (orig map[string]*kgo.Record, replayed []*kgo.Record) {
	orig = map[string]*kgo.Record{}
	for _, topic := range slices.Sorted(maps.Keys(recs)) {
		for _, r := range recs[topic] {
			if header(r, hdrReplay) != "" {
				replayed = append(replayed, r)
			} else {
				orig[header(r, "id")] = r
			}
		}
	}
	return orig, replayed
}

// sameAsOriginal reports how replayed differs from orig, the relay's record
// of the same event: topic, key, value and headers must be equal, except
// walrelay.lsn and walrelay.xid, which give way to the replay marker.
func sameAsOriginal(replayed, orig *kgo.Record) string {
	var d []string
	if replayed.Topic != orig.Topic {
		d = append(d, fmt.Sprintf("topic %s, original %s", replayed.Topic, orig.Topic))
	}
	if !bytes.Equal(replayed.Key, orig.Key) {
		d = append(d, fmt.Sprintf("key %q, original %q", replayed.Key, orig.Key))
	}
	if !bytes.Equal(replayed.Value, orig.Value) || (replayed.Value == nil) != (orig.Value == nil) {
		d = append(d, fmt.Sprintf("value %q, original %q", replayed.Value, orig.Value))
	}
	var want, got []string
	for _, h := range orig.Headers {
		if h.Key != hdrLSN && h.Key != hdrXID {
			want = append(want, h.Key+"="+string(h.Value))
		}
	}
	for _, h := range replayed.Headers {
		if h.Key != hdrReplay {
			got = append(got, h.Key+"="+string(h.Value))
		}
	}
	if !slices.Equal(got, want) {
		d = append(d, fmt.Sprintf("headers %v, original %v", got, want))
	}
	return strings.Join(d, "; ")
}

// TestReplayTimeRange: a replay of a time range delivers every row of the
// range once more, as the very record walrelay run made (topic, key, value,
// headers) plus the replay marker, beside the running relay; nothing
// outside the range; a dry run before sends nothing.
func TestReplayTimeRange(t *testing.T) {
	env := requireEnv(t)
	rng := testRand(t)
	s := newScenario(t, env, "replay")
	p := s.startReady()
	w := newWorkload(t, env, s.table, 40, newRandFrom(rng))
	w.nullPayloadEvery = 9
	write := func(txns int) {
		for range txns {
			w.mustWriteTxn(1+w.rng.IntN(8), w.rng.IntN(10) == 0)
		}
	}
	write(10)
	_, _, before, _ := w.stats()
	since := serverNow(t, env.pgDSN)
	write(40)
	_, _, upto, _ := w.stats()
	until := serverNow(t, env.pgDSN)
	write(10)
	waitSlotLSN(t, env.pgDSN, s.name, w.lastPostLSN(), 60*time.Second, p)
	w.mu.Lock()
	inRange := slices.Clone(w.committed[before:upto])
	all := len(w.committed)
	w.mu.Unlock()
	topics := []string{}
	for _, ev := range inRange {
		if tp := s.name + "." + ev.AggType; !slices.Contains(topics, tp) {
			topics = append(topics, tp)
		}
	}
	rangeArgs := []string{"--since", since.Format(time.RFC3339Nano), "--until", until.Format(time.RFC3339Nano)}

	code, out, _ := s.cmdRun(time.Minute, append(s.commonArgs("replay", "--dry-run"), rangeArgs...)...)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("%d rows", len(inRange))) {
		t.Fatalf("dry run: exit %d, want 0 and the count %d rows in its output", code, len(inRange))
	}
	for _, tp := range topics {
		if !strings.Contains(out, tp) {
			t.Errorf("the dry run does not name topic %s", tp)
		}
	}
	if n := sumEndOffsets(t, env.kafka, s.name+"."); n != int64(all) {
		t.Fatalf("after the dry run the topics hold %d records, want the relay's %d", n, all)
	}

	code, out, _ = s.cmdRun(3*time.Minute, append(s.commonArgs("replay", "--replay-id", "range-1"), rangeArgs...)...)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("replayed %d rows", len(inRange))) {
		t.Fatalf("replay: exit %d, want 0 and 'replayed %d rows'", code, len(inRange))
	}
	orig, replayed := splitReplays(consumeAll(t, env.kafka, s.name+".", topics))
	want := map[string]bool{}
	for _, ev := range inRange {
		want[ev.ID] = true
	}
	seen := map[string]int{}
	bad := 0
	for _, r := range replayed {
		id := header(r, "id")
		seen[id]++
		if header(r, hdrReplay) != "range-1" || !want[id] {
			bad++
			t.Errorf("replayed record of %s (marker %q): not of the range", id, header(r, hdrReplay))
			continue
		}
		if o := orig[id]; o == nil {
			t.Errorf("replayed %s: the relay's record is missing", id)
		} else if d := sameAsOriginal(r, o); d != "" {
			bad++
			t.Errorf("replayed %s differs: %s", id, d)
		}
	}
	missing, twice := 0, 0
	for id := range want {
		switch {
		case seen[id] == 0:
			missing++
		case seen[id] > 1:
			twice++
		}
	}
	t.Logf("replay of %s .. %s: %d rows in range, %d replayed records, missing=%d twice=%d differing=%d (relay's records %d)",
		since.Format(time.RFC3339Nano), until.Format(time.RFC3339Nano), len(inRange), len(replayed), missing, twice, bad, all)
	if missing != 0 || twice != 0 || len(replayed) != len(inRange) {
		t.Fatalf("the replay of the range delivered %d records for %d rows: missing=%d twice=%d", len(replayed), len(inRange), missing, twice)
	}
	inTopic := 0
	for _, ev := range inRange {
		if s.name+"."+ev.AggType == topics[0] {
			inTopic++
		}
	}
	checkReplayWithKcat(t, env, topics[0], "range-1", inTopic)
}

// checkReplayWithKcat reads topic with kcat (librdkafka: another client
// than the tests' franz-go) and checks that it holds want records of the
// replay id, each with the key, payload and headers of the relay's record
// of the same event, walrelay.lsn and walrelay.xid giving way to the
// marker.
func checkReplayWithKcat(t *testing.T, env *testEnv, topic, id string, want int) {
	t.Helper()
	recs, ok := kcatRead(t, env, topic)
	if !ok {
		return
	}
	type rec struct {
		r kcatRecord
		h map[string]string
	}
	orig := map[string]rec{}
	var replayed []rec
	for _, kr := range recs {
		h, err := kcatHeaders(kr.Headers)
		if err != nil {
			t.Fatal(err)
		}
		if r := (rec{kr, h}); h[hdrReplay] == id {
			replayed = append(replayed, r)
		} else if h[hdrReplay] == "" {
			orig[h["id"]] = r
		}
	}
	bad := 0
	for _, r := range replayed {
		o, ok := orig[r.h["id"]]
		hr, ho := maps.Clone(r.h), maps.Clone(o.h)
		delete(hr, hdrReplay)
		delete(ho, hdrLSN)
		delete(ho, hdrXID)
		if !ok || deref(r.r.Key) != deref(o.r.Key) || deref(r.r.Payload) != deref(o.r.Payload) || !maps.Equal(hr, ho) {
			bad++
			t.Errorf("kcat: replayed %s (key %s, payload %s, headers %v) differs from the relay's record (key %s, payload %s, headers %v)",
				r.h["id"], deref(r.r.Key), deref(r.r.Payload), r.h, deref(o.r.Key), deref(o.r.Payload), o.h)
		}
	}
	t.Logf("kcat check of %s: %d replayed records of %s, %d differing from the relay's", topic, len(replayed), id, bad)
	if len(replayed) != want {
		t.Errorf("kcat read %d replayed records of %s from %s, want %d", len(replayed), id, topic, want)
	}
}

// TestReplayKill9Resume: a replay killed with -9 in the middle resumes from
// the last resume token it logged, and no row of the range is missing.
func TestReplayKill9Resume(t *testing.T) {
	env := requireEnv(t)
	rng := testRand(t)
	s := newScenario(t, env, "rkill")
	p := s.startReady()
	w := newWorkload(t, env, s.table, 200, newRandFrom(rng))
	since := serverNow(t, env.pgDSN)
	for range 300 {
		w.mustWriteTxn(1+w.rng.IntN(15), false)
	}
	waitSlotLSN(t, env.pgDSN, s.name, w.lastPostLSN(), 60*time.Second, p)
	p.sigterm()
	p.waitExit(30 * time.Second)
	_, _, events, _ := w.stats()

	args := s.commonArgs("replay", "--since", since.Format(time.RFC3339Nano), "--rate", "800", "--progress-interval", "200ms")
	s.runs++
	r := startWalrelay(t, "replay#1", filepath.Join(s.logDir, "replay-1.log"), args, nil)
	var token string
	deadline := time.Now().Add(time.Minute)
	for token == "" || progressAcked(r) < int64(events)/3 {
		if r.exited() || time.Now().After(deadline) {
			t.Fatalf("replay exited (%s) or made no progress before the kill\n%s", r.exitStatus(), r.tail(20))
		}
		time.Sleep(100 * time.Millisecond)
		token = lastToken(r)
	}
	r.kill9()
	token = lastToken(r)
	acked := progressAcked(r)
	t.Logf("killed the replay at %d of %d rows acknowledged; resuming with the last token logged", acked, events)

	code, out, _ := s.cmdRun(3*time.Minute, s.commonArgs("replay", "--resume", token)...)
	if code != 0 || !strings.Contains(out, "replayed") {
		t.Fatalf("resumed replay: exit %d", code)
	}
	recs := consumeAll(t, env.kafka, s.name+".", nil)
	_, replayed := splitReplays(recs)
	seen := map[string]int{}
	ids := map[string]bool{}
	for _, r := range replayed {
		seen[header(r, "id")]++
		ids[header(r, hdrReplay)] = true
	}
	committed, _ := w.snapshot()
	missing, dup := 0, 0
	for _, ev := range committed {
		if seen[ev.ID] == 0 {
			missing++
		}
		dup += max(seen[ev.ID]-1, 0)
	}
	t.Logf("replay killed at %d, resumed: %d rows, %d replayed records, missing=%d sent twice=%d, replay ids %v",
		acked, len(committed), len(replayed), missing, dup, slices.Collect(maps.Keys(ids)))
	if missing != 0 {
		t.Fatalf("%d rows of the range were never replayed after the resume", missing)
	}
	if len(ids) != 1 {
		t.Errorf("the resumed replay marks its records with another id: %v", ids)
	}
}

// lastToken is the resume token of the replay's last progress line.
func lastToken(p *walrelayProc) string {
	tok := ""
	for _, m := range p.logLines() {
		if s, ok := m["resume_token"].(string); ok && s != "" {
			tok = s
		}
	}
	return tok
}

// progressAcked is the acknowledged count of the replay's last progress line.
func progressAcked(p *walrelayProc) int64 {
	var n int64
	for _, m := range p.logLines() {
		if v, ok := m["acked"].(float64); ok {
			n = int64(v)
		}
	}
	return n
}

// TestRecoverAfterLostSlot: the slot is dropped while walrelay is down and
// writes go on; `walrelay replay --since-last-delivered` makes a new slot
// and re-publishes what the lost one had not delivered; walrelay then runs
// on the new slot. Every committed event arrives (lost = 0), in both
// delivery modes.
func TestRecoverAfterLostSlot(t *testing.T) {
	for _, mode := range []string{"at-least-once", "exactly-once"} {
		t.Run(mode, func(t *testing.T) { recoverAfterLostSlot(t, mode) })
	}
}

func recoverAfterLostSlot(t *testing.T, mode string) {
	env := requireEnv(t)
	rng := testRand(t)
	s := newScenario(t, env, "recover")
	delivery := []string{"--delivery", mode}
	s.readCommitted = mode == "exactly-once"
	args := s.runArgs(append(delivery, "--status-interval", "100ms")...)
	p := s.startArgsReady(args...)
	fw := newFaultWriter(t, s, env.pgDSN, newRandFrom(rng))
	// A recovery re-publishes rows: those a transaction deletes as it writes
	// them exist only in the WAL, and a lost slot loses them for good
	// (README, Replay and recovery). Here every row is kept.
	fw.deletePct = 0
	stop := fw.runSteady(faultSteady(t))
	time.Sleep(2 * time.Second)
	// walrelay has delivered (and, exactly-once, checkpointed) part of it.
	waitSlotLSN(t, env.pgDSN, s.name, currentLSN(t, env.pgDSN), time.Minute, p)
	time.Sleep(time.Second)
	p.kill9() // records may be in flight: the newest in Kafka need not be the last confirmed
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := dropSlot(ctx, t, env.pgDSN, s.name); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // writes go on without a slot: only the outbox table keeps them
	_, _, atLoss, _ := fw.stats()
	if mode == "exactly-once" {
		// The slot's checkpoint shows it was lost: run does not create it
		// again (which would hide the gap) and prints the recovery.
		code, _, stderr := s.cmdRun(time.Minute, args...)
		want := "walrelay replay --since-last-delivered --slot=" + s.name
		if code != 1 || !strings.Contains(stderr, `\"`+s.name+`\" does not exist, but its exactly-once checkpoint`) || !strings.Contains(stderr, want) ||
			!strings.Contains(stderr, "--delivery=exactly-once") || querySlotExists(t, env.pgDSN, s.name) {
			t.Fatalf("walrelay run after the loss: exit %d, want 1, the slot not created, and the recovery command %q", code, want)
		}
	}

	code, out, _ := s.cmdRun(5*time.Minute, append(s.commonArgs("replay", "--since-last-delivered", "--recovery-margin", "30s"), delivery...)...)
	if code != 0 || !strings.Contains(out, "start walrelay run") {
		t.Fatalf("recovery: exit %d, want 0 and the hand-over to walrelay run", code)
	}
	if !querySlotExists(t, env.pgDSN, s.name) {
		t.Fatal("the recovery made no new slot")
	}
	p = s.startArgsReady(args...)
	time.Sleep(2 * time.Second)
	if err := stop(); err != nil {
		t.Fatalf("workload: %v", err)
	}
	waitSlotLSN(t, env.pgDSN, s.name, currentLSN(t, env.pgDSN), 3*time.Minute, p)
	res := recoveryVerify(t, s, fw)
	t.Logf("recovery (%s): %d events committed (%d by the loss); %s", mode, res.committed, atLoss, res.summary("recover_"+mode))
	if res.lost != 0 || res.rolledBackDelivered != 0 || res.unknown != 0 {
		t.Fatalf("recovery after a lost slot: lost=%d rolled_back_delivered=%d unknown=%d", res.lost, res.rolledBackDelivered, res.unknown)
	}
	if res.committed <= atLoss {
		t.Fatal("no event was written after the recovery: the hand-over to the new slot was not exercised")
	}
}

func querySlotExists(t *testing.T, dsn, slot string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	si, err := querySlot(ctx, t, dsn, slot)
	if err != nil {
		t.Fatal(err)
	}
	return si.exists
}

// recoveryVerify counts, over the relay's and the replays' records, the
// committed events never delivered and anything delivered that was not
// committed. Duplicates are expected (the recovery's margin), and first
// deliveries may be out of order (a replayed event arrives after newer ones).
func recoveryVerify(t *testing.T, s *scenario, fw *faultWriter) *result {
	t.Helper()
	w := fw.workload
	committed, rolledBack := w.snapshot()
	res := &result{committed: len(committed)}
	byID := map[string]bool{}
	for _, ev := range committed {
		byID[ev.ID] = true
	}
	seen := map[string]int{}
	for _, topic := range aggregateTypes {
		for _, list := range consumeAllIsolation(t, s.env.kafka, s.name+"."+topic, nil, s.readCommitted) {
			for _, r := range list {
				res.delivered++
				id := header(r, "id")
				switch {
				case byID[id]:
					seen[id]++
				case rolledBack[id] != nil:
					res.rolledBackDelivered++
				default:
					res.unknown++
				}
			}
		}
	}
	for _, ev := range committed {
		if seen[ev.ID] == 0 {
			res.lost++
			res.problem("lost: %s (txn %d)", ev.ID, ev.Txn.Index)
		}
		res.duplicates += max(seen[ev.ID]-1, 0)
	}
	for _, e := range res.errs {
		t.Log("  " + e)
	}
	return res
}

// TestDLQRedrive: events dead-lettered while Kafka refused their topic (it
// collided with another) reach it once the collision is gone and the topic
// created: from their rows, or, for a row deleted meanwhile, from the stored
// record; a second redrive sends nothing.
func TestDLQRedrive(t *testing.T) {
	env := requireEnv(t)
	s := newScenario(t, env, "redrive")
	dlq := s.name + ".dlq"
	cl := newKafkaClient(t, env.kafka)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	colliding, target := s.name+".order_item", s.name+".order.item"
	if _, err := adm.CreateTopic(ctx, 3, -1, nil, colliding); err != nil {
		t.Fatal(err)
	}
	p := s.startReady("--dlq-topic", dlq)
	w := newWorkload(t, env, s.table, 10, testRand(t))
	w.aggs = []aggregate{{typ: "order.item", id: "oi-1"}, {typ: "order.item", id: "oi-2"}}
	var ids []string
	for range 4 {
		for _, ev := range w.mustWriteTxn(2, false).Events {
			ids = append(ids, ev.ID)
		}
	}
	waitSlotLSN(t, env.pgDSN, s.name, w.lastPostLSN(), 60*time.Second, p)
	dead := consumeAll(t, env.kafka, dlq, []string{dlq})[dlq]
	if len(dead) != len(ids) || header(dead[0], "walrelay.dlq.reason") != "topic_refused" {
		t.Fatalf("%d dead letters (reason %q), want %d topic_refused", len(dead), header(dead[0], "walrelay.dlq.reason"), len(ids))
	}
	// The cause goes: the colliding topic is deleted and the right one made.
	replaceTopic(ctx, t, adm, colliding, target)
	pgExec(t, env.pgDSN, "DELETE FROM "+faultQuote(s.table)+" WHERE id = $1", ids[0]) // this one from the stored record

	code, out, _ := s.cmdRun(time.Minute, s.commonArgs("dlq", "redrive", "--dlq-topic", dlq, "--dry-run")...)
	if code != 0 || strings.Count(out, target) < len(ids) {
		t.Fatalf("dry run: exit %d; want every dead letter listed for %s", code, target)
	}
	code, out, _ = s.cmdRun(2*time.Minute, s.commonArgs("dlq", "redrive", "--dlq-topic", dlq)...)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("sent %d", len(ids))) {
		t.Fatalf("redrive: exit %d, want 'sent %d'", code, len(ids))
	}
	got := consumeAll(t, env.kafka, target, []string{target})[target]
	byID := map[string]*kgo.Record{}
	for _, r := range dead {
		byID[header(r, "id")] = r
	}
	for _, r := range got {
		d := byID[header(r, "id")]
		if d == nil || !bytes.Equal(r.Key, d.Key) || !bytes.Equal(r.Value, d.Value) || header(r, hdrLSN) != header(d, hdrLSN) ||
			header(r, "traceparent") != header(d, "traceparent") || header(r, "walrelay.dlq.reason") != "" {
			t.Errorf("redriven %s differs from its dead letter, or keeps dead-letter headers: %v", header(r, "id"), r.Headers)
		}
	}
	if len(got) != len(ids) {
		t.Fatalf("%s holds %d records after the redrive, want %d", target, len(got), len(ids))
	}
	code, out, _ = s.cmdRun(time.Minute, s.commonArgs("dlq", "redrive", "--dlq-topic", dlq)...)
	if code != 0 || !strings.Contains(out, "sent 0") {
		t.Fatalf("second redrive: exit %d, want 0 and 'sent 0'", code)
	}
	if n := sumEndOffsets(t, env.kafka, target); n != int64(len(ids)) {
		t.Fatalf("%s holds %d records after the second redrive, want still %d", target, n, len(ids))
	}
}

// TestPruneKeepsUnconfirmed: with the slot behind, prune keeps the rows whose
// transactions the slot has not confirmed, however old their time column,
// says so, and deletes them only with --force.
func TestPruneKeepsUnconfirmed(t *testing.T) {
	env := requireEnv(t)
	s := newScenario(t, env, "pruneg")
	p := s.startReady()
	old := func(n int) {
		for range n {
			pgExec(t, env.pgDSN, "INSERT INTO "+faultQuote(s.table)+
				" (aggregate_type, aggregate_id, event_type, payload, created_at) VALUES ('order', 'o-1', 'e', '{}', now() - interval '3 hours')")
		}
	}
	old(5) // delivered and confirmed
	count := func(sql string) int {
		var n int
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := pgPool(t, env.pgDSN).scan(ctx, sql, nil, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// The slot's catalog_xmin passes the rows once a running-transactions
	// record after them (a checkpoint writes one) is confirmed.
	testwait.Eventually(t, 90*time.Second, "the slot's catalog_xmin to pass the delivered rows", func() bool {
		pgExec(t, env.pgDSN, "CHECKPOINT")
		time.Sleep(500 * time.Millisecond)
		return count(fmt.Sprintf(`SELECT count(*) FROM %s WHERE age(xmin) > (SELECT age(catalog_xmin) FROM pg_replication_slots WHERE slot_name = '%s')`,
			faultQuote(s.table), s.name)) == 5
	})
	p.sigterm()
	p.waitExit(30 * time.Second)
	old(4) // written while walrelay is down: the slot has not confirmed them

	pruneArgs := []string{"prune", "--postgres-dsn", env.pgDSN, "--kafka-brokers", env.kafka, "--slot", s.name, "--table", s.table, "--older-than", "1h"}
	code, out, _ := s.cmdRun(time.Minute, pruneArgs...)
	if code != 0 || !strings.Contains(out, "pruned 5 rows") || !strings.Contains(out, "kept 4 rows") {
		t.Fatalf("prune with the slot behind: exit %d; want 5 pruned and 4 kept", code)
	}
	if n := count("SELECT count(*) FROM " + faultQuote(s.table)); n != 4 {
		t.Fatalf("%d rows left after prune, want the 4 unconfirmed", n)
	}
	code, out, _ = s.cmdRun(time.Minute, append(pruneArgs, "--force")...)
	if code != 0 || !strings.Contains(out, "pruned 4 rows") {
		t.Fatalf("prune --force: exit %d; want the 4 kept rows pruned", code)
	}
}

// replaceTopic deletes the topic colliding (whose name collides with
// target's for Kafka), waits until it is gone and creates target with 3
// partitions: the cause of topic_refused dead letters goes.
func replaceTopic(ctx context.Context, t *testing.T, adm *kadm.Client, colliding, target string) {
	t.Helper()
	if _, err := adm.DeleteTopics(ctx, colliding); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 30*time.Second, "the colliding topic's deletion", func() bool {
		td, err := adm.ListTopics(ctx)
		return err == nil && !td.Has(colliding)
	})
	if _, err := adm.CreateTopic(ctx, 3, -1, nil, target); err != nil {
		t.Fatal(err)
	}
}
