package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
)

// This file holds what the fault suite (fault_*_test.go, tcpproxy_test.go) adds to the
// harness:
//
//   - knobs (defaults keep the whole suite at about 5–6 minutes on two cores):
//     WALRELAY_FAULT_SCALE      multiplies fault counts and fault durations, never below
//                               the promised minimums (20 walrelay kills, 3 broker kills,
//                               2 Postgres restarts); e.g. 5 for a long local run
//     WALRELAY_FAULT_RATE       workload transactions per second (default 40, ~1,000
//                               events/s)
//     WALRELAY_FAULT_BACKLOG    events written while Kafka is down (default 50,000 × scale)
//     WALRELAY_FAULT_BACKLOG_RATE  transactions per second meanwhile (default 100)
//     WALRELAY_FAULT_RSS_MB     RSS bound with Kafka down (default 100)
//     WALRELAY_FAULT_HUGE_EVENTS   events in the huge transaction (default 200,000)
//     WALRELAY_FAULT_HUGE_RSS_MB   RSS bound during the huge transaction (default 192)
//     WALRELAY_FAULT_HALFOPEN_WAIT seconds walrelay gets to replace a half-open
//                               replication connection (default 60)
//   - faultWriter: the workload of every scenario (1–50 events per transaction over 1,000
//     aggregates, ~10% rolled back, ~15% of transactions delete some of their own rows
//     again), at a steady rate, that survives a Postgres restart: it reconnects, and a
//     transaction whose COMMIT got no answer is classified by looking for its marker row,
//     never guessed;
//   - faultVerify: the harness verifier, also knowing the rows deleted in their own
//     transaction (their events must still arrive);
//   - an RSS sampler, broker control that always restores the broker, a throwaway
//     Postgres cluster for faults that must not hit the shared one, metric scraping.

// ---------------------------------------------------------------------------------------
// Knobs

// faultScale is WALRELAY_FAULT_SCALE (default 1; values below 1 are raised to 1).
func faultScale() float64 {
	if s := os.Getenv("WALRELAY_FAULT_SCALE"); s != "" {
		if v, err := strconv.ParseFloat(s, 64); err == nil && v > 1 {
			return v
		}
	}
	return 1
}

// faultCount scales a count, never below base.
func faultCount(base int) int { return max(base, int(float64(base)*faultScale()+0.5)) }

// faultDur scales a duration, never below base.
func faultDur(base time.Duration) time.Duration {
	return max(base, time.Duration(float64(base)*faultScale()))
}

// faultEnvInt reads an integer knob.
func faultEnvInt(t *testing.T, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(strings.ReplaceAll(s, "_", ""))
	if err != nil || v <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return v
}

// faultRate is WALRELAY_FAULT_RATE: workload transactions per second (default 40, about
// 1,000 events per second).
func faultRate(t *testing.T) float64 { return float64(faultEnvInt(t, "WALRELAY_FAULT_RATE", 40)) }

// ---------------------------------------------------------------------------------------
// Workload

// faultWriter writes the fault workload into an outbox table over one connection, so
// commit order is the order of its transactions. Bookkeeping lives in the embedded
// harness workload (txns, committed, rolledBack), so stats() and lastPostLSN() work.
//
// Every committed transaction also inserts a row with a fresh uuid into a marker table
// (<scenario>_txn, not published). When a transaction fails after BEGIN — above all when
// the connection dies around COMMIT and its outcome is unknown — the writer reconnects,
// waits until the old backend is gone (terminating it if it lingers, so it cannot commit
// later), and then the marker row decides: present means committed (its events must
// arrive), absent means not (they must never appear). Rows a transaction deletes again
// are first copied to <scenario>_deleted (not published) so the verifier still knows
// them.
type faultWriter struct {
	*workload
	dsn       string
	outbox    string // quoted outbox table
	marker    string // quoted marker table
	shadow    string // "public.<scenario>_deleted"
	deletePct int    // share of transactions that delete some of their rows, in percent

	// hook, when set, makes the next committing transaction sleep in the server right
	// before or right after its COMMIT (same round trip), so that a test can crash
	// Postgres while the outcome is pending (see faultCommitHook).
	hook atomic.Pointer[faultCommitHook]

	conn     *pgx.Conn
	pid      uint32
	pidStart time.Time
	connects int

	// under workload.mu
	reconnects       int
	unknownCommitted int
	unknownAborted   int
	failedBefore     int // transactions that failed before COMMIT was sent (not committed)
	deleteTxns       int
	deletedRows      int
}

