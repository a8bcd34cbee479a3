package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walrelay/walrelay/internal/testwait"
)

// The Postgres failover tests: a primary and a physical standby of the suite's Postgres
// major (make test PG=...), walrelay on a multi-host DSN with target_session_attrs=
// read-write, writers committing throughout, the primary killed with SIGKILL and the
// standby promoted a few seconds later (a promotion never takes no time). The truth is
// the new primary's outbox table.

// haPair is a primary and its streaming standby, each a private cluster of pg.sh.
type haPair struct {
	primary, standby       *testEnv
	primaryEnv, standbyEnv []string // pg.sh environments
	primaryPort, sbPort    int
	multiDSN               string // both hosts, the writable one chosen
	version                int
}

// newHAPair starts a private primary and makes a streaming standby of it (pg.sh
// standby-create: on 17+ the standby synchronizes failover slots and the primary waits
// for it before logical walsenders send a change: synchronized_standby_slots).
func newHAPair(t *testing.T, env *testEnv) *haPair {
	t.Helper()
	penv, pScript := startPrivateCluster(t, env)
	pu, err := url.Parse(penv.pgDSN)
	if err != nil {
		t.Fatal(err)
	}
	pport, _ := strconv.Atoi(pu.Port())
	dir, err := os.MkdirTemp(env.dir, "walrelay-ha-standby-")
	if err != nil {
		t.Fatal(err)
	}
	sport := freePort(t)
	if err := runEnvScript(t, env, 3*time.Minute, pScript, "pg.sh", "standby-create", dir, strconv.Itoa(sport)); err != nil {
		t.Fatalf("make the standby: %v", err)
	}
	sScript := []string{"WALRELAY_TEST_DIR=" + dir, "WALRELAY_TEST_PG_PORT=" + strconv.Itoa(sport)}
	if env.pgBin != "" {
		sScript = append(sScript, "WALRELAY_TEST_PGBIN="+env.pgBin)
	}
	sdsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", sport)
	t.Cleanup(func() {
		faultResetPool(t, sdsn)
		_ = runEnvScript(t, env, 2*time.Minute, sScript, "pg.sh", "stop")
		_ = os.RemoveAll(dir)
	})
	senv := *env
	senv.pgDSN = sdsn
	return &haPair{primary: penv, standby: &senv, primaryEnv: pScript, standbyEnv: sScript, primaryPort: pport, sbPort: sport,
		multiDSN: fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=2", pport, sport),
		version:  serverVersion(t, penv.pgDSN)}
}

// haWriter commits transactions of 1-3 outbox events through the multi-host DSN until
// stopped, reconnecting to whichever server accepts writes; payloads carry a sequence
// number per aggregate, so the delivered order can be checked against commit order.
type haWriter struct {
	t       *testing.T
	dsn     string
	table   string
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	commits int
	errs    int
}

func startHAWriter(t *testing.T, dsn, table string) *haWriter {
	w := &haWriter{t: t, dsn: dsn, table: table, stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	t.Cleanup(w.halt)
	return w
}

func (w *haWriter) run() {
	defer close(w.done)
	seq := map[string]int{}
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}()
	insert := "INSERT INTO " + pgx.Identifier(strings.Split(w.table, ".")).Sanitize() +
		" (aggregate_type, aggregate_id, event_type, payload) VALUES ('ha', $1, 'Written', $2::jsonb)"
	for i := 0; ; i++ {
		select {
		case <-w.stop:
			return
		case <-time.After(20 * time.Millisecond):
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err := func() error {
			if conn == nil || conn.IsClosed() {
				c, err := pgx.Connect(ctx, w.dsn)
				if err != nil {
					return err
				}
				conn = c
			}
			tx, err := conn.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(context.Background())
			for j := 0; j <= i%3; j++ {
				agg := "a-" + strconv.Itoa((i+j)%10)
				seq[agg]++
				if _, err := tx.Exec(ctx, insert, agg, fmt.Sprintf(`{"seq": %d}`, seq[agg])); err != nil {
					return err
				}
			}
			return tx.Commit(ctx)
		}()
		cancel()
		w.mu.Lock()
		if err != nil {
			w.errs++
			if conn != nil {
				_ = conn.Close(context.Background())
				conn = nil
			}
		} else {
			w.commits++
		}
		w.mu.Unlock()
	}
}

func (w *haWriter) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

func (w *haWriter) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.commits
}

