package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// walrelayHasFlag reports whether `walrelay run -h` lists --name.
func walrelayHasFlag(t *testing.T, name string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, walrelayBin, "run", "-h")
	cmd.Env = childEnv(nil)
	out, _ := cmd.CombinedOutput()
	return strings.Contains(string(out), "-"+name+" ")
}

// TestContractSchemaChange: ALTER TABLE on the outbox while walrelay streams (README
// "Schema changes"). A header column mapped with --header-columns that does not exist yet
// is added with ADD COLUMN mid-stream: no event is lost, events before the change carry
// no such header, events after it carry it (when not NULL). The same holds when the
// column is added inside a transaction between two of its inserts (a Relation message in
// the middle of a transaction). Then dropping a mapped column (event_type) stops
// walrelay with an ERROR line naming the column, and the slot does not pass the first
// insert after the drop.
func TestContractSchemaChange(t *testing.T) {
	env := requireEnv(t)
	if !walrelayHasFlag(t, "header-columns") {
		t.Fatal("walrelay run has no --header-columns flag (header columns, README: schema changes); this test maps trace_id with it")
	}
	c := newContract(t, env, "cschema")
	c.migrate(env.pgDSN, c.table)
	prefix := c.name + "."
	p := c.startReady("--header-columns", "trace_id,note")

	conn := connect(t, env.pgDSN)
	n := 0
	var want, cur []*wantRec // all expected records; those of the open transaction
	// insert writes one event; extra holds values of the header columns (nil: NULL).
	insert := func(ctx context.Context, conn *pgx.Conn, extra map[string]*string) error {
		n++
		id := newUUID()
		aggType := []string{"order", "invoice"}[n%2]
		aggID := fmt.Sprintf("%s-%d", aggType, n%3)
		cols := "id, aggregate_type, aggregate_id, event_type, payload, headers"
		vals := "$1::uuid, $2, $3, $4, $5::jsonb, $6::jsonb"
		args := []any{id, aggType, aggID, "Changed", fmt.Sprintf(`{"n": %d}`, n), fmt.Sprintf(`{"traceparent": "tp-%d"}`, n)}
		h := stdHeaders(id, "Changed", aggType, "traceparent", fmt.Sprintf("tp-%d", n))
		var absent []string
		for _, col := range []string{"trace_id", "note"} {
			v, ok := extra[col]
			if !ok {
				absent = append(absent, col)
				continue
			}
			args = append(args, v)
			cols += ", " + col
			vals += fmt.Sprintf(", $%d", len(args))
			if v == nil {
				absent = append(absent, col)
			} else {
				h[col] = *v
			}
		}
		if _, err := conn.Exec(ctx, "INSERT INTO "+qtable(c.table)+" ("+cols+") VALUES ("+vals+")", args...); err != nil {
			return err
		}
		cur = append(cur, &wantRec{id: id, topic: prefix + aggType, key: aggID,
			value: []byte(fmt.Sprintf(`{"n": %d}`, n)), hdrs: h, absent: absent, exact: true})
		return nil
	}
	str := func(s string) *string { return &s }
	txn := func(body func(ctx context.Context, conn *pgx.Conn) error) *txnInfo {
		cur = nil
		tx := runTxn(t, conn, false, body)
		for _, w := range cur {
			w.tx = tx
		}
		want = append(want, cur...)
		return tx
	}

	// Phase 1: no trace_id column yet.
	for range 5 {
		txn(func(ctx context.Context, conn *pgx.Conn) error {
			for range 3 {
				if err := insert(ctx, conn, nil); err != nil {
					return err
				}
			}
			return nil
		})
	}
	before := len(want)
	// Phase 2: the column appears while walrelay streams.
	c.exec("ALTER TABLE " + qtable(c.table) + " ADD COLUMN trace_id text")
	for i := range 5 {
		txn(func(ctx context.Context, conn *pgx.Conn) error {
			for k := range 3 {
				v := str(fmt.Sprintf("trace-%d-%d", i, k))
				if k == 2 {
					v = nil // NULL: no header
				}
				if err := insert(ctx, conn, map[string]*string{"trace_id": v}); err != nil {
					return err
				}
			}
			return nil
		})
	}
	// Phase 3: a column added inside a transaction, between two of its inserts.
	last := txn(func(ctx context.Context, conn *pgx.Conn) error {
		if err := insert(ctx, conn, map[string]*string{"trace_id": str("trace-mid-1")}); err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, "ALTER TABLE "+qtable(c.table)+" ADD COLUMN note text"); err != nil {
			return err
		}
		return insert(ctx, conn, map[string]*string{"trace_id": str("trace-mid-2"), "note": str("added mid-transaction")})
	})
	waitSlotLSN(t, env.pgDSN, c.name, last.post, 60*time.Second, p)

	recs := consumeAll(t, env.kafka, prefix, expectedTopics(want))
	d := checkDelivery(t, recs, want)
	withHeader := 0
	for _, w := range want {
		if r := d.byID[w.id]; len(r) > 0 && header(r[0], "trace_id") != "" {
			withHeader++
		}
	}

	// Dropping a mapped column stops walrelay at the next insert.
	c.exec("ALTER TABLE " + qtable(c.table) + " DROP COLUMN event_type")
	droppedID := newUUID()
	dropTx := runTxn(t, conn, false, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "INSERT INTO "+qtable(c.table)+" (id, aggregate_type, aggregate_id, payload) VALUES ($1::uuid, 'order', 'order-x', '{}')", droppedID)
		return err
	})
	if !p.waitExit(60 * time.Second) {
		t.Fatalf("walrelay still running 60 s after an insert without the mapped column event_type\n%s", p.tail(20))
	}
	if p.exitCode() == 0 {
		t.Errorf("walrelay exited 0 after the mapped column event_type was dropped, want non-zero")
	}
	line := errorLine(p.log(), []string{"event_type"})
	if line == "" {
		t.Errorf("no ERROR line names the dropped column event_type\n%s", p.tail(20))
	} else {
		t.Logf("ERROR line: %s", line)
	}
	confirmed := slotLSN(t, env.pgDSN, c.name)
	if confirmed >= dropTx.post {
		t.Errorf("slot confirmed_flush_lsn %s passed the insert after the drop (transaction [%s, %s])", confirmed, dropTx.begin, dropTx.post)
	}
	after := consumeAll(t, env.kafka, prefix, nil)
	if r, ok := findRecord(after, droppedID); ok {
		t.Errorf("the insert after the drop was delivered at %s/%d@%d", r.Topic, r.Partition, r.Offset)
	}

	t.Log(d.summary("schema_change", fmt.Sprintf("before_add_column=%d after_add_column=%d with_trace_id_header=%d drop_mapped_column_exit=%d error_line_names_column=%v slot=%s drop_txn=[%s,%s]",
		before, len(want)-before, withHeader, p.exitCode(), line != "", confirmed, dropTx.begin, dropTx.post)))
	d.requireExact(t)
}
