package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// eventRec is one outbox row the workload inserted.
type eventRec struct {
	ID        string
	AggType   string
	AggID     string
	EventType string
	Txn       *txnRec
	Pos       int // position in global commit order (committed events only)
}

// txnRec is one transaction of the workload, with what the workload knows about its
// position in the WAL.
type txnRec struct {
	Index     int
	Committed bool
	XID       uint32
	BeginLSN  lsn // insert position right after BEGIN: every record of the txn is after it
	PreCommit lsn // insert position just before COMMIT: the commit record ends after it
	PostLSN   lsn // pg_current_wal_lsn() after COMMIT: the commit record ends at or before it
	Before    time.Time
	After     time.Time
	Events    []*eventRec
}

type aggregate struct {
	typ, id string
}

// workload writes outbox transactions over one connection, so commit order is the order
// of its calls. It is safe to read its results (committedEvents, ...) concurrently with a
// running writer.
type workload struct {
	t     *testing.T
	table string
	conn  *pgx.Conn
	rng   *mrand.Rand
	aggs  []aggregate
	seq   map[string]int // per-aggregate sequence number of the next committed event

	// nullPayloadEvery > 0 makes every n-th event carry a NULL payload (a tombstone).
	nullPayloadEvery int
	n                int

	mu         sync.Mutex
	txns       []*txnRec
	committed  []*eventRec
	rolledBack map[string]*eventRec
}

// snapshot returns copies of the events committed and rolled back so far.
func (w *workload) snapshot() (committed []*eventRec, rolledBack map[string]*eventRec) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.committed), maps.Clone(w.rolledBack)
}

var aggregateTypes = []string{"order", "customer", "invoice"}
var eventTypes = []string{"created", "updated", "shipped", "cancelled"}