// waitSynced waits until the standby holds a persisted synchronized copy of slot.
func (h *haPair) waitSynced(t *testing.T, slot string) {
	t.Helper()
	testwait.Eventually(t, time.Minute, "the standby's synchronized copy of the slot", func() bool {
		var synced, temporary bool
		err := pgPool(t, h.standby.pgDSN).scan(context.Background(),
			"SELECT synced, temporary FROM pg_replication_slots WHERE slot_name = $1", []any{slot}, &synced, &temporary)
		return err == nil && synced && !temporary
	})
}

// failover kills the primary with SIGKILL, waits delay (a promotion is never instant:
// Patroni's takes 20-30 s by default) and promotes the standby; it returns when the
// standby accepts writes, and the promotion's time.
func (h *haPair) failover(t *testing.T, env *testEnv, delay time.Duration) time.Time {
	t.Helper()
	if err := runEnvScript(t, env, time.Minute, h.primaryEnv, "pg.sh", "kill9"); err != nil {
		t.Fatalf("kill -9 the primary: %v", err)
	}
	faultResetPool(t, h.primary.pgDSN)
	time.Sleep(delay)
	if err := runEnvScript(t, env, 2*time.Minute, h.standbyEnv, "pg.sh", "promote"); err != nil {
		t.Fatalf("promote the standby: %v", err)
	}
	faultResetPool(t, h.standby.pgDSN)
	return time.Now()
}

// haVerdict compares the new primary's outbox table with what a consumer reads: every
// row delivered (lost), no delivered event that is not a row (phantom: relayed from the
// old primary's WAL the standby never received), per-aggregate order by the writer's
// sequence, and duplicates.
type haVerdict struct {
	rows, delivered, lost, phantom, duplicates, orderViolations int
}

func judgeHA(t *testing.T, s *scenario, dsn string, readCommitted bool) haVerdict {
	t.Helper()
	rows := readOutbox(t, dsn, s.table)
	recs := consumeAllIsolation(t, s.env.kafka, s.name+".", []string{s.name + ".ha"}, readCommitted)
	var v haVerdict
	v.rows = len(rows)
	seen := map[string]int{}
	last := map[string]int{}
	for _, r := range recs[s.name+".ha"] {
		id := header(r, "id")
		if seen[id]++; seen[id] > 1 {
			v.duplicates++
			continue
		}
		v.delivered++
		if _, ok := rows[id]; !ok {
			v.phantom++
		}
		var p struct{ Seq int }
		if err := json.Unmarshal(r.Value, &p); err != nil {
			t.Fatalf("record %s: payload %q: %v", id, r.Value, err)
		}
		if agg := string(r.Key); p.Seq <= last[agg] {
			v.orderViolations++
		} else {
			last[agg] = p.Seq
		}
	}
	for id := range rows {
		if seen[id] == 0 {
			v.lost++
		}
	}
	return v
}

// firstRecordAfter waits for the first record of the topic committed at or after at, and
// returns when it was read (wall clock).
func firstRecordAfter(t *testing.T, s *scenario, at time.Time, timeout time.Duration) time.Time {
	t.Helper()
	cl := newKafkaClient(t, s.env.kafka)
	defer cl.Close()
	cl.AddConsumeTopics(s.name + ".ha")
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("no record committed after the promotion within %s", timeout)
		}
		var found bool
		fs.EachRecord(func(r *kgo.Record) {
			if !r.Timestamp.Before(at) {
				found = true
			}
		})
		if found {
			return time.Now()
		}
	}
}