// faultCommitHook delays one commit: the server sleeps (pg_sleep) before or after COMMIT in
// the round trip that commits, and sent is closed just before that round trip starts.
type faultCommitHook struct {
	afterCommit bool
	sleep       time.Duration
	sent        chan struct{}
	txn         *txnRec
}

// holdNextCommit arms a faultCommitHook and returns it.
func (fw *faultWriter) holdNextCommit(afterCommit bool, sleep time.Duration) *faultCommitHook {
	h := &faultCommitHook{afterCommit: afterCommit, sleep: sleep, sent: make(chan struct{})}
	fw.hook.Store(h)
	return h
}

// newFaultWriter prepares the workload for scenario s, writing through dsn (a direct
// connection: faults are for walrelay, not for the writer, unless Postgres itself
// restarts).
func newFaultWriter(t *testing.T, s *scenario, dsn string, rng *mrand.Rand) *faultWriter {
	t.Helper()
	marker := pgx.Identifier{"public", s.name + "_txn"}.Sanitize()
	shadow := "public." + s.name + "_deleted"
	outbox := pgx.Identifier(strings.Split(s.table, ".")).Sanitize()
	pgExec(t, dsn, "CREATE TABLE "+marker+" (id uuid PRIMARY KEY)")
	pgExec(t, dsn, "CREATE TABLE "+pgx.Identifier(strings.Split(shadow, ".")).Sanitize()+" (LIKE "+outbox+")")
	w := &workload{t: t, table: s.table, rng: rng, seq: map[string]int{}, rolledBack: map[string]*eventRec{}}
	for i := range 1000 {
		typ := aggregateTypes[i%len(aggregateTypes)]
		w.aggs = append(w.aggs, aggregate{typ: typ, id: fmt.Sprintf("%s-%04d", typ, i)})
	}
	fw := &faultWriter{workload: w, dsn: dsn, outbox: outbox, marker: marker, shadow: shadow, deletePct: 15}
	t.Cleanup(func() {
		if fw.conn != nil {
			_ = fw.conn.Close(context.Background())
		}
		if t.Failed() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		p := pgPool(t, dsn)
		_ = p.Exec(ctx, "DROP TABLE IF EXISTS "+marker)
		_ = p.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier(strings.Split(shadow, ".")).Sanitize())
	})
	return fw
}

func (fw *faultWriter) connect(ctx context.Context) error {
	c, err := pgx.Connect(ctx, fw.dsn)
	if err != nil {
		return err
	}
	var start time.Time
	if err := c.QueryRow(ctx, "SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()").Scan(&start); err != nil {
		_ = c.Close(context.Background())
		return err
	}
	fw.conn, fw.pid, fw.pidStart = c, c.PgConn().PID(), start
	fw.connects++
	if fw.connects > 1 {
		fw.mu.Lock()
		fw.reconnects++
		fw.mu.Unlock()
	}
	return nil
}

func (fw *faultWriter) dropConn() {
	if fw.conn != nil {
		_ = fw.conn.Close(context.Background())
		fw.conn = nil
	}
}

// ensureConn (re)connects with backoff until deadline.
func (fw *faultWriter) ensureConn(deadline time.Time) error {
	backoff := 100 * time.Millisecond
	for fw.conn == nil || fw.conn.IsClosed() {
		fw.conn = nil
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := fw.connect(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("writer: could not reconnect to postgres: %w", err)
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, time.Second)
	}
	return nil
}

