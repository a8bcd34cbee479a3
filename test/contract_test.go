package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The contract tests check the outbox contract of docs/outbox-contract.md end to
// end, one shape of outbox at a time: the Debezium column preset, every payload type,
// several outbox tables with their own routing, the tableless outbox, dead letters,
// schema changes while streaming, and an idempotent consumer. Each runs in isolation
// (its own tables, slot, publication and topic prefix) and logs one summary line
// starting with "scenario=contract/".

// stdHeaders are the headers every record carries (docs/outbox-contract.md), plus extra key/value
// pairs.
func stdHeaders(id, eventType, aggType string, extra ...string) map[string]string {
	h := map[string]string{"id": id, "event_type": eventType, "aggregate_type": aggType}
	for i := 0; i+1 < len(extra); i += 2 {
		h[extra[i]] = extra[i+1]
	}
	return h
}

// expectedTopics lists the distinct topics of want.
func expectedTopics(want []*wantRec) []string {
	set := map[string]bool{}
	for _, w := range want {
		set[w.topic] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// payloadTexts reads payload::text of the rows of table, by id (nil for NULL).
func payloadTexts(t *testing.T, dsn, table, idCol string) map[string]*string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := map[string]*string{}
	err := pgPool(t, dsn).with(ctx, func(c *pgx.Conn) error {
		rows, err := c.Query(ctx, fmt.Sprintf("SELECT %s::text, payload::text FROM %s",
			pgx.Identifier{idCol}.Sanitize(), qtable(table)))
		if err != nil {
			return err
		}
		for rows.Next() {
			var id string
			var payload *string
			if err := rows.Scan(&id, &payload); err != nil {
				return err
			}
			out[id] = payload
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatalf("read payloads of %s: %v", table, err)
	}
	return out
}

func bytesOrNil(s *string) []byte {
	if s == nil {
		return nil
	}
	return []byte(*s)
}

// TestContractDebeziumPreset: a table built for Debezium's outbox event router works
// unchanged with --columns debezium and Debezium's topic naming: topic
// outbox.event.<aggregatetype>, key aggregateid, header id = the row's uuid, value the
// payload's JSON text itself (byte-equal to payload::text, not a JSON string), a NULL
// payload a tombstone.
func TestContractDebeziumPreset(t *testing.T) {
	env := requireEnv(t)
	c := newContract(t, env, "cdebezium")
	// Debezium's documented outbox table.
	c.exec(`CREATE TABLE ` + qtable(c.table) + ` (
		id            uuid         PRIMARY KEY,
		aggregatetype varchar(255) NOT NULL,
		aggregateid   varchar(255) NOT NULL,
		type          varchar(255) NOT NULL,
		payload       jsonb
	)`)
	prefix := c.name + "."
	p := c.startReady("--columns", "debezium", "--topic", prefix+"outbox.event.{aggregate_type}")

	type ev struct {
		aggType, aggID, typ string
		payload             *string
	}
	str := func(s string) *string { return &s }
	txns := [][]ev{
		{{"Order", "o-1", "OrderCreated", str(`{"orderId": "o-1", "total": 99.90, "items": [{"sku": "A-1", "qty": 2}]}`)}},
		{{"Order", "o-1", "OrderPaid", str(`{"z": 1, "a": {"nested": true}, "a": "duplicate key: the last wins"}`)},
			{"Customer", "c-7", "CustomerRenamed", str(`{"name": "Zoë \u00e9 \"quoted\" \\ 😀", "ctl": "tab\tnewline\n"}`)},
			{"Order", "o-2", "OrderCreated", str(`[1, 2.50, "three", null, {"four": 4}]`)}},
		{{"Order", "o-1", "OrderDeleted", nil}}, // NULL payload: a tombstone
		{{"Customer", "c-7", "CustomerNote", str(`"a JSON string"`)},
			{"Customer", "c-8", "CustomerCreated", str(`{"big": 12345678901234567890.000001, "e": 1e3}`)}},
		{{"Order", "o-2", "OrderShipped", str(`{}`)}},
	}
	conn := connect(t, env.pgDSN)
	var want []*wantRec
	var last *txnInfo
	for _, evs := range txns {
		ids := make([]string, len(evs))
		tx := runTxn(t, conn, false, func(ctx context.Context, conn *pgx.Conn) error {
			for i, e := range evs {
				ids[i] = newUUID()
				if _, err := conn.Exec(ctx, `INSERT INTO `+qtable(c.table)+` (id, aggregatetype, aggregateid, type, payload)
					VALUES ($1::uuid, $2, $3, $4, $5::jsonb)`, ids[i], e.aggType, e.aggID, e.typ, e.payload); err != nil {
					return err
				}
			}
			return nil
		})
		for i, e := range evs {
			want = append(want, &wantRec{id: ids[i], topic: prefix + "outbox.event." + e.aggType, key: e.aggID,
				hdrs: stdHeaders(ids[i], e.typ, e.aggType), exact: true, tx: tx})
		}
		last = tx
	}
	waitSlotLSN(t, env.pgDSN, c.name, last.post, 60*time.Second, p)

	payloads := payloadTexts(t, env.pgDSN, c.table, "id")
	for _, w := range want {
		w.value = bytesOrNil(payloads[w.id])
	}
	recs := consumeAll(t, env.kafka, prefix, expectedTopics(want))
	d := checkDelivery(t, recs, want)
	t.Log(d.summary("debezium", fmt.Sprintf("topics=%d", len(recs))))
	d.requireExact(t)
	if got, wantTopics := slices.Sorted(maps.Keys(recs)), expectedTopics(want); !slices.Equal(got, wantTopics) {
		t.Errorf("topics with prefix %s: %v, want %v", prefix, got, wantTopics)
	}
}

// TestContractPayloadTypes: the value is the payload exactly as stored, for each accepted
// payload type (docs/outbox-contract.md): jsonb as its JSON text (payload::text), json as the
// original text with its whitespace, key order and duplicate keys, text as is, bytea as
// the raw bytes (non-UTF-8, random, large and empty included). Large values are TOASTed
// in the table. NULL is a tombstone; an empty value is not.
func TestContractPayloadTypes(t *testing.T) {
	env := requireEnv(t)
	rng := testRand(t)
	c := newContract(t, env, "cpayload")
	prefix := c.name + "."
	types := []string{"jsonb", "json", "text", "bytea"}
	tables := map[string]string{}
	for _, typ := range types {
		name := c.name + "_" + typ
		tables[typ] = "public." + name
		c.exec(`CREATE TABLE ` + qtable(tables[typ]) + ` (
			id             uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
			aggregate_type text        NOT NULL,
			aggregate_id   text        NOT NULL,
			event_type     text        NOT NULL,
			payload        ` + typ + `,
			headers        jsonb       NOT NULL DEFAULT '{}'
		)`)
		c.dropOnSuccess("DROP TABLE IF EXISTS " + qtable(tables[typ]))
	}
	p := c.startReady("--table", strings.Join([]string{tables["jsonb"], tables["json"], tables["text"], tables["bytea"]}, ","),
		"--topic", prefix+"{table}")

	randBytes := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return b
	}
	randText := func(n int) string {
		const alphabet = "abcdefghijklmnopqrstuvwxyzäöüß€😀 \n\t{}\"\\"
		r := []rune(alphabet)
		var sb strings.Builder
		for sb.Len() < n {
			sb.WriteRune(r[rng.IntN(len(r))])
		}
		return sb.String()
	}
	jsonNoise := func(n int) string { // a large JSON object with random content
		var sb strings.Builder
		sb.WriteString("{")
		for i := 0; sb.Len() < n; i++ {
			if i > 0 {
				sb.WriteString(", ")
			}
			fmt.Fprintf(&sb, `"k%d": [%d, "%x", %.3f]`, i, rng.Int64(), randBytes(16), rng.Float64())
		}
		sb.WriteString("}")
		return sb.String()
	}

	// values per type: the SQL parameter (nil is NULL); literal, when set, is SQL that
	// yields the value instead.
	type value struct {
		param   any
		literal string
		note    string
	}
	values := map[string][]value{
		"jsonb": {
			{param: `{"b": 1, "a": [1, 2.50, "x"], "a": "dup"}`, note: "normalized"},
			{param: `{"name": "caf\u00e9 \"q\" \\ 😀", "n": -0.0, "big": 1e400}`, note: "escapes"},
			{param: `"just a string"`}, {param: `42`}, {param: `null`, note: "JSON null, not SQL NULL"},
			{param: `[]`}, {param: jsonNoise(300_000), note: "toasted"},
			{param: nil, note: "SQL NULL"},
		},
		"json": {
			{param: "{ \"b\" : 1,\n  \"a\":[1 ,2.50] , \"b\": 2 }", note: "whitespace, duplicate keys"},
			{param: `{"z":1,"a":2}`, note: "key order"},
			{param: "  [ \"caf\\u00e9\", \"😀\" ]\t", note: "escapes and padding"},
			{param: `1.000`}, {param: jsonNoise(300_000), note: "toasted"},
			{param: nil, note: "SQL NULL"},
		},
		"text": {
			{param: "plain"}, {param: "line1\nline2\ttab \\ backslash \"quotes\" {not json"},
			{param: "Zoë ünïcödé 😀 \u2028"}, {param: "", note: "empty"},
			{param: randText(200_000), note: "toasted"},
			{param: nil, note: "SQL NULL"},
		},
		"bytea": {
			{literal: `'\x00ff80fe'::bytea`, note: "non-UTF-8"},
			{param: []byte{0xc3, 0x28, 0xa0, 0xa1, 0xf0, 0x28, 0x8c, 0xbc, 0x00, 0x5c, 0x78}, note: "invalid UTF-8, NUL, \\x"},
			{param: randBytes(64)}, {param: randBytes(256 * 1024), note: "random, toasted"},
			{param: []byte{}, note: "empty"},
			{param: nil, note: "SQL NULL"},
		},
	}

	conn := connect(t, env.pgDSN)
	insert := func(ctx context.Context, conn *pgx.Conn, typ string, v value, aggID string) (string, error) {
		id := newUUID()
		sql := `INSERT INTO ` + qtable(tables[typ]) + ` (id, aggregate_type, aggregate_id, event_type, payload) VALUES ($1::uuid, $2, $3, $4, `
		args := []any{id, typ, aggID, "PayloadTest"}
		if v.literal != "" {
			sql += v.literal + ")"
		} else {
			sql += "$5::" + typ + ")"
			args = append(args, v.param)
		}
		_, err := conn.Exec(ctx, sql, args...)
		return id, err
	}
	type inserted struct {
		typ, id, aggID, note string
		tx                   *txnInfo
	}
	var rows []inserted
	var last *txnInfo
	for _, typ := range types {
		for i, v := range values[typ] {
			aggID := fmt.Sprintf("%s-%d", typ, i%3)
			var id string
			tx := runTxn(t, conn, false, func(ctx context.Context, conn *pgx.Conn) error {
				var err error
				id, err = insert(ctx, conn, typ, v, aggID)
				return err
			})
			rows = append(rows, inserted{typ, id, aggID, v.note, tx})
			last = tx
		}
	}
	// One transaction writing all four tables.
	var mixed [4]string
	tx := runTxn(t, conn, false, func(ctx context.Context, conn *pgx.Conn) error {
		for i, typ := range types {
			var err error
			if mixed[i], err = insert(ctx, conn, typ, values[typ][0], typ+"-mixed"); err != nil {
				return err
			}
		}
		return nil
	})
	for i, typ := range types {
		rows = append(rows, inserted{typ, mixed[i], typ + "-mixed", "mixed transaction", tx})
	}
	last = tx
	waitSlotLSN(t, env.pgDSN, c.name, last.post, 90*time.Second, p)

	// What the values must be: read back from Postgres, so that the comparison is with
	// what is stored, not with what the test meant to store.
	stored := map[string][]byte{} // id -> expected value (nil: NULL)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, typ := range types {
		sql := "SELECT id::text, payload::text, NULL::bytea FROM " + qtable(tables[typ])
		if typ == "bytea" {
			sql = "SELECT id::text, NULL::text, payload FROM " + qtable(tables[typ])
		}
		rs, err := conn.Query(ctx, sql)
		if err != nil {
			t.Fatal(err)
		}
		for rs.Next() {
			var id string
			var text *string
			var raw []byte
			if err := rs.Scan(&id, &text, &raw); err != nil {
				t.Fatal(err)
			}
			if typ == "bytea" {
				stored[id] = raw // nil for NULL, non-nil (maybe empty) otherwise
			} else {
				stored[id] = bytesOrNil(text)
			}
		}
		if err := rs.Err(); err != nil {
			t.Fatal(err)
		}
	}
	// json and text keep the exact text that was inserted.
	for _, typ := range []string{"json", "text"} {
		for i, v := range values[typ] {
			if v.param == nil {
				continue
			}
			r := rows[slices.IndexFunc(rows, func(r inserted) bool { return r.typ == typ })+i]
			if got := string(stored[r.id]); got != v.param.(string) {
				t.Fatalf("%s payload %d: Postgres returned %.60q for %.60q", typ, i, got, v.param)
			}
		}
	}
	if got := stored[rows[slices.IndexFunc(rows, func(r inserted) bool { return r.typ == "bytea" })].id]; string(got) != "\x00\xff\x80\xfe" {
		t.Fatalf(`'\x00ff80fe'::bytea stored as %x`, got)
	}

	var want []*wantRec
	for _, r := range rows {
		want = append(want, &wantRec{id: r.id, topic: prefix + c.name + "_" + r.typ, key: r.aggID,
			value: stored[r.id], hdrs: stdHeaders(r.id, "PayloadTest", r.typ), exact: true, tx: r.tx})
	}
	recs := consumeAll(t, env.kafka, prefix, expectedTopics(want))
	d := checkDelivery(t, recs, want)
	for _, r := range rows {
		if got := d.byID[r.id]; len(got) > 0 && (got[0].Value == nil) != (stored[r.id] == nil) {
			t.Errorf("%s payload (%s): value null=%v, stored NULL=%v", r.typ, r.note, got[0].Value == nil, stored[r.id] == nil)
		}
	}
	perType := make([]string, 0, len(types))
	for _, typ := range types {
		perType = append(perType, fmt.Sprintf("%s=%d", typ, len(recs[prefix+c.name+"_"+typ])))
	}
	t.Log(d.summary("payload_types", perType...))
	d.requireExact(t)
}

// TestContractTwoSchemas: two outbox tables with the same name in different schemas, in
// one run configured by the YAML key tables: schema a with the default columns (one of
// them renamed through column_map) routed by event type, schema b with the Debezium preset
// routed by aggregate type. Every event lands in its own table's topic with its own key,
// also when one transaction writes both tables.
func TestContractTwoSchemas(t *testing.T) {
	env := requireEnv(t)
	c := newContract(t, env, "cschemas")
	prefix := c.name + "."
	schemaA, schemaB := c.name+"_a", c.name+"_b"
	tableA, tableB := schemaA+".outbox", schemaB+".outbox"
	for _, s := range []string{schemaA, schemaB} {
		c.exec("CREATE SCHEMA " + pgx.Identifier{s}.Sanitize())
		c.dropOnSuccess("DROP SCHEMA IF EXISTS " + pgx.Identifier{s}.Sanitize() + " CASCADE")
	}
	c.exec(`CREATE TABLE ` + qtable(tableA) + ` (
		id             uuid  PRIMARY KEY DEFAULT gen_random_uuid(),
		aggregate_type text  NOT NULL,
		entity_id      text  NOT NULL,
		event_type     text  NOT NULL,
		payload        jsonb,
		headers        jsonb NOT NULL DEFAULT '{}'
	)`)
	c.exec(`CREATE TABLE ` + qtable(tableB) + ` (
		id            uuid         PRIMARY KEY,
		aggregatetype varchar(255) NOT NULL,
		aggregateid   varchar(255) NOT NULL,
		type          varchar(255) NOT NULL,
		payload       jsonb
	)`)
	cfg := fmt.Sprintf(`# written by TestContractTwoSchemas
tables:
  - name: %s
    column_map:
      aggregate_id: entity_id
    topic: "%sa.{event_type}"
  - name: %s
    columns: debezium
    topic: "%sb.{aggregate_type}"
`, tableA, prefix, tableB, prefix)
	cfgPath := filepath.Join(c.logDir, "walrelay.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("config %s:\n%s", cfgPath, indent(cfg))
	// The scenario's --table and --topic are on the command line too: the YAML tables list
	// replaces them.
	p := c.startReady("--config", cfgPath)

	conn := connect(t, env.pgDSN)
	rng := testRand(t)
	insA := func(ctx context.Context, conn *pgx.Conn, aggType, entity, evType string, n int) (string, error) {
		id := newUUID()
		_, err := conn.Exec(ctx, `INSERT INTO `+qtable(tableA)+` (id, aggregate_type, entity_id, event_type, payload, headers)
			VALUES ($1::uuid, $2, $3, $4, $5::jsonb, $6::jsonb)`, id, aggType, entity, evType,
			fmt.Sprintf(`{"schema": "a", "n": %d}`, n), fmt.Sprintf(`{"traceparent": "tp-%d"}`, n))
		return id, err
	}
	insB := func(ctx context.Context, conn *pgx.Conn, aggType, aggID, typ string, n int) (string, error) {
		id := newUUID()
		_, err := conn.Exec(ctx, `INSERT INTO `+qtable(tableB)+` (id, aggregatetype, aggregateid, type, payload)
			VALUES ($1::uuid, $2, $3, $4, $5::jsonb)`, id, aggType, aggID, typ, fmt.Sprintf(`{"schema": "b", "n": %d}`, n))
		return id, err
	}
	aTypes := []string{"created", "updated"}
	bTypes := []string{"order", "invoice"}
	var want []*wantRec
	var last *txnInfo
	for i := range 30 {
		// Transactions write a, b or both.
		which := i % 3
		type pending struct {
			id, topic, key string
			hdrs           map[string]string
		}
		var ps []pending
		tx := runTxn(t, conn, false, func(ctx context.Context, conn *pgx.Conn) error {
			for k := range 1 + rng.IntN(3) {
				n := i*10 + k
				if which != 1 {
					evType, entity := aTypes[rng.IntN(2)], fmt.Sprintf("ent-%d", rng.IntN(4))
					id, err := insA(ctx, conn, "thing", entity, evType, n)
					if err != nil {
						return err
					}
					ps = append(ps, pending{id, prefix + "a." + evType, entity,
						stdHeaders(id, evType, "thing", "traceparent", fmt.Sprintf("tp-%d", n))})
				}
				if which != 0 {
					aggType, aggID := bTypes[rng.IntN(2)], fmt.Sprintf("agg-%d", rng.IntN(4))
					id, err := insB(ctx, conn, aggType, aggID, "Changed", n)
					if err != nil {
						return err
					}
					ps = append(ps, pending{id, prefix + "b." + aggType, aggID, stdHeaders(id, "Changed", aggType)})
				}
			}
			return nil
		})
		for _, pe := range ps {
			want = append(want, &wantRec{id: pe.id, topic: pe.topic, key: pe.key, hdrs: pe.hdrs, exact: true, tx: tx})
		}
		last = tx
	}
	waitSlotLSN(t, env.pgDSN, c.name, last.post, 60*time.Second, p)

	payloads := payloadTexts(t, env.pgDSN, tableA, "id")
	maps.Copy(payloads, payloadTexts(t, env.pgDSN, tableB, "id"))
	for _, w := range want {
		w.value = bytesOrNil(payloads[w.id])
	}
	recs := consumeAll(t, env.kafka, prefix, expectedTopics(want))
	d := checkDelivery(t, recs, want)
	perTopic := []string{}
	for _, topic := range slices.Sorted(maps.Keys(recs)) {
		perTopic = append(perTopic, fmt.Sprintf("%s=%d", strings.TrimPrefix(topic, prefix), len(recs[topic])))
	}
	t.Log(d.summary("two_schemas", perTopic...))
	d.requireExact(t)
	if got, wantTopics := slices.Sorted(maps.Keys(recs)), expectedTopics(want); !slices.Equal(got, wantTopics) {
		t.Errorf("topics with prefix %s: %v, want %v", prefix, got, wantTopics)
	}
}
