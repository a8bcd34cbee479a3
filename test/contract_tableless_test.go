package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestContractTableless: the tableless outbox (docs/outbox-contract.md). walrelay.emit (migration
// 002) in walrelay.emit_mode 'wal' writes no row, only a transactional logical message;
// the events of committed transactions arrive (topic from aggregate_type, key, the payload
// as JSON text, headers including id = the uuid walrelay.emit returned), those of
// rolled-back transactions and rolled-back savepoints do not, and the outbox table stays
// empty. A non-transactional pg_logical_emit_message with the outbox prefix escapes
// rollback, so walrelay must not turn it into a record: it is counted in
// walrelay_changes_ignored_total{reason="non_transactional_message"} instead.
//
// Logical messages are not filtered by publication: every slot of the database decodes
// them. The test therefore runs in a database of its own, so that its messages reach no
// other walrelay and no other test's messages reach this one.
func TestContractTableless(t *testing.T) {
	env := requireEnv(t)
	c := newContract(t, env, "ctableless")
	dsn := c.createDatabase(c.name)
	c.migrate(dsn, c.table) // the (unused) outbox table and walrelay.emit
	prefix := c.name + "."
	// The tableless outbox is opt-in: walrelay.emit's wal mode needs this prefix.
	p := c.startReady("--postgres-dsn", dsn, "--message-prefix", "walrelay.outbox")
	addr := p.metricsAddr()

	conn := connect(t, dsn)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := conn.Exec(ctx, "SET walrelay.emit_mode = 'wal'"); err != nil {
		t.Fatal(err)
	}

	str := func(s string) *string { return &s }
	// emit calls walrelay.emit; headers nil uses the function's default ('{}').
	emit := func(ctx context.Context, conn *pgx.Conn, aggType, aggID, evType string, payload *string, headers map[string]any) (*emitted, error) {
		e := &emitted{aggType: aggType, aggID: aggID, evType: evType, payload: payload, headers: map[string]string{}}
		var err error
		if headers == nil {
			err = conn.QueryRow(ctx, `SELECT walrelay.emit($1, $2, $3, $4::jsonb)::text`,
				aggType, aggID, evType, payload).Scan(&e.id)
		} else {
			b, _ := json.Marshal(headers)
			err = conn.QueryRow(ctx, `SELECT walrelay.emit($1, $2, $3, $4::jsonb, $5::jsonb)::text`,
				aggType, aggID, evType, payload, string(b)).Scan(&e.id)
			for k, v := range headers {
				if s, ok := v.(string); ok {
					e.headers[k] = s
				}
			}
		}
		return e, err
	}
	nonTxMessage := func(ctx context.Context, conn *pgx.Conn) (string, error) {
		id := newUUID()
		msg := fmt.Sprintf(`{"id": %q, "aggregate_type": "order", "aggregate_id": "o-nontx", "event_type": "Escaped", "payload": {"x": 1}}`, id)
		_, err := conn.Exec(ctx, `SELECT pg_logical_emit_message(false, 'walrelay.outbox', $1::text)`, msg)
		return id, err
	}

	var committed, rolledBack []*emitted
	var nonTx []string
	// each runs one transaction; it returns the events it emitted and the ones it
	// expects to arrive.
	txn := func(rollback bool, body func(ctx context.Context, conn *pgx.Conn) (sent, kept []*emitted, err error)) *txnInfo {
		var sent, kept []*emitted
		tx := runTxn(t, conn, rollback, func(ctx context.Context, conn *pgx.Conn) error {
			var err error
			sent, kept, err = body(ctx, conn)
			return err
		})
		for _, e := range sent {
			e.tx = tx
			if !rollback && slices.Contains(kept, e) {
				committed = append(committed, e)
			} else {
				rolledBack = append(rolledBack, e)
			}
		}
		return tx
	}
	// all emits events and keeps all of them.
	all := func(specs ...func(ctx context.Context, conn *pgx.Conn) (*emitted, error)) func(ctx context.Context, conn *pgx.Conn) ([]*emitted, []*emitted, error) {
		return func(ctx context.Context, conn *pgx.Conn) ([]*emitted, []*emitted, error) {
			var out []*emitted
			for _, s := range specs {
				e, err := s(ctx, conn)
				if err != nil {
					return nil, nil, err
				}
				out = append(out, e)
			}
			return out, out, nil
		}
	}
	ev := func(aggType, aggID, evType string, payload *string, headers map[string]any) func(ctx context.Context, conn *pgx.Conn) (*emitted, error) {
		return func(ctx context.Context, conn *pgx.Conn) (*emitted, error) {
			return emit(ctx, conn, aggType, aggID, evType, payload, headers)
		}
	}

	txn(false, all(ev("order", "o-1", "OrderCreated", str(`{"total": 99.90, "items": ["a", "b"], "note": "caf\u00e9 😀"}`),
		map[string]any{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "t1", "n": 1, "nested": map[string]any{"x": "y"}})))
	txn(true, all(ev("order", "o-1", "OrderCancelled", str(`{"rolled": "back"}`), nil),
		ev("customer", "c-1", "CustomerDeleted", str(`{}`), map[string]any{"traceparent": "tp-rb"})))
	txn(false, all(ev("order", "o-1", "OrderPaid", str(`{"z": 1, "a": 2}`), map[string]any{"traceparent": "tp-3"}),
		ev("customer", "c-1", "CustomerCreated", str(`{"name": "Zoë"}`), nil), // the default headers argument
		// A jsonb string: the value is its JSON text, quotes included, as in table
		// mode (payload::text) — switching emit_mode must not change records.
		ev("order", "o-2", "OrderCreated", str(`"a JSON string"`), map[string]any{}),
		ev("order", "o-2", "OrderNoted", str(`[1, 2.50, null]`), map[string]any{})))
	// A rolled-back transaction whose non-transactional message escapes the rollback.
	txn(true, func(ctx context.Context, conn *pgx.Conn) ([]*emitted, []*emitted, error) {
		e, err := emit(ctx, conn, "order", "o-3", "OrderLost", str(`{"lost": true}`), nil)
		if err != nil {
			return nil, nil, err
		}
		id, err := nonTxMessage(ctx, conn)
		nonTx = append(nonTx, id)
		return []*emitted{e}, nil, err
	})
	// A savepoint rolled back inside a committed transaction.
	txn(false, func(ctx context.Context, conn *pgx.Conn) ([]*emitted, []*emitted, error) {
		a, err := emit(ctx, conn, "customer", "c-2", "Before", str(`{"step": 1}`), nil)
		if err != nil {
			return nil, nil, err
		}
		if _, err := conn.Exec(ctx, "SAVEPOINT sp"); err != nil {
			return nil, nil, err
		}
		b, err := emit(ctx, conn, "customer", "c-2", "RolledBackToSavepoint", str(`{"step": 2}`), nil)
		if err != nil {
			return nil, nil, err
		}
		if _, err := conn.Exec(ctx, "ROLLBACK TO SAVEPOINT sp"); err != nil {
			return nil, nil, err
		}
		cc, err := emit(ctx, conn, "customer", "c-2", "After", nil, nil) // NULL payload: a tombstone
		if err != nil {
			return nil, nil, err
		}
		return []*emitted{a, b, cc}, []*emitted{a, cc}, nil
	})
	// A non-transactional message outside any transaction block.
	id, err := nonTxMessage(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	nonTx = append(nonTx, id)
	last := txn(false, all(ev("order", "o-1", "OrderShipped", str(`{"carrier": "dhl"}`), map[string]any{"traceparent": "tp-last"})))

	waitSlotLSN(t, env.pgDSN, c.name, last.post, 60*time.Second, p)

	var want []*wantRec
	for _, e := range committed {
		var value []byte
		if e.payload != nil {
			var text string
			if err := conn.QueryRow(ctx, "SELECT $1::jsonb::text", *e.payload).Scan(&text); err != nil {
				t.Fatal(err)
			}
			value = []byte(text)
		}
		h := stdHeaders(e.id, e.evType, e.aggType)
		for k, v := range e.headers {
			h[k] = v
		}
		want = append(want, &wantRec{id: e.id, topic: prefix + e.aggType, key: e.aggID, value: value,
			hdrs: h, exact: true, tx: e.tx})
	}
	recs := consumeAll(t, env.kafka, prefix, expectedTopics(want))
	d := checkDelivery(t, recs, want)
	rbDelivered, nonTxDelivered := 0, 0
	for _, e := range rolledBack {
		if _, ok := findRecord(recs, e.id); ok {
			rbDelivered++
			t.Errorf("rolled-back event %s (%s) was delivered", e.id, e.evType)
		}
	}
	for _, id := range nonTx {
		if _, ok := findRecord(recs, id); ok {
			nonTxDelivered++
			t.Errorf("non-transactional message %s was delivered", id)
		}
	}

	var rows int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+qtable(c.table)).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Errorf("outbox table %s has %d rows in wal mode, want 0", c.table, rows)
	}
	ignored, ok := metricValue(t, addr, `walrelay_changes_ignored_total{reason="non_transactional_message"}`)
	if !ok || int(ignored) != len(nonTx) {
		t.Errorf(`walrelay_changes_ignored_total{reason="non_transactional_message"} = %v (present %v), want %d`, ignored, ok, len(nonTx))
	}
	t.Log(d.summary("tableless", fmt.Sprintf("rolled_back=%d rolled_back_delivered=%d non_transactional=%d non_transactional_delivered=%d non_transactional_ignored_metric=%v outbox_rows=%d",
		len(rolledBack), rbDelivered, len(nonTx), nonTxDelivered, ignored, rows)))
	d.requireExact(t)
}

// emitted is one event written with walrelay.emit.
type emitted struct {
	id, aggType, aggID, evType string
	payload                    *string           // the jsonb argument; nil: SQL NULL
	headers                    map[string]string // its string headers
	tx                         *txnInfo
}