// writeTxn writes one transaction of n events and commits it (or rolls it back). A
// transaction that fails is classified (see faultWriter) and reported as committed or
// not; the error is only for a writer that cannot go on (Postgres unreachable for
// minutes).
func (fw *faultWriter) writeTxn(n int, rollback bool) (*txnRec, error) {
	w := fw.workload
	w.mu.Lock()
	tx := &txnRec{Index: len(w.txns)}
	w.mu.Unlock()

	seq := map[string]int{}
	var sb strings.Builder
	fmt.Fprintf(&sb, "INSERT INTO %s (id, aggregate_type, aggregate_id, event_type, payload, headers) VALUES ", fw.outbox)
	args := make([]any, 0, n*6)
	for i := range n {
		a := w.aggs[w.rng.IntN(len(w.aggs))]
		s, ok := seq[a.id]
		if !ok {
			s = w.seq[a.id]
		}
		seq[a.id] = s + 1
		ev := &eventRec{ID: newUUID(), AggType: a.typ, AggID: a.id, EventType: eventTypes[w.rng.IntN(len(eventTypes))], Txn: tx}
		tx.Events = append(tx.Events, ev)
		payload := fmt.Sprintf(`{"seq": %d, "aggregate": %q, "txn": %d, "i": %d, "rolled_back": %t,
			"note": "caf\u00e9 \"quoted\" \\ tab\t😀", "amount": 12.50, "tags": ["a", "b"]}`,
			s, a.id, tx.Index, i, rollback)
		hdr := map[string]any{"traceparent": fmt.Sprintf("00-%s-%s-01", randHex(w.rng, 32), randHex(w.rng, 16)), "n": 1}
		if w.rng.IntN(2) == 0 {
			hdr["tenant"] = fmt.Sprintf("tenant-%d", w.rng.IntN(5))
			hdr["nested"] = map[string]string{"not": "a header"}
		}
		hb, _ := json.Marshal(hdr)
		if i > 0 {
			sb.WriteString(", ")
		}
		k := len(args)
		fmt.Fprintf(&sb, "($%d::uuid, $%d, $%d, $%d, $%d::jsonb, $%d::jsonb)", k+1, k+2, k+3, k+4, k+5, k+6)
		args = append(args, ev.ID, a.typ, a.id, ev.EventType, payload, string(hb))
	}
	var del []string
	if w.rng.IntN(100) < fw.deletePct {
		for _, i := range w.rng.Perm(n)[:1+w.rng.IntN(n)] {
			del = append(del, tx.Events[i].ID)
		}
	}
	marker := newUUID()

	if err := fw.ensureConn(time.Now().Add(2 * time.Minute)); err != nil {
		return nil, err
	}
	commitSent, err := fw.run(tx, sb.String(), args, del, marker, rollback)
	if err == nil {
		fw.record(tx, !rollback, seq, del)
		return tx, nil
	}
	fw.dropConn()
	if rollback || !commitSent {
		// Without COMMIT the server aborts the transaction when the session ends (or
		// ROLLBACK did): not committed, whatever the error was.
		fw.mu.Lock()
		if !rollback {
			fw.failedBefore++
		}
		fw.mu.Unlock()
		fw.t.Logf("writer: txn %d (%d events) failed before COMMIT: %v; not committed", tx.Index, n, err)
		fw.record(tx, false, seq, del)
		return tx, nil
	}
	committed, rerr := fw.resolve(tx, marker)
	if rerr != nil {
		return nil, fmt.Errorf("txn %d: %v; then: %w", tx.Index, err, rerr)
	}
	fw.mu.Lock()
	if committed {
		fw.unknownCommitted++
	} else {
		fw.unknownAborted++
	}
	fw.mu.Unlock()
	fw.t.Logf("writer: txn %d (%d events): COMMIT failed with %v; outcome from its marker row: committed=%v", tx.Index, n, err, committed)
	fw.record(tx, committed, seq, del)
	return tx, nil
}

