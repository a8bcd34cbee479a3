package e2e

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walrelay/walrelay/internal/testwait"
)

// The cutover tests run the REAL Debezium (Kafka Connect standalone 4.3.1, Debezium's
// Postgres connector 3.7.0.Final and its outbox EventRouter, started by
// test/env/debezium.sh) against the test Postgres and broker, writing to the same topics
// walrelay writes. Writers commit continuously while Debezium, throttled by a Kafka client
// quota, runs behind. They prove:
//   - cutover/gapless: `walrelay cutover` + stop Debezium + `walrelay run` + `cutover
//     --drop-from-slot` delivers every committed event at least once (union of both
//     producers), with the right ids, keys, values, headers and per-aggregate order;
//   - cutover/old-readme: the former README procedure (create walrelay's slot, stop
//     Debezium, start walrelay, drop Debezium's slot) loses events in the same setup;
//   - cutover/idle-all-tables: on an idle database with Debezium's default FOR ALL TABLES
//     publication, cutover finishes thanks to its nudge message (and times out without
//     it), and walrelay streams from that publication, counting other tables' changes as
//     ignored.

// cutoverFlushMS is Kafka Connect's offset.flush.interval.ms in these tests: Debezium
// confirms its slot at most this often.
const cutoverFlushMS = 5000

// dbzQuotaBytes throttles Debezium's producer (client quota, bytes/s) so that it falls
// behind the writers: about 150 of its records (~400 bytes each) a second.
const dbzQuotaBytes = 60000

// ---------------------------------------------------------------------------------------
// Kafka Connect worker

type connectWorker struct {
	t    *testing.T
	env  *testEnv
	rest string
}

// startConnect starts the Connect worker (debezium.sh start) for the test and stops it at
// the end.
func startConnect(t *testing.T, env *testEnv) *connectWorker {
	t.Helper()
	extra := []string{fmt.Sprintf("WALRELAY_TEST_CONNECT_FLUSH_MS=%d", cutoverFlushMS)}
	start := time.Now()
	if err := runEnvScript(t, env, 10*time.Minute, extra, "debezium.sh", "start"); err != nil {
		t.Fatalf("start Kafka Connect with Debezium: %v", err)
	}
	t.Logf("Kafka Connect with Debezium up in %s", time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		if err := runEnvScript(t, env, 2*time.Minute, nil, "debezium.sh", "stop"); err != nil {
			t.Errorf("stop Kafka Connect: %v", err)
		}
	})
	out, err := exec.Command("bash", filepath.Join(env.envDir, "debezium.sh"), "env").Output()
	if err != nil {
		t.Fatalf("debezium.sh env: %v", err)
	}
	w := &connectWorker{t: t, env: env}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "export WALRELAY_TEST_CONNECT='"); ok {
			w.rest = strings.TrimSuffix(v, "'")
		}
	}
	if w.rest == "" {
		t.Fatalf("debezium.sh env printed no WALRELAY_TEST_CONNECT:\n%s", out)
	}
	return w
}

