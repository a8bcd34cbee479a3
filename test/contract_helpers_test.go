package e2e

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walrelay/walrelay/test/pgtest"
)

// This file holds what the contract tests (contract_*_test.go) share on top of the
// harness: an isolated scenario that may own several tables, schemas, slots and a
// database; a transaction helper that records where a transaction lies in the WAL; and a
// checker that compares the records of a scenario with the events it expects.

// contract is one isolated contract test. Its name, e2e_<short>_<hex>, prefixes every
// slot, publication, table, schema, database and topic it creates, so that leftovers of
// a killed run are found and dropped by the next one. The embedded scenario provides
// migrate and the start* methods with the scenario's slot, publication and topic prefix.
type contract struct {
	*scenario
	slots   []string // further slots to drop at the end
	dropSQL []string // statements run at the end when the test passed (reverse order)
	dbs     []string // databases to drop at the end when the test passed
}

// newContract prepares an isolated contract test. Unlike newScenario it creates no outbox
// table: call c.migrate(env.pgDSN, c.table) for walrelay's default table, or create your
// own (register it with c.dropOnSuccess).
func newContract(t *testing.T, env *testEnv, short string) *contract {
	t.Helper()
	run := make([]byte, 3)
	_, _ = crand.Read(run)
	name := "e2e_" + short + "_" + hex.EncodeToString(run)
	s := &scenario{t: t, env: env, short: short, name: name, table: "public." + name,
		logDir: filepath.Join(env.dir, "e2e-logs", name)}
	if err := os.MkdirAll(s.logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	c := &contract{scenario: s}
	s.dropLeftovers()
	c.dropMoreLeftovers()
	t.Cleanup(c.cleanup)
	return c
}

// like is the LIKE pattern of every object of earlier runs of this test.
func (c *contract) like() string { return strings.ReplaceAll("e2e_"+c.short+"_", "_", `\_`) + "%" }

// dropMoreLeftovers drops what scenario.dropLeftovers does not know: schemas and
// databases of earlier runs.
func (c *contract) dropMoreLeftovers() {
	t := c.t
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := pgPool(t, c.env.pgDSN)
	schemas, err := p.strings(ctx, `SELECT nspname::text FROM pg_namespace WHERE nspname LIKE $1`, c.like())
	if err != nil {
		t.Fatalf("list leftover schemas: %v", err)
	}
	for _, n := range schemas {
		_ = p.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{n}.Sanitize()+" CASCADE")
	}
	dbs, err := p.strings(ctx, `SELECT datname::text FROM pg_database WHERE datname LIKE $1`, c.like())
	if err != nil {
		t.Fatalf("list leftover databases: %v", err)
	}
	for _, n := range dbs {
		// Slots of the database block DROP DATABASE; scenario.dropLeftovers dropped the
		// inactive ones, an active one belongs to a run still going on elsewhere.
		_ = p.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{n}.Sanitize()+" WITH (FORCE)")
	}
}

func (c *contract) cleanup() {
	t := c.t
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, slot := range append([]string{c.name}, c.slots...) {
		if err := dropSlot(ctx, t, c.env.pgDSN, slot); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	}
	p := pgPool(t, c.env.pgDSN)
	if err := p.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{c.name}.Sanitize()); err != nil {
		t.Errorf("cleanup: drop publication: %v", err)
	}
	if t.Failed() {
		t.Logf("kept tables, schemas and databases %s*, topics %s.* and logs in %s for inspection", c.name, c.name, c.logDir)
		return
	}
	for i := len(c.dropSQL) - 1; i >= 0; i-- {
		if err := p.Exec(ctx, c.dropSQL[i]); err != nil {
			t.Errorf("cleanup: %s: %v", c.dropSQL[i], err)
		}
	}
	if err := p.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{"public", c.name}.Sanitize()); err != nil {
		t.Errorf("cleanup: drop table: %v", err)
	}
	for _, db := range c.dbs {
		if err := p.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("cleanup: drop database %s: %v", db, err)
		}
	}
	deleteTopics(ctx, t, c.env.kafka, c.name+".")
	_ = os.RemoveAll(c.logDir)
}

// dropOnSuccess registers a statement (DROP TABLE ..., DROP SCHEMA ... CASCADE) for the
// end of the test.
func (c *contract) dropOnSuccess(sql string) { c.dropSQL = append(c.dropSQL, sql) }

// exec runs sql on the shared database and fails the test on error.
func (c *contract) exec(sql string, args ...any) {
	c.t.Helper()
	pgExec(c.t, c.env.pgDSN, sql, args...)
}

// createDatabase creates a database (dropped at the end; name it c.name or c.name_...)
// and returns its DSN.
func (c *contract) createDatabase(name string) string {
	c.t.Helper()
	c.exec("CREATE DATABASE " + pgx.Identifier{name}.Sanitize())
	c.dbs = append(c.dbs, name)
	return pgtest.WithDatabase(c.t, c.env.pgDSN, name)
}