// run executes the transaction; commitSent reports whether COMMIT may have reached the
// server.
func (fw *faultWriter) run(tx *txnRec, insert string, args []any, del []string, marker string, rollback bool) (commitSent bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := fw.conn
	tx.Before = time.Now()
	r, err := multiResult(ctx, c, "BEGIN; SELECT pg_current_wal_insert_lsn()::text, pg_current_xact_id()::text")
	if err != nil {
		return false, fmt.Errorf("begin: %w", err)
	}
	if tx.BeginLSN, err = parseLSN(r[0]); err != nil {
		return false, err
	}
	xid8, err := strconv.ParseUint(r[1], 10, 64)
	if err != nil {
		return false, fmt.Errorf("xid %q: %w", r[1], err)
	}
	tx.XID = uint32(xid8)
	if _, err := c.Exec(ctx, insert, args...); err != nil {
		return false, fmt.Errorf("insert: %w", err)
	}
	if len(del) > 0 {
		ct, err := c.Exec(ctx, fmt.Sprintf("WITH d AS (DELETE FROM %s WHERE id = ANY($1::uuid[]) RETURNING *) INSERT INTO %s SELECT * FROM d",
			fw.outbox, pgx.Identifier(strings.Split(fw.shadow, ".")).Sanitize()), del)
		if err != nil {
			return false, fmt.Errorf("delete: %w", err)
		}
		if ct.RowsAffected() != int64(len(del)) {
			return false, fmt.Errorf("delete: %d rows, want %d", ct.RowsAffected(), len(del))
		}
	}
	end, pre := "ROLLBACK", ""
	if !rollback {
		end, pre = "COMMIT", fmt.Sprintf("INSERT INTO %s (id) VALUES ('%s'); ", fw.marker, marker)
	}
	// One round trip, so that nothing else commits between the sample and our commit.
	q := pre + "SELECT pg_current_wal_insert_lsn()::text; " + end + "; SELECT pg_current_wal_lsn()::text"
	var hook *faultCommitHook
	if !rollback {
		hook = fw.hook.Swap(nil)
	}
	if hook != nil {
		sleep := fmt.Sprintf("SELECT pg_sleep(%.3f); ", hook.sleep.Seconds())
		if hook.afterCommit {
			q = pre + "SELECT pg_current_wal_insert_lsn()::text; COMMIT; " + sleep + "SELECT pg_current_wal_lsn()::text"
		} else {
			q = pre + "SELECT pg_current_wal_insert_lsn()::text; " + sleep + "COMMIT; SELECT pg_current_wal_lsn()::text"
		}
		hook.txn = tx
		close(hook.sent)
	}
	r, err = multiResult(ctx, c, q)
	if err != nil {
		return true, fmt.Errorf("%s: %w", strings.ToLower(end), err)
	}
	tx.After = time.Now()
	if len(r) < 2 {
		return true, fmt.Errorf("%s: %d results", strings.ToLower(end), len(r))
	}
	if tx.PreCommit, err = parseLSN(r[0]); err != nil {
		return true, err
	}
	if tx.PostLSN, err = parseLSN(r[len(r)-1]); err != nil {
		return true, err
	}
	return true, nil
}