func newWorkload(t *testing.T, env *testEnv, table string, nAggs int, rng *mrand.Rand) *workload {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, env.pgDSN)
	if err != nil {
		t.Fatalf("workload connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	w := &workload{
		t:          t,
		table:      table,
		conn:       conn,
		rng:        rng,
		seq:        map[string]int{},
		rolledBack: map[string]*eventRec{},
	}
	for i := range nAggs {
		typ := aggregateTypes[i%len(aggregateTypes)]
		w.aggs = append(w.aggs, aggregate{typ: typ, id: fmt.Sprintf("%s-%04d", typ, i)})
	}
	return w
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func randHex(r *mrand.Rand, n int) string {
	const digits = "0123456789abcdef"
	var sb strings.Builder
	for range n {
		sb.WriteByte(digits[r.IntN(16)])
	}
	return sb.String()
}

// multiResult runs sql (several statements, simple protocol) and returns the first column
// of the first row of every statement that returned rows.
func multiResult(ctx context.Context, conn *pgx.Conn, sql string) ([]string, error) {
	res, err := conn.PgConn().Exec(ctx, sql).ReadAll()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range res {
		if len(r.Rows) > 0 {
			for _, col := range r.Rows[0] {
				out = append(out, string(col))
			}
		}
	}
	return out, nil
}

// writeTxn writes one transaction of n events on random aggregates and commits it, or
// rolls it back. On error the connection is left in an unknown state: stop writing.
func (w *workload) writeTxn(ctx context.Context, n int, rollback bool) (*txnRec, error) {
	w.mu.Lock()
	tx := &txnRec{Index: len(w.txns), Committed: !rollback}
	w.mu.Unlock()

	// Choose events; a rolled-back transaction does not consume sequence numbers.
	seq := map[string]int{}
	var sb strings.Builder
	fmt.Fprintf(&sb, "INSERT INTO %s (id, aggregate_type, aggregate_id, event_type, payload, headers) VALUES ",
		pgx.Identifier(strings.Split(w.table, ".")).Sanitize())
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

		w.n++
		var payload any
		if w.nullPayloadEvery <= 0 || w.n%w.nullPayloadEvery != 0 {
			// Unicode, escapes and key order that jsonb normalises: the value must still be
			// byte-equal to payload::text.
			payload = fmt.Sprintf(`{"seq": %d, "aggregate": %q, "txn": %d, "i": %d, "rolled_back": %t,
				"note": "caf\u00e9 \"quoted\" \\ tab\t😀", "amount": 12.50, "tags": ["a", "b"]}`,
				s, a.id, tx.Index, i, rollback)
		}
		hdr := map[string]any{
			"traceparent": fmt.Sprintf("00-%s-%s-01", randHex(w.rng, 32), randHex(w.rng, 16)),
			"n":           1,
		}
		if w.rng.IntN(2) == 0 {
			hdr["tenant"] = fmt.Sprintf("tenant-%d", w.rng.IntN(5))
			hdr["flag"] = true
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

	tx.Before = time.Now()
	r, err := multiResult(ctx, w.conn, "BEGIN; SELECT pg_current_wal_insert_lsn()::text, pg_current_xact_id()::text")
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	if tx.BeginLSN, err = parseLSN(r[0]); err != nil {
		return nil, err
	}
	xid8, err := strconv.ParseUint(r[1], 10, 64)
	if err != nil {
		return nil, fmt.Errorf("xid %q: %w", r[1], err)
	}
	tx.XID = uint32(xid8)
	if _, err := w.conn.Exec(ctx, sb.String(), args...); err != nil {
		return nil, fmt.Errorf("insert: %w", err)
	}
	end := "COMMIT"
	if rollback {
		end = "ROLLBACK"
	}
	// One round trip, so that nothing else commits between the sample and our commit.
	r, err = multiResult(ctx, w.conn, "SELECT pg_current_wal_insert_lsn()::text; "+end+"; SELECT pg_current_wal_lsn()::text")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", strings.ToLower(end), err)
	}
	tx.After = time.Now()
	if tx.PreCommit, err = parseLSN(r[0]); err != nil {
		return nil, err
	}
	if tx.PostLSN, err = parseLSN(r[1]); err != nil {
		return nil, err
	}

	w.mu.Lock()
	defer w.mu.Unlock()
	w.txns = append(w.txns, tx)
	if rollback {
		for _, ev := range tx.Events {
			w.rolledBack[ev.ID] = ev
		}
		return tx, nil
	}
	for id, s := range seq {
		w.seq[id] = s
	}
	for _, ev := range tx.Events {
		ev.Pos = len(w.committed)
		w.committed = append(w.committed, ev)
	}
	return tx, nil
}

// mustWriteTxn is writeTxn for the test goroutine.
func (w *workload) mustWriteTxn(n int, rollback bool) *txnRec {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tx, err := w.writeTxn(ctx, n, rollback)
	if err != nil {
		w.t.Fatalf("workload: %v", err)
	}
	return tx
}

// continuousOpts shape a continuous workload.
type continuousOpts struct {
	maxEvents    int           // events per transaction: uniform in [1, maxEvents]
	rollbackPct  int           // share of transactions rolled back, in percent
	maxPause     time.Duration // pause between transactions: uniform in [0, maxPause)
	maxTxns      int           // stop after this many transactions (0: no limit)
	reportEveryN int           // log progress every N transactions (0: never)
	// burst, when set, asks for a committed transaction of the given size next; the
	// writer reports it on burstDone once committed.
	burst     <-chan int
	burstDone chan<- *txnRec
}

// runContinuous writes transactions until stop is called (or maxTxns is reached); stop
// waits for the transaction in progress and returns the writer's error, if any.
func (w *workload) runContinuous(o continuousOpts) (stop func() error) {
	quit := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		for i := 0; o.maxTxns == 0 || i < o.maxTxns; i++ {
			select {
			case <-quit:
				errc <- nil
				return
			default:
			}
			n := 1 + w.rng.IntN(o.maxEvents)
			rb := w.rng.IntN(100) < o.rollbackPct
			isBurst := false
			select {
			case n = <-o.burst:
				rb, isBurst = false, true
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			tx, err := w.writeTxn(ctx, n, rb)
			cancel()
			if err != nil {
				errc <- err
				return
			}
			if isBurst {
				o.burstDone <- tx
			}
			if o.reportEveryN > 0 && (i+1)%o.reportEveryN == 0 {
				w.t.Logf("workload: %d transactions", i+1)
			}
			if o.maxPause > 0 {
				time.Sleep(time.Duration(w.rng.Int64N(int64(o.maxPause))))
			}
		}
		errc <- nil
	}()
	var once sync.Once
	var err error
	return func() error {
		once.Do(func() {
			close(quit)
			err = <-errc
		})
		return err
	}
}

// stats returns counts of what was written so far.
func (w *workload) stats() (txns, committedTxns, committedEvents, rolledBackEvents int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, tx := range w.txns {
		if tx.Committed {
			committedTxns++
		}
	}
	return len(w.txns), committedTxns, len(w.committed), len(w.rolledBack)
}

// lastPostLSN is the PostLSN of the last committed transaction.
func (w *workload) lastPostLSN() lsn {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := len(w.txns) - 1; i >= 0; i-- {
		if w.txns[i].Committed {
			return w.txns[i].PostLSN
		}
	}
	return 0
}

// commitBursts asks the running writer for one large transaction of each size on burst and
// waits until all of them are committed (reported on done), within 60 s.
func commitBursts(t *testing.T, burst chan<- int, done <-chan *txnRec, sizes ...int) {
	t.Helper()
	for _, n := range sizes {
		burst <- n
	}
	for range sizes {
		select {
		case tx := <-done:
			t.Logf("burst: txn %d with %d events committed, commit end ≤ %s", tx.Index, len(tx.Events), tx.PostLSN)
		case <-time.After(60 * time.Second):
			t.Fatal("the workload did not commit the burst transactions within 60 s")
		}
	}
}