// extraSlot returns a further slot name of the test, dropped at the end.
func (c *contract) extraSlot(suffix string) string {
	slot := c.name + "_" + suffix
	c.slots = append(c.slots, slot)
	return slot
}

// connect opens a dedicated connection, closed at the end of the test.
func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// qtable quotes schema.name.
func qtable(table string) string { return pgx.Identifier(strings.Split(table, ".")).Sanitize() }

// ---------------------------------------------------------------------------------------
// Transactions

// txnInfo is where one transaction lies in the WAL (see txnRec in workload_test.go).
type txnInfo struct {
	xid       uint32
	begin     lsn // insert position right after BEGIN
	preCommit lsn // insert position just before COMMIT
	post      lsn // pg_current_wal_lsn() after COMMIT: the commit record ends at or before it
	before    time.Time
	after     time.Time
}

// runTxn runs body inside one transaction on conn and commits it (or rolls it back),
// recording its WAL position. body uses conn as usual; the transaction is open.
func runTxn(t *testing.T, conn *pgx.Conn, rollback bool, body func(ctx context.Context, conn *pgx.Conn) error) *txnInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tx := &txnInfo{before: time.Now()}
	r, err := multiResult(ctx, conn, "BEGIN; SELECT pg_current_wal_insert_lsn()::text, pg_current_xact_id()::text")
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	if tx.begin, err = parseLSN(r[0]); err != nil {
		t.Fatal(err)
	}
	xid, err := strconv.ParseUint(r[1], 10, 64)
	if err != nil {
		t.Fatalf("xid %q: %v", r[1], err)
	}
	tx.xid = uint32(xid)
	if err := body(ctx, conn); err != nil {
		_, _ = conn.Exec(ctx, "ROLLBACK")
		t.Fatalf("transaction body: %v", err)
	}
	end := "COMMIT"
	if rollback {
		end = "ROLLBACK"
	}
	r, err = multiResult(ctx, conn, "SELECT pg_current_wal_insert_lsn()::text; "+end+"; SELECT pg_current_wal_lsn()::text")
	if err != nil {
		t.Fatalf("%s: %v", strings.ToLower(end), err)
	}
	tx.after = time.Now()
	if tx.preCommit, err = parseLSN(r[0]); err != nil {
		t.Fatal(err)
	}
	if tx.post, err = parseLSN(r[1]); err != nil {
		t.Fatal(err)
	}
	return tx
}

// ---------------------------------------------------------------------------------------
// Expected records

// wantRec is a record a contract test expects, identified by its id header.
type wantRec struct {
	id     string
	topic  string
	key    string
	value  []byte            // nil: a tombstone (null value)
	hdrs   map[string]string // headers that must be present with these values
	absent []string          // headers that must not be present
	// exact: no header other than hdrs and walrelay.* may be present.
	exact bool
	tx    *txnInfo
}

// delivery is what checkDelivery found.
type delivery struct {
	events, delivered, lost, duplicates, unknown, fieldErrors, orderViolations int
	errs                                                                       []string
	byID                                                                       map[string][]*kgo.Record
}

func (d *delivery) problem(format string, args ...any) {
	if len(d.errs) < 25 {
		d.errs = append(d.errs, fmt.Sprintf(format, args...))
	}
}

// summary is the one-line report of a contract test.
func (d *delivery) summary(scenario string, extra ...string) string {
	s := fmt.Sprintf("scenario=contract/%s events=%d delivered=%d lost=%d duplicates=%d unknown=%d field_errors=%d order_violations=%d",
		scenario, d.events, d.delivered, d.lost, d.duplicates, d.unknown, d.fieldErrors, d.orderViolations)
	for _, e := range extra {
		s += " " + e
	}
	return s
}

// requireExact fails the test unless every expected record arrived exactly once, right,
// in commit order per key, and nothing else arrived.
func (d *delivery) requireExact(t *testing.T) {
	t.Helper()
	if d.lost != 0 || d.duplicates != 0 || d.unknown != 0 || d.fieldErrors != 0 || d.orderViolations != 0 {
		t.Errorf("record contract violated: lost=%d duplicates=%d unknown=%d field_errors=%d order_violations=%d (details above)",
			d.lost, d.duplicates, d.unknown, d.fieldErrors, d.orderViolations)
	}
	if d.events == 0 {
		t.Error("no event expected: the test proved nothing")
	}
}