// resolve finds out whether tx committed, from its marker row, once the backend that ran
// it is gone.
func (fw *faultWriter) resolve(tx *txnRec, marker string) (bool, error) {
	deadline := time.Now().Add(2 * time.Minute)
	pid, start := fw.pid, fw.pidStart
	fw.dropConn()
	for {
		if err := fw.ensureConn(deadline); err != nil {
			return false, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		committed, post, err := func() (bool, string, error) {
			since := time.Now()
			terminated := false
			for {
				var n int
				if err := fw.conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND backend_start = $2",
					int32(pid), start).Scan(&n); err != nil {
					return false, "", err
				}
				if n == 0 {
					break
				}
				if !terminated && time.Since(since) > 3*time.Second {
					fw.t.Logf("writer: backend %d of txn %d still there after 3 s; terminating it", pid, tx.Index)
					if _, err := fw.conn.Exec(ctx, "SELECT pg_terminate_backend($1)", int32(pid)); err != nil {
						return false, "", err
					}
					terminated = true
				}
				time.Sleep(100 * time.Millisecond)
			}
			var exists bool
			var post string
			err := fw.conn.QueryRow(ctx, fmt.Sprintf("SELECT EXISTS (SELECT 1 FROM %s WHERE id = $1), pg_current_wal_lsn()::text", fw.marker),
				marker).Scan(&exists, &post)
			return exists, post, err
		}()
		cancel()
		if err == nil {
			// The commit record, if any, ends before the current position.
			if tx.PostLSN, err = parseLSN(post); err != nil {
				return false, err
			}
			if tx.PreCommit == 0 {
				tx.PreCommit = tx.BeginLSN
			}
			tx.After = time.Now()
			return committed, nil
		}
		fw.dropConn()
		if time.Now().After(deadline) {
			return false, fmt.Errorf("resolve outcome of txn %d: %w", tx.Index, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (fw *faultWriter) record(tx *txnRec, committed bool, seq map[string]int, del []string) {
	w := fw.workload
	w.mu.Lock()
	defer w.mu.Unlock()
	tx.Committed = committed
	w.txns = append(w.txns, tx)
	if !committed {
		for _, ev := range tx.Events {
			w.rolledBack[ev.ID] = ev
		}
		return
	}
	for id, s := range seq {
		w.seq[id] = s
	}
	for _, ev := range tx.Events {
		ev.Pos = len(w.committed)
		w.committed = append(w.committed, ev)
	}
	if len(del) > 0 {
		fw.deleteTxns++
		fw.deletedRows += len(del)
	}
}

// faultSteadyOpts shape a steady workload.
type faultSteadyOpts struct {
	rate        float64 // transactions per second (0: as fast as possible)
	maxEvents   int     // events per transaction: uniform in [1, maxEvents]
	rollbackPct int     // share of transactions rolled back, in percent
	// burst, when set, asks for a committed transaction of the given size next; the
	// writer reports it on burstDone.
	burst     <-chan int
	burstDone chan<- *txnRec
}

// faultSteady is the workload the suite promises: 1–50 events, 10% rolled back, at
// WALRELAY_FAULT_RATE transactions per second.
func faultSteady(t *testing.T) faultSteadyOpts {
	return faultSteadyOpts{rate: faultRate(t), maxEvents: 50, rollbackPct: 10}
}

// runSteady writes transactions at a steady rate until stop is called; stop waits for
// the transaction in progress and returns the writer's error, if any. It is registered
// for cleanup too.
func (fw *faultWriter) runSteady(o faultSteadyOpts) (stop func() error) {
	quit := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		var interval time.Duration
		if o.rate > 0 {
			interval = time.Duration(float64(time.Second) / o.rate)
		}
		next := time.Now()
		for {
			select {
			case <-quit:
				errc <- nil
				return
			default:
			}
			n := 1 + fw.rng.IntN(o.maxEvents)
			rb := fw.rng.IntN(100) < o.rollbackPct
			isBurst := false
			select {
			case n = <-o.burst:
				rb, isBurst = false, true
			default:
			}
			tx, err := fw.writeTxn(n, rb)
			if err != nil {
				errc <- err
				return
			}
			if isBurst {
				o.burstDone <- tx
			}
			if interval > 0 {
				next = next.Add(interval)
				if d := time.Until(next); d > 0 {
					time.Sleep(d)
				} else if d < -time.Second {
					next = time.Now() // fell behind (a fault): no catch-up burst
				}
			}
		}
	}()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			close(quit)
			err = <-errc
		})
		return err
	}
	fw.t.Cleanup(func() { _ = stop() })
	return stop
}

// firstCommittedAfter returns the first committed transaction that began after at.
func (fw *faultWriter) firstCommittedAfter(at time.Time) *txnRec {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	for _, tx := range fw.txns {
		if tx.Committed && tx.Before.After(at) {
			return tx
		}
	}
	return nil
}

// extras returns the writer's counters for the summary line.
func (fw *faultWriter) extras() []string {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	return []string{
		fmt.Sprintf("delete_txns=%d", fw.deleteTxns),
		fmt.Sprintf("deleted_rows=%d", fw.deletedRows),
		fmt.Sprintf("rolled_back_events=%d", len(fw.rolledBack)),
		fmt.Sprintf("writer_reconnects=%d", fw.reconnects),
		fmt.Sprintf("unknown_outcome_committed=%d", fw.unknownCommitted),
		fmt.Sprintf("unknown_outcome_aborted=%d", fw.unknownAborted),
		fmt.Sprintf("failed_before_commit=%d", fw.failedBefore),
	}
}

// eventCount is the number of events written so far (committed or not).
func (fw *faultWriter) eventCount() int {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	return len(fw.committed) + len(fw.rolledBack)
}

// ---------------------------------------------------------------------------------------
// Verifier