// TestPostgresFailover: on Postgres 17 and later, walrelay with failover slots follows a
// primary's SIGKILL and its standby's promotion 6 s later by itself, within a few
// seconds of the promotion, and loses nothing: every row of the new primary is
// delivered, no delivered event is missing from it (synchronized_standby_slots), the
// order per aggregate holds; in exactly-once mode a read_committed consumer sees no
// duplicate. Before 17 there are no failover slots: the promoted standby has no slot,
// and walrelay stops with one line that names the failover, the last event it
// delivered and how to recover.
func TestPostgresFailover(t *testing.T) {
	env := requireEnv(t)
	if v := serverVersion(t, env.pgDSN); v < 170000 {
		t.Run("no failover slots", func(t *testing.T) { failoverWithoutSlots(t, env) })
		return
	}
	for _, delivery := range []string{"at-least-once", "exactly-once"} {
		t.Run(delivery, func(t *testing.T) { failoverWithSlots(t, env, delivery) })
	}
}

func failoverWithSlots(t *testing.T, env *testEnv, delivery string) {
	h := newHAPair(t, env)
	s := newScenario(t, h.primary, "haslot")
	s.readCommitted = delivery == "exactly-once"
	args := faultWithFlag(s.runArgs("--status-interval", "200ms", "--heartbeat-interval", "1s", "--slot-failover", "--delivery", delivery),
		"--postgres-dsn", h.multiDSN)
	p := s.startArgsReady(args...)
	h.waitSynced(t, s.name)
	w := startHAWriter(t, h.multiDSN, s.table)
	testwait.Eventually(t, time.Minute, "writes before the failover", func() bool { return w.count() >= 30 })

	promoted := h.failover(t, env, 6*time.Second)
	s.env = h.standby // the new primary, for the scenario's cleanup
	first := firstRecordAfter(t, s, promoted, 2*time.Minute)
	t.Logf("Postgres %d, %s: promotion -> first record relayed from the new primary: %s", h.version, delivery, first.Sub(promoted).Round(10*time.Millisecond))
	testwait.Eventually(t, time.Minute, "writes after the failover", func() bool { return w.count() >= 60 })
	w.halt()
	waitSlotLSN(t, h.standby.pgDSN, s.name, currentLSN(t, h.standby.pgDSN), 2*time.Minute, p)

	v := judgeHA(t, s, h.standby.pgDSN, s.readCommitted)
	t.Logf("failover %s on Postgres %d: rows=%d delivered=%d lost=%d phantom=%d duplicates=%d order_violations=%d promotion_to_first_record=%s",
		delivery, h.version, v.rows, v.delivered, v.lost, v.phantom, v.duplicates, v.orderViolations, first.Sub(promoted).Round(10*time.Millisecond))
	if v.lost != 0 || v.phantom != 0 || v.orderViolations != 0 || (s.readCommitted && v.duplicates != 0) {
		t.Errorf("lost=%d phantom=%d order_violations=%d duplicates=%d, want 0 (duplicates allowed at-least-once)", v.lost, v.phantom, v.orderViolations, v.duplicates)
	}
	p.sigterm()
	if !p.waitExit(30*time.Second) || p.exitCode() != 0 {
		t.Errorf("walrelay after SIGTERM: %s, want exit 0", p.exitStatus())
	}
}

func failoverWithoutSlots(t *testing.T, env *testEnv) {
	h := newHAPair(t, env)
	s := newScenario(t, h.primary, "hanoslot")
	args := faultWithFlag(s.runArgs("--status-interval", "200ms", "--heartbeat-interval", "1s"), "--postgres-dsn", h.multiDSN)
	p := s.startArgsReady(args...)
	w := startHAWriter(t, h.multiDSN, s.table)
	testwait.Eventually(t, time.Minute, "writes before the failover", func() bool { return w.count() >= 20 })
	waitSlotLSN(t, h.primary.pgDSN, s.name, currentLSN(t, h.primary.pgDSN), time.Minute, p)
	h.failover(t, env, 2*time.Second)
	s.env = h.standby
	if !p.waitExit(2 * time.Minute) {
		t.Fatalf("walrelay kept running on a promoted standby without its slot:\n%s", p.tail(20))
	}
	w.halt()
	out := p.log()
	if p.exitCode() == 0 {
		t.Fatalf("walrelay exited 0 after losing its slot to a failover:\n%s", p.tail(20))
	}
	for _, want := range []string{"postgres failed over", "timeline 2", "has no replication slot", "The last transaction walrelay delivered ended at", "Recover with a replay since the last delivered event", "walrelay replay --since-last-delivered --slot="} {
		if !strings.Contains(out, want) {
			t.Errorf("walrelay's last words do not say %q:\n%s", want, p.tail(10))
		}
	}
	var stopLine string
	for _, m := range p.logLines() {
		if m["level"] == "ERROR" && m["msg"] == "walrelay stopped" {
			stopLine = fmt.Sprint(m["error"])
		}
	}
	t.Logf("Postgres %d failover without failover slots: walrelay stopped with: %s", h.version, stopLine)
	if stopLine == "" {
		t.Error("no ERROR line with the reason")
	}
}