// checkDelivery compares the records read from the scenario's topics (recs, as
// consumeAll returns them) with want, given in commit order. Topics in skipTopics (for
// example the dead-letter topic) are not looked at.
func checkDelivery(t *testing.T, recs map[string][]*kgo.Record, want []*wantRec, skipTopics ...string) *delivery {
	t.Helper()
	d := &delivery{events: len(want), byID: map[string][]*kgo.Record{}}
	pos := map[string]int{}
	byID := map[string]*wantRec{}
	for i, w := range want {
		pos[w.id] = i
		byID[w.id] = w
	}
	var all []*kgo.Record
	for topic, list := range recs {
		if !slices.Contains(skipTopics, topic) {
			all = append(all, list...)
		}
	}
	sort.SliceStable(all, func(i, j int) bool {
		a, b := all[i], all[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		if a.Partition != b.Partition {
			return a.Partition < b.Partition
		}
		return a.Offset < b.Offset
	})
	last := map[string]int{} // topic/partition/key -> commit position of its last first delivery
	for _, rec := range all {
		d.delivered++
		id := header(rec, "id")
		w, ok := byID[id]
		if !ok {
			d.unknown++
			d.problem("unknown record at %s/%d@%d: key=%q id=%q value=%.80q", rec.Topic, rec.Partition, rec.Offset, rec.Key, id, rec.Value)
			continue
		}
		d.byID[id] = append(d.byID[id], rec)
		if len(d.byID[id]) > 1 {
			d.duplicates++
			continue
		}
		checkWantRec(d, rec, w)
		k := fmt.Sprintf("%s/%d/%s", rec.Topic, rec.Partition, rec.Key)
		if l, ok := last[k]; ok && pos[id] < l {
			d.orderViolations++
			d.problem("order: key %q: event %s (commit position %d) after position %d at %s/%d@%d",
				rec.Key, id, pos[id], l, rec.Topic, rec.Partition, rec.Offset)
		}
		last[k] = max(last[k], pos[id])
	}
	for _, w := range want {
		if len(d.byID[w.id]) == 0 {
			d.lost++
			d.problem("lost: event %s (topic %s, key %q)", w.id, w.topic, w.key)
		}
	}
	for _, e := range d.errs {
		t.Log("  " + e)
	}
	return d
}

// checkWantRec checks one record against what was expected of it.
func checkWantRec(d *delivery, rec *kgo.Record, w *wantRec) {
	bad := func(format string, args ...any) {
		d.fieldErrors++
		d.problem("event %s at %s/%d@%d: %s", w.id, rec.Topic, rec.Partition, rec.Offset, fmt.Sprintf(format, args...))
	}
	if rec.Topic != w.topic {
		bad("topic %q, want %q", rec.Topic, w.topic)
	}
	if string(rec.Key) != w.key {
		bad("key %q, want %q", rec.Key, w.key)
	}
	switch {
	case w.value == nil && rec.Value != nil:
		bad("value %.80q, want null (tombstone)", rec.Value)
	case w.value != nil && rec.Value == nil:
		bad("value null, want %.80q", w.value)
	case !bytes.Equal(rec.Value, w.value):
		bad("value %s, want %s", describeBytes(rec.Value), describeBytes(w.value))
	}
	count := map[string]int{}
	for _, h := range rec.Headers {
		count[h.Key]++
	}
	for k, n := range count {
		if n > 1 {
			bad("header %q appears %d times", k, n)
		}
	}
	for k, v := range w.hdrs {
		if got := header(rec, k); count[k] == 0 || got != v {
			bad("header %q = %q (present %v), want %q", k, got, count[k] > 0, v)
		}
	}
	for _, k := range w.absent {
		if count[k] > 0 {
			bad("header %q = %q must not be present", k, header(rec, k))
		}
	}
	if w.exact {
		for k := range count {
			if _, ok := w.hdrs[k]; !ok && !strings.HasPrefix(k, "walrelay.") {
				bad("unexpected header %q = %q", k, header(rec, k))
			}
		}
	}
	if w.tx == nil {
		return
	}
	if l, err := parseLSN(header(rec, "walrelay.lsn")); err != nil {
		bad("walrelay.lsn: %v", err)
	} else if l < w.tx.begin || l > w.tx.post {
		bad("walrelay.lsn %s outside the transaction's WAL range [%s, %s]", l, w.tx.begin, w.tx.post)
	}
	if x, err := strconv.ParseUint(header(rec, "walrelay.xid"), 10, 32); err != nil {
		bad("walrelay.xid %q: %v", header(rec, "walrelay.xid"), err)
	} else if uint32(x) != w.tx.xid {
		bad("walrelay.xid %d, want %d", x, w.tx.xid)
	}
	if ts := rec.Timestamp; ts.Before(w.tx.before.Add(-timestampSlack)) || ts.After(w.tx.after.Add(timestampSlack)) {
		bad("timestamp %s is not the commit time (transaction ran %s .. %s)",
			ts.Format(time.RFC3339Nano), w.tx.before.Format(time.RFC3339Nano), w.tx.after.Format(time.RFC3339Nano))
	}
}

// findRecord returns the first record in recs whose id header is id.
func findRecord(recs map[string][]*kgo.Record, id string) (*kgo.Record, bool) {
	for _, list := range recs {
		for _, r := range list {
			if header(r, "id") == id {
				return r, true
			}
		}
	}
	return nil, false
}

// describeBytes shows a value briefly: its length and its start, quoted.
func describeBytes(b []byte) string {
	if b == nil {
		return "null"
	}
	return fmt.Sprintf("%d bytes %.60q", len(b), b)
}

// ---------------------------------------------------------------------------------------
// Metrics