// faultVerify is the harness verifier (verify) for a faultWriter: it also knows the rows
// deleted in their own transaction, and it reads only the workload's topics (a scenario
// may route other events, or dead letters, under the same prefix).
func faultVerify(t *testing.T, s *scenario, fw *faultWriter) *result {
	t.Helper()
	w := fw.workload
	committed, rolledBack := w.snapshot()
	rows := readOutbox(t, fw.dsn, s.table)
	for id, r := range readOutbox(t, fw.dsn, fw.shadow) {
		rows[id] = r
	}

	byID := map[string]*eventRec{}
	topicSet := map[string]bool{}
	for _, ev := range committed {
		byID[ev.ID] = ev
		topicSet[s.name+"."+ev.AggType] = true
	}
	start := time.Now()
	recs := map[string][]*kgo.Record{}
	for _, topic := range slices.Sorted(maps.Keys(topicSet)) {
		for k, v := range consumeAllIsolation(t, s.env.kafka, topic, []string{topic}, s.readCommitted) {
			if k == topic {
				recs[k] = v
			}
		}
	}
	t.Logf("consumed %d topics in %s", len(recs), time.Since(start).Round(time.Millisecond))

	return judge(t, s, committed, byID, rolledBack, rows, recs)
}

// faultFinish stops the writer, waits until walrelay confirmed everything it wrote,
// verifies, logs the summary line and asserts the delivery contract.
func faultFinish(t *testing.T, s *scenario, fw *faultWriter, stop func() error, p *walrelayProc, name string, extra ...string) *result {
	t.Helper()
	if err := stop(); err != nil {
		t.Fatalf("workload: %v", err)
	}
	target := currentLSN(t, fw.dsn)
	txns, ctxns, events, rbevents := fw.stats()
	t.Logf("workload stopped: %d transactions (%d committed, %d events; %d rolled-back or failed events); final LSN %s",
		txns, ctxns, events, rbevents, target)
	if p != nil {
		waitSlotLSN(t, fw.dsn, s.name, target, 3*time.Minute, p)
	}
	res := faultVerify(t, s, fw)
	t.Log(res.summary(name, append(extra, fw.extras()...)...))
	res.requireClean(t)
	return res
}

// ---------------------------------------------------------------------------------------
// walrelay processes

// faultWithFlag returns args with flag's value replaced (or the flag appended).
func faultWithFlag(args []string, flag, value string) []string {
	out := slices.Clone(args)
	for i := 0; i+1 < len(out); i++ {
		if out[i] == flag {
			out[i+1] = value
			return out
		}
	}
	return append(out, flag, value)
}

// faultLogCount counts walrelay log lines whose msg contains substr.
func faultLogCount(p *walrelayProc, substr string) int {
	n := 0
	for _, m := range p.logLines() {
		if strings.Contains(fmt.Sprint(m["msg"]), substr) {
			n++
		}
	}
	return n
}

// ---------------------------------------------------------------------------------------
// Memory

// faultProcKB reads a kB field (VmRSS, VmHWM) of /proc/<pid>/status.
func faultProcKB(pid int, field string) (int64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, err := strconv.ParseInt(f[0], 10, 64)
				return n, err == nil
			}
		}
	}
	return 0, false
}

// faultRSS samples a process's VmRSS periodically and remembers the peak; it also
// keeps the kernel's own high-water mark (VmHWM) as last read.
type faultRSS struct {
	pid     int
	mu      sync.Mutex
	peakKB  int64
	hwmKB   int64
	samples int
	quit    chan struct{}
	done    chan struct{}
}

func startFaultRSS(t *testing.T, pid int, every time.Duration) *faultRSS {
	r := &faultRSS{pid: pid, quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		tk := time.NewTicker(every)
		defer tk.Stop()
		for {
			r.sample()
			select {
			case <-r.quit:
				return
			case <-tk.C:
			}
		}
	}()
	t.Cleanup(r.stop)
	return r
}

func (r *faultRSS) sample() {
	rss, ok := faultProcKB(r.pid, "VmRSS")
	hwm, _ := faultProcKB(r.pid, "VmHWM")
	if !ok {
		return
	}
	r.mu.Lock()
	r.samples++
	r.peakKB = max(r.peakKB, rss)
	r.hwmKB = max(r.hwmKB, hwm)
	r.mu.Unlock()
}

func (r *faultRSS) stop() {
	select {
	case <-r.quit:
	default:
		close(r.quit)
	}
	<-r.done
}