func (w *connectWorker) call(method, path string, body any) (int, []byte) {
	w.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			w.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, w.rest+path, rd)
	if err != nil {
		w.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		w.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// connectorState is the connector's and its first task's state ("" when absent).
func (w *connectWorker) connectorState(name string) (conn, task, trace string) {
	code, b := w.call("GET", "/connectors/"+name+"/status", nil)
	if code != http.StatusOK {
		return "", "", string(b)
	}
	var st struct {
		Connector struct{ State string } `json:"connector"`
		Tasks     []struct {
			State string `json:"state"`
			Trace string `json:"trace"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		w.t.Fatalf("connector status %s: %v", b, err)
	}
	if len(st.Tasks) > 0 {
		task, trace = st.Tasks[0].State, st.Tasks[0].Trace
	}
	return st.Connector.State, task, trace
}

// createConnector creates a Debezium connector and waits until it and its task run and
// hold the slot.
func (w *connectWorker) createConnector(name, slot string, cfg map[string]string) {
	w.t.Helper()
	start := time.Now()
	code, b := w.call("POST", "/connectors", map[string]any{"name": name, "config": cfg})
	if code != http.StatusCreated {
		w.t.Fatalf("create connector %s: HTTP %d %s", name, code, b)
	}
	w.t.Cleanup(func() { w.call("DELETE", "/connectors/"+name, nil) })
	deadline := time.Now().Add(3 * time.Minute)
	for {
		c, task, trace := w.connectorState(name)
		if c == "FAILED" || task == "FAILED" {
			w.t.Fatalf("connector %s failed: %s", name, trace)
		}
		if c == "RUNNING" && task == "RUNNING" {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			si, err := querySlot(ctx, w.t, w.env.pgDSN, slot)
			cancel()
			if err == nil && si.activePID != 0 {
				w.t.Logf("connector %s running, slot %s held, in %s", name, slot, time.Since(start).Round(time.Millisecond))
				return
			}
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("connector %s not running with slot %s after 3m (state %s/%s %s)", name, slot, c, task, trace)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// stopConnector stops Debezium (PUT /connectors/<name>/stop: tasks shut down gracefully,
// offsets are committed) and waits until its slot is released.
func (w *connectWorker) stopConnector(name, slot string) time.Duration {
	w.t.Helper()
	start := time.Now()
	if code, b := w.call("PUT", "/connectors/"+name+"/stop", nil); code/100 != 2 {
		w.t.Fatalf("stop connector %s: HTTP %d %s", name, code, b)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		c, _, _ := w.connectorState(name)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		si, err := querySlot(ctx, w.t, w.env.pgDSN, slot)
		cancel()
		if c == "STOPPED" && err == nil && si.activePID == 0 {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("connector %s did not stop within 2m (state %s, slot %+v, err %v)", name, c, si, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ---------------------------------------------------------------------------------------
// Scenario

type cutEvent struct {
	id, aggType, aggID, typ string
	seq                     int // position within its aggregate (commit order)
	begin, post             lsn // WAL insert position after BEGIN, WAL position after COMMIT
}

type cutScenario struct {
	t       *testing.T
	env     *testEnv
	cw      *connectWorker
	name    string // e2e_cut<short>_<hex>: table, walrelay slot and publication, connector
	table   string
	dbzSlot string
	dbzPub  string
	prefix  string // topic prefix, "<name>."
	logDir  string

	mu     sync.Mutex
	events []*cutEvent
	seq    map[string]int // next position per aggregate; each writer owns its aggregates
}

func newCutScenario(t *testing.T, env *testEnv, cw *connectWorker, short string) *cutScenario {
	t.Helper()
	run := make([]byte, 3)
	_, _ = crand.Read(run)
	name := "e2e_cut" + short + "_" + hex.EncodeToString(run)
	s := &cutScenario{t: t, env: env, cw: cw, name: name, table: "public." + name, dbzSlot: name + "_dbz",
		dbzPub: name + "_dbz", prefix: name + ".", seq: map[string]int{}, logDir: filepath.Join(env.dir, "e2e-logs", name)}
	if err := os.MkdirAll(s.logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Debezium's documented outbox table.
	pgExec(t, env.pgDSN, `CREATE TABLE `+qtable(s.table)+` (
		id            uuid         PRIMARY KEY,
		aggregatetype varchar(255) NOT NULL,
		aggregateid   varchar(255) NOT NULL,
		type          varchar(255) NOT NULL,
		payload       jsonb)`)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		for _, slot := range []string{s.name, s.dbzSlot} {
			if err := dropSlot(ctx, t, env.pgDSN, slot); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
		p := pgPool(t, env.pgDSN)
		for _, pub := range []string{s.name, s.dbzPub} {
			_ = p.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{pub}.Sanitize())
		}
		if t.Failed() {
			t.Logf("kept table %s, topics %s* and logs in %s for inspection", s.table, s.prefix, s.logDir)
			return
		}
		_ = p.Exec(ctx, "DROP TABLE IF EXISTS "+qtable(s.table))
		deleteTopics(ctx, t, env.kafka, s.prefix)
		_ = os.RemoveAll(s.logDir)
	})
	return s
}

// connectorConfig is Debezium's outbox setup writing to walrelay's topics: route
// outbox.event.<aggregatetype> (Debezium's default, under the scenario's prefix), key
// aggregateid, value the payload, header id, plus event_type and aggregate_type headers as
// walrelay writes them. Debezium's producer gets a small buffer and its internal queue is
// small, so a throttled producer makes it stop reading its slot (a real backlog).
func (s *cutScenario) connectorConfig(extra map[string]string) map[string]string {
	u := mustParseDSN(s.t, s.env.pgDSN)
	cfg := map[string]string{
		"connector.class":                           "io.debezium.connector.postgresql.PostgresConnector",
		"tasks.max":                                 "1",
		"plugin.name":                               "pgoutput",
		"database.hostname":                         u.host,
		"database.port":                             u.port,
		"database.user":                             u.user,
		"database.password":                         u.password,
		"database.dbname":                           u.dbname,
		"topic.prefix":                              s.name + "_dbz",
		"slot.name":                                 s.dbzSlot,
		"publication.name":                          s.dbzPub,
		"publication.autocreate.mode":               "filtered",
		"table.include.list":                        s.table,
		"snapshot.mode":                             "no_data",
		"heartbeat.interval.ms":                     "1000",
		"message.prefix.exclude.list":               "walrelay\\.cutover",
		"max.queue.size":                            "64",
		"max.batch.size":                            "16",
		"producer.override.buffer.memory":           "65536",
		"producer.override.batch.size":              "16384",
		"transforms":                                "outbox",
		"transforms.outbox.type":                    "io.debezium.transforms.outbox.EventRouter",
		"transforms.outbox.route.topic.replacement": s.prefix + "outbox.event.${routedByValue}",
		"transforms.outbox.table.fields.additional.placement": "type:header:event_type,aggregatetype:header:aggregate_type",
	}
	maps.Copy(cfg, extra)
	return cfg
}

// throttleDebezium sets a produce quota on the connector's producer client id.
func (s *cutScenario) throttleDebezium(bytesPerSec float64) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := newKafkaClient(s.t, s.env.kafka)
	defer cl.Close()
	id := "connector-producer-" + s.name + "-0"
	op := kadm.AlterClientQuotaOp{Key: "producer_byte_rate", Value: bytesPerSec}
	if bytesPerSec == 0 {
		op = kadm.AlterClientQuotaOp{Key: "producer_byte_rate", Remove: true}
	}
	res, err := kadm.NewClient(cl).AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{{
		Entity: kadm.ClientQuotaEntity{{Type: "client-id", Name: &id}},
		Ops:    []kadm.AlterClientQuotaOp{op},
	}})
	if err != nil {
		s.t.Fatalf("alter client quota of %s: %v", id, err)
	}
	for _, r := range res {
		if r.Err != nil {
			s.t.Fatalf("alter client quota of %s: %v", id, r.Err)
		}
	}
	if bytesPerSec > 0 {
		s.t.Cleanup(func() { s.throttleDebezium(0) })
	}
}

// writer commits transactions of 1-3 events on its own aggregates (so its commit order
// is each aggregate's order) until stop is closed; pace() is the pause between two.
func (s *cutScenario) writer(ctx context.Context, n int, pace func() time.Duration, stop <-chan struct{}) error {
	conn, err := pgx.Connect(ctx, s.env.pgDSN)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	types := []string{"Order", "Customer"}
	for i := 0; ; i++ {
		select {
		case <-stop:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		r, err := multiResult(ctx, conn, "BEGIN; SELECT pg_current_wal_insert_lsn()::text")
		if err != nil {
			return err
		}
		begin, err := parseLSN(r[0])
		if err != nil {
			return err
		}
		var evs []*cutEvent
		for k := range 1 + i%3 {
			typ := types[(i+k)%2]
			agg := fmt.Sprintf("%s-w%d-%d", strings.ToLower(typ[:1]), n, (i*7+k)%13)
			s.mu.Lock()
			ev := &cutEvent{id: newUUID(), aggType: typ, aggID: agg, typ: typ + "Changed", seq: s.seq[agg], begin: begin}
			s.seq[agg]++
			s.mu.Unlock()
			payload := fmt.Sprintf(`{"writer": %d, "txn": %d, "seq": %d, "aggregate": %q, "note": "caf\u00e9 \"q\""}`, n, i, ev.seq, agg)
			if _, err := conn.Exec(ctx, `INSERT INTO `+qtable(s.table)+` (id, aggregatetype, aggregateid, type, payload)
				VALUES ($1::uuid, $2, $3, $4, $5::jsonb)`, ev.id, ev.aggType, ev.aggID, ev.typ, payload); err != nil {
				return err
			}
			evs = append(evs, ev)
		}
		r, err = multiResult(ctx, conn, "COMMIT; SELECT pg_current_wal_lsn()::text")
		if err != nil {
			return err
		}
		post, err := parseLSN(r[0])
		if err != nil {
			return err
		}
		s.mu.Lock()
		for _, ev := range evs {
			ev.post = post
			s.events = append(s.events, ev)
		}
		s.mu.Unlock()
		time.Sleep(pace())
	}
}

// writers runs k writers; stopAll stops them and returns their first error.
func (s *cutScenario) writers(k int, pace func() time.Duration) (stopAll func() error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	stop := make(chan struct{})
	errs := make(chan error, k)
	for n := range k {
		go func() { errs <- s.writer(ctx, n, pace, stop) }()
	}
	return func() error {
		close(stop)
		var first error
		for range k {
			if err := <-errs; err != nil && first == nil {
				first = err
			}
		}
		cancel()
		return first
	}
}

func (s *cutScenario) committed() []*cutEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events)
}

func (s *cutScenario) lastPost() lsn {
	var m lsn
	for _, ev := range s.committed() {
		m = max(m, ev.post)
	}
	return m
}

func (s *cutScenario) cutoverArgs(extra ...string) []string {
	return append([]string{"cutover", "--postgres-dsn", s.env.pgDSN, "--slot", s.name, "--publication", s.name,
		"--table", s.table, "--from-slot", s.dbzSlot, "--poll-interval", "250ms"}, extra...)
}

// startWalrelay starts walrelay run on the scenario's slot with the Debezium column preset
// and Debezium's topic naming.
func (s *cutScenario) startWalrelay(publication string, extra ...string) *walrelayProc {
	s.t.Helper()
	return s.startWalrelayOn(s.name, publication, extra...)
}

func (s *cutScenario) startWalrelayOn(slot, publication string, extra ...string) *walrelayProc {
	s.t.Helper()
	args := append([]string{"run", "--postgres-dsn", s.env.pgDSN, "--kafka-brokers", s.env.kafka,
		"--slot", slot, "--publication", publication, "--table", s.table, "--columns", "debezium",
		"--topic", s.prefix + "outbox.event.{aggregate_type}", "--metrics-addr", "127.0.0.1:0"}, extra...)
	p := startWalrelay(s.t, s.name, filepath.Join(s.logDir, "walrelay.log"), args, nil)
	p.waitReady(90 * time.Second)
	waitSlotStreaming(s.t, s.env.pgDSN, slot, 90*time.Second, p)
	return p
}

// slotConfirmed reads a slot's confirmed_flush_lsn (0 when missing).
func (s *cutScenario) slotConfirmed(slot string) (lsn, bool) {
	si, ok := s.slotInfo(slot)
	return si.confirmed, ok
}

// slotInfo reads a slot's row; false when it is missing.
func (s *cutScenario) slotInfo(slot string) (slotInfo, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	si, err := querySlot(ctx, s.t, s.env.pgDSN, slot)
	if err != nil {
		s.t.Fatalf("slot %s: %v", slot, err)
	}
	return si, si.exists
}

// delivered counts the records in the scenario's topics.
func (s *cutScenario) delivered() int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topics, err := topicsWithPrefix(ctx, s.t, s.env.kafka, s.prefix)
	if err != nil || len(topics) == 0 {
		return 0
	}
	return sumEndOffsets(s.t, s.env.kafka, s.prefix)
}

// ---------------------------------------------------------------------------------------
// Verification: the union of Debezium's and walrelay's records.

type cutResult struct {
	committed, delivered, byDebezium, byWalrelay int
	lost, duplicates, orderViolations            int
	fieldErrors, unknown                         int
	lostEvents                                   []*cutEvent
	walrelayBeforeStart                          int // walrelay records of transactions that ended before its start
	errs                                         []string
}

func (r *cutResult) problem(format string, args ...any) {
	if len(r.errs) < 25 {
		r.errs = append(r.errs, fmt.Sprintf(format, args...))
	}
}

func (r *cutResult) summary(scenario string, extra ...string) string {
	s := fmt.Sprintf("scenario=%s committed=%d delivered=%d by_debezium=%d by_walrelay=%d lost=%d duplicates=%d order_violations=%d unknown=%d field_errors=%d",
		scenario, r.committed, r.delivered, r.byDebezium, r.byWalrelay, r.lost, r.duplicates, r.orderViolations, r.unknown, r.fieldErrors)
	return strings.Join(append([]string{s}, extra...), " ")
}

// verifyCutover reads every record of the scenario's topics (both producers) and checks it
// against the committed events: topic, key, value (payload::text byte for byte),
// id/event_type/aggregate_type headers, one partition per aggregate, and first deliveries
// in commit order per aggregate. start is walrelay's start LSN.
func (s *cutScenario) verifyCutover(start lsn) *cutResult {
	t := s.t
	t.Helper()
	committed := s.committed()
	byID := map[string]*cutEvent{}
	topicSet := map[string]bool{}
	for _, ev := range committed {
		byID[ev.id] = ev
		topicSet[s.prefix+"outbox.event."+ev.aggType] = true
	}
	payloads := payloadTexts(t, s.env.pgDSN, s.table, "id")
	recs := consumeAll(t, s.env.kafka, s.prefix, slices.Sorted(maps.Keys(topicSet)))

	res := &cutResult{committed: len(committed)}
	seen := map[string]int{}
	lastSeq := map[string]int{}
	aggPartition := map[string]string{}
	for _, topic := range slices.Sorted(maps.Keys(recs)) {
		list := slices.Clone(recs[topic])
		sort.SliceStable(list, func(i, j int) bool {
			if list[i].Partition != list[j].Partition {
				return list[i].Partition < list[j].Partition
			}
			return list[i].Offset < list[j].Offset
		})
		for _, rec := range list {
			res.delivered++
			fromWalrelay := header(rec, "walrelay.lsn") != ""
			if fromWalrelay {
				res.byWalrelay++
			} else {
				res.byDebezium++
			}
			id := header(rec, "id")
			ev, ok := byID[id]
			if !ok {
				res.unknown++
				res.problem("unknown record at %s/%d@%d: key=%q id=%q value=%q", rec.Topic, rec.Partition, rec.Offset, rec.Key, id, rec.Value)
				continue
			}
			checkCutRecord(res, s, rec, ev, payloads[id])
			if fromWalrelay && ev.post <= start {
				res.walrelayBeforeStart++
				res.problem("walrelay delivered event %s of a transaction that ended at or before its start %s (post %s)", id, start, ev.post)
			}
			tp := fmt.Sprintf("%s/%d", rec.Topic, rec.Partition)
			if aggPartition[ev.aggID] == "" {
				aggPartition[ev.aggID] = tp
			} else if aggPartition[ev.aggID] != tp {
				res.fieldErrors++
				res.problem("aggregate %s split across partitions %s and %s", ev.aggID, aggPartition[ev.aggID], tp)
			}
			seen[id]++
			if seen[id] > 1 {
				res.duplicates++
				continue
			}
			if last, ok := lastSeq[ev.aggID]; ok && ev.seq < last {
				res.orderViolations++
				res.problem("order: aggregate %s: seq %d delivered after seq %d (%s/%d@%d)", ev.aggID, ev.seq, last, rec.Topic, rec.Partition, rec.Offset)
			}
			lastSeq[ev.aggID] = max(lastSeq[ev.aggID], ev.seq)
		}
	}
	for _, ev := range committed {
		if seen[ev.id] == 0 {
			res.lost++
			res.lostEvents = append(res.lostEvents, ev)
			res.problem("lost: event %s (aggregate %s seq %d, txn began %s, committed by %s; walrelay start %s)", ev.id, ev.aggID, ev.seq, ev.begin, ev.post, start)
		}
	}
	for _, e := range res.errs {
		t.Log("  " + e)
	}
	return res
}

func checkCutRecord(res *cutResult, s *cutScenario, rec *kgo.Record, ev *cutEvent, payload *string) {
	bad := func(format string, args ...any) {
		res.fieldErrors++
		res.problem("event %s at %s/%d@%d: %s", ev.id, rec.Topic, rec.Partition, rec.Offset, fmt.Sprintf(format, args...))
	}
	if want := s.prefix + "outbox.event." + ev.aggType; rec.Topic != want {
		bad("topic %q, want %q", rec.Topic, want)
	}
	if string(rec.Key) != ev.aggID {
		bad("key %q, want %q", rec.Key, ev.aggID)
	}
	switch {
	case payload == nil:
		bad("row missing or payload NULL")
	case string(rec.Value) != *payload:
		bad("value %q, want payload::text %q", rec.Value, *payload)
	}
	for k, v := range map[string]string{"id": ev.id, "event_type": ev.typ, "aggregate_type": ev.aggType} {
		if got := header(rec, k); got != v {
			bad("header %q = %q, want %q", k, got, v)
		}
	}
}

// ---------------------------------------------------------------------------------------
// Tests

// TestCutoverFromDebezium runs the three cutover scenarios against one Kafka Connect
// worker (its JVM takes 10-30 s to start here).
func TestCutoverFromDebezium(t *testing.T) {
	env := requireEnv(t)
	cw := startConnect(t, env)
	t.Run("gapless", func(t *testing.T) { testCutoverGapless(t, env, cw) })
	t.Run("old-readme-loses", func(t *testing.T) { testCutoverOldProcedureLoses(t, env, cw) })
	t.Run("idle-all-tables", func(t *testing.T) { testCutoverIdleAllTables(t, env, cw) })
	t.Run("on-debezium-slot", func(t *testing.T) { testCutoverOnDebeziumSlot(t, env, cw) })
}

// testCutoverOnDebeziumSlot: the alternative to the cutover. Debezium (plugin.name=pgoutput)
// is stopped with a backlog, and walrelay then streams from Debezium's own slot and
// publication: it resumes at the slot's confirmed position, so nothing is lost and only
// what Debezium delivered but had not confirmed arrives twice.
func testCutoverOnDebeziumSlot(t *testing.T, env *testEnv, cw *connectWorker) {
	s, stopWriters, _ := busyStart(t, env, cw, "own")
	committedAtStop, deliveredAtStop := s.backlog()
	stopTook := cw.stopConnector(s.name, s.dbzSlot)
	dbzFinal, _ := s.slotConfirmed(s.dbzSlot)
	proc := s.startWalrelayOn(s.dbzSlot, s.dbzPub, "--create-slot=false", "--create-publication=false")
	time.Sleep(2 * time.Second)
	if err := stopWriters(); err != nil {
		t.Fatalf("writer: %v", err)
	}
	waitSlotLSN(t, env.pgDSN, s.dbzSlot, s.lastPost(), 90*time.Second, proc)
	r := s.verifyCutover(dbzFinal)
	t.Log(r.summary("cutover/on-debezium-slot", fmt.Sprintf("backlog_at_stop=%d debezium_stop=%s debezium_final=%s",
		int64(committedAtStop)-deliveredAtStop, stopTook.Round(time.Millisecond), dbzFinal)))
	if r.lost != 0 || r.orderViolations != 0 || r.unknown != 0 || r.fieldErrors != 0 || r.walrelayBeforeStart != 0 {
		t.Errorf("walrelay on Debezium's slot violated the contract: lost=%d order_violations=%d unknown=%d field_errors=%d walrelay_before_start=%d",
			r.lost, r.orderViolations, r.unknown, r.fieldErrors, r.walrelayBeforeStart)
	}
	if r.byDebezium == 0 || r.byWalrelay == 0 {
		t.Errorf("both producers must have delivered (debezium %d, walrelay %d)", r.byDebezium, r.byWalrelay)
	}
}

// busyStart creates the scenario with a throttled Debezium running behind three writers
// that commit continuously (~300 events/s); it returns once Debezium has a backlog.
func busyStart(t *testing.T, env *testEnv, cw *connectWorker, short string) (*cutScenario, func() error, *pace) {
	s := newCutScenario(t, env, cw, short)
	s.throttleDebezium(dbzQuotaBytes)
	cw.createConnector(s.name, s.dbzSlot, s.connectorConfig(nil))
	p := &pace{d: 10 * time.Millisecond}
	stop := s.writers(3, p.get)
	time.Sleep(6 * time.Second)
	return s, stop, p
}

// pace is the writers' pause between two transactions, changeable while they run.
type pace struct {
	mu sync.Mutex
	d  time.Duration
}

func (p *pace) get() time.Duration  { p.mu.Lock(); defer p.mu.Unlock(); return p.d }
func (p *pace) set(d time.Duration) { p.mu.Lock(); p.d = d; p.mu.Unlock() }

// backlog is how many of the events committed so far Debezium has not delivered yet.
func (s *cutScenario) backlog() (committed int, delivered int64) {
	return len(s.committed()), s.delivered()
}

func testCutoverGapless(t *testing.T, env *testEnv, cw *connectWorker) {
	s, stopWriters, p := busyStart(t, env, cw, "gap")

	// 1. walrelay cutover, in the background: it creates the slot, then waits.
	cutStart := time.Now()
	done := s.walrelayAsync(3*time.Minute, s.cutoverArgs("--timeout", "150s")...)
	var start lsn
	testwait.Eventually(t, 90*time.Second, "walrelay cutover to create its slot", func() bool {
		l, ok := s.slotConfirmed(s.name)
		start = l
		return ok && l != 0
	})
	committedAtStart, deliveredAtStart := s.backlog()
	dbzAtStart, _ := s.slotConfirmed(s.dbzSlot)
	t.Logf("walrelay slot created at %s; Debezium's slot confirmed %s; %d events committed, %d delivered by Debezium",
		start, dbzAtStart, committedAtStart, deliveredAtStart)
	if int64(committedAtStart)-deliveredAtStart < 100 {
		t.Fatalf("Debezium is not behind (%d committed, %d delivered): the scenario proves nothing", committedAtStart, deliveredAtStart)
	}
	// Writers go on, slower than throttled Debezium, so that it can catch up.
	p.set(100 * time.Millisecond)

	var res cutExit
	select {
	case res = <-done:
	case <-time.After(4 * time.Minute):
		t.Fatal("walrelay cutover did not return")
	}
	waited := time.Since(cutStart)
	if res.code != 0 || !strings.Contains(res.out, "safe to stop Debezium") {
		t.Fatalf("walrelay cutover: exit %d, want 0 with \"safe to stop Debezium\"", res.code)
	}
	if !strings.Contains(res.out, "bytes to go") {
		t.Errorf("walrelay cutover printed no progress while waiting")
	}
	// The next step it prints starts walrelay on this Debezium-layout table.
	if want := "--table " + s.table + " --columns debezium --create-slot=false"; !strings.Contains(res.out, want) {
		t.Errorf("walrelay cutover's next steps lack %q", want)
	}
	dbzConfirmed, _ := s.slotConfirmed(s.dbzSlot)
	if dbzConfirmed < start {
		t.Fatalf("cutover said safe, but Debezium's slot is at %s < walrelay start %s", dbzConfirmed, start)
	}

	// 2. Stop Debezium while the writers go on; 3. start walrelay on its slot.
	stopTook := cw.stopConnector(s.name, s.dbzSlot)
	dbzFinal, _ := s.slotConfirmed(s.dbzSlot)
	proc := s.startWalrelay(s.name, "--create-slot=false")
	time.Sleep(2 * time.Second)
	if err := stopWriters(); err != nil {
		t.Fatalf("writer: %v", err)
	}
	waitSlotLSN(t, env.pgDSN, s.name, s.lastPost(), 90*time.Second, proc)

	// 4. Drop Debezium's slot through the second check.
	if code, out := runCommand(s.t, time.Minute, s.cutoverArgs("--drop-from-slot", "--start-lsn", start.String())...); code != 0 || !strings.Contains(out, "dropped slot") {
		t.Fatalf("walrelay cutover --drop-from-slot: exit %d", code)
	}
	if _, ok := s.slotConfirmed(s.dbzSlot); ok {
		t.Fatalf("Debezium's slot %s still exists after --drop-from-slot", s.dbzSlot)
	}

	r := s.verifyCutover(start)
	t.Log(r.summary("cutover/gapless", fmt.Sprintf("backlog_at_start=%d cutover_wait=%s debezium_stop=%s debezium_final=%s walrelay_start=%s",
		int64(committedAtStart)-deliveredAtStart, waited.Round(time.Millisecond), stopTook.Round(time.Millisecond), dbzFinal, start)))
	if r.lost != 0 || r.orderViolations != 0 || r.unknown != 0 || r.fieldErrors != 0 || r.walrelayBeforeStart != 0 {
		t.Errorf("cutover violated the contract: lost=%d order_violations=%d unknown=%d field_errors=%d walrelay_before_start=%d",
			r.lost, r.orderViolations, r.unknown, r.fieldErrors, r.walrelayBeforeStart)
	}
	if r.byDebezium == 0 || r.byWalrelay == 0 {
		t.Errorf("both producers must have delivered (debezium %d, walrelay %d)", r.byDebezium, r.byWalrelay)
	}
}

// testCutoverOldProcedureLoses runs the README's former procedure in the same setup and
// shows that it loses the events Debezium had not delivered when it was stopped.
func testCutoverOldProcedureLoses(t *testing.T, env *testEnv, cw *connectWorker) {
	s, stopWriters, _ := busyStart(t, env, cw, "old")

	// 1. "Create walrelay's slot while Debezium still runs" (publication first, as walrelay
	// run --create-slot does).
	pgExec(t, env.pgDSN, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert', publish_via_partition_root = true)",
		pgx.Identifier{s.name}.Sanitize(), qtable(s.table)))
	var startText string
	if err := pgPool(t, env.pgDSN).scan(context.Background(), "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')",
		[]any{s.name}, &startText); err != nil {
		t.Fatalf("create slot: %v", err)
	}
	start, err := parseLSN(startText)
	if err != nil {
		t.Fatal(err)
	}
	committedAtStart, deliveredAtStart := s.backlog()
	// 2. Stop Debezium; 3. start walrelay; 4. drop Debezium's slot.
	stopTook := cw.stopConnector(s.name, s.dbzSlot)
	dbzFinal, _ := s.slotConfirmed(s.dbzSlot)
	proc := s.startWalrelay(s.name, "--create-slot=false")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	if err := dropSlot(ctx, t, env.pgDSN, s.dbzSlot); err != nil {
		t.Fatalf("drop Debezium's slot: %v", err)
	}
	cancel()
	time.Sleep(2 * time.Second)
	if err := stopWriters(); err != nil {
		t.Fatalf("writer: %v", err)
	}
	waitSlotLSN(t, env.pgDSN, s.name, s.lastPost(), 90*time.Second, proc)

	r := s.verifyCutover(start)
	t.Log(r.summary("cutover/old-readme", fmt.Sprintf("backlog_at_start=%d debezium_stop=%s debezium_final=%s walrelay_start=%s",
		int64(committedAtStart)-deliveredAtStart, stopTook.Round(time.Millisecond), dbzFinal, start)))
	if r.lost == 0 {
		t.Errorf("the old procedure lost nothing (backlog at walrelay's start %d): the test no longer shows the gap", int64(committedAtStart)-deliveredAtStart)
	}
	for _, ev := range r.lostEvents {
		if ev.begin >= start {
			t.Errorf("lost event %s began at %s, after walrelay's start %s: walrelay itself lost it", ev.id, ev.begin, start)
		}
	}
	if r.orderViolations != 0 || r.unknown != 0 || r.fieldErrors != 0 || r.walrelayBeforeStart != 0 {
		t.Errorf("order_violations=%d unknown=%d field_errors=%d walrelay_before_start=%d", r.orderViolations, r.unknown, r.fieldErrors, r.walrelayBeforeStart)
	}
}

// testCutoverIdleAllTables: Debezium with its default publication (FOR ALL TABLES),
// heartbeats on and walrelay's nudge prefix excluded, on a database that is idle when the
// cutover starts.
func testCutoverIdleAllTables(t *testing.T, env *testEnv, cw *connectWorker) {
	s := newCutScenario(t, env, cw, "idle")
	other := "public." + s.name + "_other"
	pgExec(t, env.pgDSN, "CREATE TABLE "+qtable(other)+" (n int PRIMARY KEY, note text)")
	t.Cleanup(func() { pgExec(t, env.pgDSN, "DROP TABLE IF EXISTS "+qtable(other)) })
	cw.createConnector(s.name, s.dbzSlot, s.connectorConfig(map[string]string{"publication.autocreate.mode": "all_tables"}))
	var allTables bool
	if err := pgPool(t, env.pgDSN).scan(context.Background(), "SELECT puballtables FROM pg_publication WHERE pubname = $1",
		[]any{s.dbzPub}, &allTables); err != nil || !allTables {
		t.Fatalf("Debezium's publication %s: FOR ALL TABLES = %v (%v)", s.dbzPub, allTables, err)
	}

	stop := s.writers(2, func() time.Duration { return 20 * time.Millisecond })
	time.Sleep(2 * time.Second)
	if err := stop(); err != nil {
		t.Fatalf("writer: %v", err)
	}
	pgExec(t, env.pgDSN, "INSERT INTO "+qtable(other)+" SELECT g, 'before' FROM generate_series(1, 10) g")
	// Idle from here: Debezium delivers what it has and confirms it, then nothing moves.
	n := len(s.committed())
	for deadline := time.Now().Add(2 * time.Minute); s.delivered() < int64(n); {
		if time.Now().After(deadline) {
			t.Fatalf("Debezium delivered %d of %d events within 2m", s.delivered(), n)
		}
		time.Sleep(500 * time.Millisecond)
	}
	time.Sleep(2 * cutoverFlushMS * time.Millisecond)

	// Without the nudge the cutover cannot finish on an idle database. Before Postgres 15,
	// pgoutput sends a transaction that changes no published row (autovacuum's ANALYZE of
	// any table, for one) as an empty BEGIN/COMMIT, which Debezium confirms with its
	// heartbeat: the database is not idle for Debezium's slot, and the cutover may finish
	// without the nudge. Then it must have waited until Debezium's slot passed its start.
	args := s.cutoverArgs("--publication", s.dbzPub, "--create-publication=false")
	code, out := runCommand(s.t, time.Minute, append(args, "--nudge=false", "--timeout", "8s", "--stall-warning", "4s")...)
	if version := serverVersion(t, env.pgDSN); version < 150000 && code == 0 {
		start, _ := s.slotConfirmed(s.name)
		dbz, _ := s.slotConfirmed(s.dbzSlot)
		if !strings.Contains(out, "safe to stop Debezium") || dbz < start {
			t.Fatalf("cutover --nudge=false on Postgres %d: exit 0 with Debezium's slot at %s, walrelay's start %s", version, dbz, start)
		}
		t.Logf("Postgres %d: cutover --nudge=false finished (an empty transaction moved Debezium's slot to %s, past %s)", version, dbz, start)
	} else if code != 1 || !strings.Contains(out, "heartbeat.interval.ms") {
		t.Fatalf("cutover --nudge=false on an idle database: exit %d, want 1 with the heartbeat hint", code)
	}
	start, _ := s.slotConfirmed(s.name)
	// With it (default), the same cutover (reusing the slot) finishes.
	t0 := time.Now()
	code, out = runCommand(s.t, 2*time.Minute, append(args, "--timeout", "90s")...)
	if code != 0 || !strings.Contains(out, "safe to stop Debezium") || !strings.Contains(out, start.String()) {
		t.Fatalf("cutover with the nudge on an idle database: exit %d, want 0 at start %s", code, start)
	}
	took := time.Since(t0)
	cw.stopConnector(s.name, s.dbzSlot)

	// walrelay on Debezium's FOR ALL TABLES publication: the other table is ignored and
	// counted.
	proc := s.startWalrelay(s.dbzPub, "--create-publication=false", "--create-slot=false", "--heartbeat-interval", "0")
	stop = s.writers(2, func() time.Duration { return 20 * time.Millisecond })
	pgExec(t, env.pgDSN, "INSERT INTO "+qtable(other)+" SELECT g, 'after' FROM generate_series(11, 30) g")
	time.Sleep(time.Second)
	if err := stop(); err != nil {
		t.Fatalf("writer: %v", err)
	}
	waitSlotLSN(t, env.pgDSN, s.name, currentLSN(t, env.pgDSN), 90*time.Second, proc)
	ignored, _ := metricValue(t, proc.metricsAddr(), `walrelay_changes_ignored_total{reason="unmapped_table"}`)
	if ignored < 20 {
		t.Errorf(`walrelay_changes_ignored_total{reason="unmapped_table"} = %v, want >= 20 (the other table's inserts)`, ignored)
	}
	if code, _ := runCommand(s.t, time.Minute, s.cutoverArgs("--drop-from-slot", "--start-lsn", start.String())...); code != 0 {
		t.Fatalf("walrelay cutover --drop-from-slot: exit %d", code)
	}
	msgTopics, _ := topicsWithPrefix(context.Background(), t, env.kafka, s.name+"_dbz.message")
	r := s.verifyCutover(start)
	t.Log(r.summary("cutover/idle-all-tables", fmt.Sprintf("cutover_wait=%s ignored_other_table=%v walrelay_start=%s", took.Round(time.Millisecond), ignored, start)))
	if r.lost != 0 || r.orderViolations != 0 || r.unknown != 0 || r.fieldErrors != 0 || r.walrelayBeforeStart != 0 || r.duplicates != 0 {
		t.Errorf("lost=%d order_violations=%d unknown=%d field_errors=%d walrelay_before_start=%d duplicates=%d (idle: none expected)",
			r.lost, r.orderViolations, r.unknown, r.fieldErrors, r.walrelayBeforeStart, r.duplicates)
	}
	if len(msgTopics) != 0 {
		t.Errorf("the nudge message became Debezium records in %v despite message.prefix.exclude.list", msgTopics)
	}
}

// cutExit is how a walrelay command the test ran ended.
type cutExit struct {
	code int
	out  string
}

// walrelayAsync runs a walrelay subcommand in the background; its end arrives on the
// channel.
func (s *cutScenario) walrelayAsync(timeout time.Duration, args ...string) <-chan cutExit {
	done := make(chan cutExit, 1)
	go func() {
		code, out := runCommand(s.t, timeout, args...)
		done <- cutExit{code, out}
	}()
	return done
}

// TestCutoverChecksWalrelaySlot: `walrelay cutover` never says it is safe to stop
// Debezium, and --drop-from-slot never drops Debezium's slot, unless walrelay's own slot
// still exists, is valid and starts at or before walrelay's start L. Debezium's slot is
// a plain pgoutput slot here that the test moves past L with pg_replication_slot_advance,
// as Debezium's offset commits would (no Debezium needed); the first subtest shows that
// this is enough for cutover to say "safe" when walrelay's slot is left alone.
func TestCutoverChecksWalrelaySlot(t *testing.T) {
	env := requireEnv(t)
	// waiting starts cutover with a fake Debezium slot below walrelay's start, lets
	// change mutate walrelay's slot once cutover created it and let it go, then moves
	// Debezium's slot past the start and returns how cutover ended.
	waiting := func(t *testing.T, short string, change func(s *cutScenario)) (*cutScenario, cutExit) {
		s := newCutScenario(t, env, nil, short)
		pgExec(t, env.pgDSN, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", s.dbzSlot)
		done := s.walrelayAsync(2*time.Minute, s.cutoverArgs("--timeout", "60s")...)
		// Created and released (cutover closed its replication connection): it waits.
		testwait.Eventually(t, 90*time.Second, "walrelay cutover to create and release its slot", func() bool {
			si, ok := s.slotInfo(s.name)
			return ok && si.confirmed != 0 && si.activePID == 0
		})
		change(s)
		// A transaction after walrelay's start, then Debezium's slot past it.
		pgExec(t, env.pgDSN, "SELECT pg_logical_emit_message(true, 'e2e.cutover', 'past walrelay start')")
		pgExec(t, env.pgDSN, "SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())", s.dbzSlot)
		select {
		case res := <-done:
			if _, ok := s.slotConfirmed(s.dbzSlot); !ok {
				t.Errorf("Debezium's slot %s is gone after cutover", s.dbzSlot)
			}
			return s, res
		case <-time.After(3 * time.Minute):
			t.Fatal("walrelay cutover did not return")
		}
		return nil, cutExit{}
	}
	refused := func(t *testing.T, res cutExit, what, want string) {
		t.Helper()
		if res.code != 1 || strings.Contains(res.out, "safe to stop Debezium") || !strings.Contains(res.out, want) {
			t.Errorf("cutover after %s: exit %d, want 1 with %q and no \"safe to stop Debezium\"", what, res.code, want)
		}
	}

	t.Run("intact", func(t *testing.T) {
		_, res := waiting(t, "ok", func(*cutScenario) {})
		if res.code != 0 || !strings.Contains(res.out, "safe to stop Debezium") {
			t.Errorf("cutover with walrelay's slot intact: exit %d, want 0 with \"safe to stop Debezium\"", res.code)
		}
	})
	t.Run("dropped-while-waiting", func(t *testing.T) {
		_, res := waiting(t, "drop", func(s *cutScenario) {
			pgExec(t, env.pgDSN, "SELECT pg_drop_replication_slot($1)", s.name)
		})
		refused(t, res, "walrelay's slot was dropped", "was dropped while waiting")
	})
	t.Run("moved-past-start-while-waiting", func(t *testing.T) {
		// A slot consumed past L, or dropped and created again later, would not relay
		// what committed between L and its position.
		_, res := waiting(t, "moved", func(s *cutScenario) {
			pgExec(t, env.pgDSN, "SELECT pg_logical_emit_message(true, 'e2e.cutover', 'moves walrelay slot')")
			pgExec(t, env.pgDSN, "SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())", s.name)
		})
		refused(t, res, "walrelay's slot moved past its start", "past walrelay's start")
	})
	t.Run("drop-from-slot-without-walrelay-slot", func(t *testing.T) {
		s := newCutScenario(t, env, nil, "dropfrom")
		var startText string
		if err := pgPool(t, env.pgDSN).scan(context.Background(), "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')",
			[]any{s.dbzSlot}, &startText); err != nil {
			t.Fatalf("create Debezium's slot: %v", err)
		}
		pgExec(t, env.pgDSN, "SELECT pg_logical_emit_message(true, 'e2e.cutover', 'past start')")
		pgExec(t, env.pgDSN, "SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())", s.dbzSlot)
		args := s.cutoverArgs("--drop-from-slot", "--start-lsn", startText)
		code, out := runCommand(s.t, time.Minute, args...)
		if _, ok := s.slotConfirmed(s.dbzSlot); code != 1 || !ok || !strings.Contains(out, "does not exist") {
			t.Fatalf("--drop-from-slot without walrelay's slot: exit %d, Debezium's slot kept %v; want exit 1, kept, and why", code, ok)
		}
		// With walrelay's slot in place the same command drops it.
		pgExec(t, env.pgDSN, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", s.name)
		if code, out := runCommand(s.t, time.Minute, args...); code != 0 || !strings.Contains(out, "dropped slot") {
			t.Fatalf("--drop-from-slot with walrelay's slot: exit %d, want 0", code)
		}
		if _, ok := s.slotConfirmed(s.dbzSlot); ok {
			t.Fatalf("Debezium's slot %s still exists after --drop-from-slot", s.dbzSlot)
		}
	})
}

type dsnParts struct{ host, port, user, password, dbname string }

// mustParseDSN splits the test DSN into the connector's database.* settings.
func mustParseDSN(t *testing.T, dsn string) dsnParts {
	t.Helper()
	c, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("parse DSN: %v", err)
	}
	pw := c.Password
	if pw == "" {
		pw = "unused" // the test cluster trusts 127.0.0.1; Debezium wants some password
	}
	return dsnParts{host: c.Host, port: fmt.Sprint(c.Port), user: c.User, password: pw, dbname: c.Database}
}