// TestDecodingOnStandby: on Postgres 16 and later walrelay decodes from a hot standby, so
// that the primary's CPU stays with the application: its slot is made on the standby,
// the publication comes from the primary, and heartbeats go to the primary through
// --heartbeat-postgres-dsn. Events committed on the primary arrive through the standby,
// none lost across three SIGKILLs of walrelay, and the slot on the standby moves. Before
// 16 walrelay refuses a standby with one line.
func TestDecodingOnStandby(t *testing.T) {
	env := requireEnv(t)
	h := newHAPair(t, env)
	s := newScenario(t, h.primary, "hastandby")
	pgExec(t, h.primary.pgDSN, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert', publish_via_partition_root = true)",
		pgx.Identifier{s.name}.Sanitize(), pgx.Identifier(strings.Split(s.table, ".")).Sanitize()))
	// The standby must hold the table and the publication before walrelay looks for them there.
	waitReplayed(t, h.standby.pgDSN, currentLSN(t, h.primary.pgDSN))
	args := faultWithFlag(s.runArgs("--status-interval", "200ms", "--heartbeat-interval", "1s", "--heartbeat-postgres-dsn", h.primary.pgDSN),
		"--postgres-dsn", h.standby.pgDSN)
	if h.version < 160000 {
		p := s.startArgs(args...)
		if !p.waitExit(time.Minute) || p.exitCode() == 0 || !strings.Contains(p.log(), "logical decoding on a standby needs 16 or newer") {
			t.Fatalf("walrelay on a Postgres %d standby: %s, want a refusal naming 16:\n%s", h.version, p.exitStatus(), p.tail(10))
		}
		return
	}
	p := s.startArgs(args...)
	p.waitReady(2 * time.Minute) // the slot exists: every row written from now on is in it
	w := startHAWriter(t, h.primary.pgDSN, s.table)
	for i := 0; i < 3; i++ {
		testwait.Eventually(t, time.Minute, "more writes", func() bool { return w.count() >= 20*(i+1) })
		p.kill9()
		p = s.startArgs(args...)
		p.waitReady(2 * time.Minute)
	}
	testwait.Eventually(t, time.Minute, "more writes", func() bool { return w.count() >= 100 })
	w.halt()
	// The standby's slot reaches the primary's WAL end (heartbeats included) once the
	// standby has replayed it.
	waitSlotLSN(t, h.standby.pgDSN, s.name, currentLSN(t, h.primary.pgDSN), 2*time.Minute, p)
	v := judgeHA(t, s, h.primary.pgDSN, false)
	t.Logf("decoding on a Postgres %d standby: rows=%d delivered=%d lost=%d phantom=%d duplicates=%d order_violations=%d",
		h.version, v.rows, v.delivered, v.lost, v.phantom, v.duplicates, v.orderViolations)
	if v.lost != 0 || v.phantom != 0 || v.orderViolations != 0 {
		t.Errorf("lost=%d phantom=%d order_violations=%d, want 0", v.lost, v.phantom, v.orderViolations)
	}
	if strings.Contains(p.log(), "has no heartbeat DSN") {
		t.Error("walrelay warned about a missing heartbeat DSN although one was given")
	}
	p.sigterm()
	if !p.waitExit(30*time.Second) || p.exitCode() != 0 {
		t.Errorf("walrelay after SIGTERM: %s, want exit 0", p.exitStatus())
	}
}