// peak returns the sampled peak VmRSS and the kernel's VmHWM, in MiB, and the number of
// samples.
func (r *faultRSS) peak() (rssMiB, hwmMiB float64, samples int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return float64(r.peakKB) / 1024, float64(r.hwmKB) / 1024, r.samples
}

// ---------------------------------------------------------------------------------------
// Kafka broker control

// faultBroker stops, kills, pauses and restarts the test broker (test/env/kafka.sh) and
// always leaves it running and unpaused at the end of the test. Create it after the
// scenario and before walrelay, so that its cleanup runs after walrelay was killed and
// before the scenario deletes its topics.
type faultBroker struct {
	t      *testing.T
	env    *testEnv
	down   bool
	paused int // pid stopped with SIGSTOP
}

func newFaultBroker(t *testing.T, env *testEnv) *faultBroker {
	b := &faultBroker{t: t, env: env}
	t.Cleanup(func() {
		if b.paused != 0 {
			_ = syscall.Kill(b.paused, syscall.SIGCONT)
			b.paused = 0
		}
		if b.down {
			if err := runEnvScript(t, env, 3*time.Minute, kafkaScriptEnv(env), "kafka.sh", "start"); err != nil {
				t.Errorf("cleanup: could not bring the broker back: %v", err)
			}
			b.down = false
		}
	})
	return b
}

func (b *faultBroker) script(arg string) time.Duration {
	b.t.Helper()
	start := time.Now()
	if err := runEnvScript(b.t, b.env, 3*time.Minute, kafkaScriptEnv(b.env), "kafka.sh", arg); err != nil {
		b.t.Fatal(err)
	}
	return time.Since(start)
}

func (b *faultBroker) kill() time.Duration { b.down = true; return b.script("kill") }
func (b *faultBroker) stop() time.Duration { b.down = true; return b.script("stop") }

// start starts the broker and waits until it answers with leaders for all partitions.
func (b *faultBroker) start() time.Duration {
	d := b.script("start")
	b.down = false
	return d
}

// restart is kafka.sh restart (stop if running, then start).
func (b *faultBroker) restart() time.Duration {
	b.down = true
	d := b.script("restart")
	b.down = false
	return d
}

// pid returns the broker's pid from kafka.sh's pid file, checked against its command line.
func (b *faultBroker) pid() int {
	b.t.Helper()
	pf := filepath.Join(b.env.dir, "kafka", "kafka.pid")
	raw, err := os.ReadFile(pf)
	if err != nil {
		b.t.Fatalf("broker pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		b.t.Fatalf("broker pid file %s: %v", pf, err)
	}
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if !strings.Contains(string(cmdline), "kafka.Kafka") {
		b.t.Fatalf("pid %d from %s is not the broker", pid, pf)
	}
	return pid
}

// pause stops the broker process with SIGSTOP: its sockets stay open and accept
// connections into the backlog, but nothing answers (a black hole for clients).
func (b *faultBroker) pause() {
	b.t.Helper()
	pid := b.pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		b.t.Fatalf("SIGSTOP broker %d: %v", pid, err)
	}
	b.paused = pid
	b.t.Logf("broker pid %d stopped with SIGSTOP", pid)
}

func (b *faultBroker) resume() {
	b.t.Helper()
	if b.paused == 0 {
		return
	}
	if err := syscall.Kill(b.paused, syscall.SIGCONT); err != nil {
		b.t.Fatalf("SIGCONT broker %d: %v", b.paused, err)
	}
	b.t.Logf("broker pid %d continued with SIGCONT", b.paused)
	b.paused = 0
}

// ---------------------------------------------------------------------------------------
// Postgres

// faultResetPool closes the idle connections of dsn's pool (after a server restart they
// are dead, and the harness helpers would fail on the first use).
func faultResetPool(t *testing.T, dsn string) {
	p := pgPool(t, dsn)
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, c := range idle {
		_ = c.Close(context.Background())
	}
}

// faultSlotPID returns the pid of the walsender holding the slot (0 when none).
func faultSlotPID(t *testing.T, dsn, slot string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	si, err := querySlot(ctx, t, dsn, slot)
	if err != nil {
		t.Fatalf("query slot %s: %v", slot, err)
	}
	return si.activePID
}
