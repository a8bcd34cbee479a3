package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDebeziumParity runs the real Debezium (the worker of test/env/debezium.sh, as the
// cutover test does) and walrelay side by side on the same rows. walrelay is configured by
// `walrelay config from-debezium` from the connector's own configuration, and each event's
// records must match byte for byte: topic, key, value and every header Debezium writes
// (but its __debezium.context.* headers, which say which connector task wrote the record).
// The connectors are the cutover test's (string converters, header placements), the one
// of `make bench-debezium` (tuned), and envelope placements of columns of every type the
// envelope carries, through the JsonConverter (value.converter.schemas.enable=false), with
// and without table.expand.json.payload, and an expanded payload without an envelope.
func TestDebeziumParity(t *testing.T) {
	env := requireEnv(t)
	cw := startConnect(t, env)
	for _, sc := range parityScenarios() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			runParity(t, env, cw, sc)
		})
	}
}

// parityScenario is one connector configuration and the rows written under it.
type parityScenario struct {
	name    string
	columns string // extra columns of the outbox table, "" for none
	// config edits the cutover test's connector configuration of the scenario.
	config func(s *cutScenario, cfg map[string]string)
	rows   []parityRow
	// differs says how walrelay's value of a row legitimately differs from Debezium's
	// (documented), given Debezium's; nil: it must not.
	differs func(r parityRow, dbz []byte) []byte
}

// parityRow is one outbox row: its payload (nil: NULL) and the values of the extra
// columns (SQL expressions).
type parityRow struct {
	aggType, payload string
	null             bool
	extra            string
}

// parityPayloads are jsonb payloads Debezium 3.7.0 writes without failing, expanded or not
// (not a JSON array, no integer beyond 64 bits, no array of objects of different shapes).
var parityPayloads = []string{
	`{"id": "o-1", "total": 99.90, "items": [{"sku": "a", "n": 2}, {"sku": "b", "n": 1}], "note": "café \"q\" \\ 😀 \u0001", "paid": true, "gift": null, "tags": []}`,
	`{}`,
	`{"n": 1, "f": 1.0, "small": 0.00001, "big": 12345678901, "neg": -42, "e7": 10000000.0, "d": 0.1, "arr": [[1, 2], [3]], "s": ["x", null]}`,
	`{"nested": {"deep": {"x": [1.5, 2.25]}, "empty": {}}, "1x": 3, "ä": 5, "a.b": 1, "a b": "\t\n"}`,
	`"a string"`,
	`42`,
	`{"mixed": [1, "a"]}`,
}

func parityScenarios() []parityScenario {
	var plain []parityRow
	for i, p := range parityPayloads {
		plain = append(plain, parityRow{aggType: []string{"Order", "Customer"}[i%2], payload: p})
	}
	withNull := append(slices.Clone(plain), parityRow{aggType: "Order", null: true})

	// Columns of every type the envelope carries, and rows that try their edges.
	const typed = `c_text text, c_int2 smallint, c_int4 int, c_int8 bigint, c_bool bool, c_float4 real, c_float8 double precision,
		c_num numeric(10,2), c_numv numeric, c_ts timestamp, c_ts3 timestamp(3), c_tstz timestamptz, c_tstz3 timestamptz(3),
		c_tstz0 timestamptz(0), c_date date, c_time time, c_time3 time(3), c_bytea bytea, c_json json, c_jsonb jsonb, c_uuid uuid,
		c_char char(5), c_varchar varchar(20), c_oid oid, c_inet inet, c_cidr cidr, c_mac macaddr, c_xml xml, c_mood e2e_parity_mood, c_null text`
	typedCols := []string{"c_text", "c_int2", "c_int4", "c_int8", "c_bool", "c_float4", "c_float8", "c_num", "c_numv", "c_ts", "c_ts3",
		"c_tstz", "c_tstz3", "c_tstz0", "c_date", "c_time", "c_time3", "c_bytea", "c_json", "c_jsonb", "c_uuid", "c_char", "c_varchar",
		"c_oid", "c_inet", "c_cidr", "c_mac", "c_xml", "c_mood", "c_null"}
	typedValues := []string{
		`'tëxt "q" \ 😀', -5, 2147483647, 9223372036854775807, true, 1.5, 0.1, 12.30, 1234.5678, '2024-05-01 10:00:00.123456',
		 '2024-05-01 10:00:00.1', '2024-05-01 10:00:00.12+02', '2024-05-01 10:00:00.1234+00', '2024-05-01 10:00:00.9+00', '2024-05-01',
		 '10:11:12.5', '10:11:12.345', '\x00ff10', '{"j": 1,  "k":[1]}', '{"j": 1, "k": [1]}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
		 'ab', 'vc', 42, '10.0.0.1/24', '10.0.0.0/8', '08:00:2b:01:02:03', '<a/>', 'happy', NULL`,
		`'', -32768, -2147483648, -9223372036854775808, false, -0.00001, 1e20, -12.30, 0, '1969-12-31 23:59:59.999999',
		 '1970-01-01 00:00:00', '1960-01-01 00:00:00+00', '2024-05-01 10:00:00+05:30', '2000-01-01 00:00:00+00', '1969-12-31',
		 '00:00:00', '23:59:59.999', '\x', 'null', '[1, "a"]', '00000000-0000-0000-0000-000000000000',
		 'abcde', '', 0, '::1', '::/0', 'ff:ff:ff:ff:ff:ff', '<b>x</b>', 'sad', 'not null'`,
		`'line
two	tab', 0, 0, 0, true, 3.4028235e38, 5e-324, 99999999.99, -0.000001, '2262-04-11 23:47:16.854775',
		 '2024-02-29 12:00:00.999', '2024-05-01 23:59:59.999999-12', '2024-05-01 00:00:00.001+00', '2024-05-01 00:00:00+00',
		 '2024-02-29', '12:00:00.000001', '00:00:00.001', '\xdeadbeef', '"s"', '3.14', 'ffffffff-ffff-ffff-ffff-ffffffffffff',
		 'x', 'a"b', 4294967295, '192.168.1.1', '192.168.0.0/16', '00:00:00:00:00:00', '<c/>', 'happy', NULL`,
	}
	var place []string
	for _, c := range typedCols {
		place = append(place, c+":envelope:E"+strings.TrimPrefix(c, "c"))
	}
	place = append(place, "c_text:header:tenant", "c_int4:header:count", "c_uuid:header:ref")
	var typedRows []parityRow
	for i, p := range append(slices.Clone(parityPayloads), "") {
		typedRows = append(typedRows, parityRow{aggType: []string{"Order", "Customer"}[i%2], payload: p, null: p == "",
			extra: typedValues[i%len(typedValues)]})
	}
	jsonConverter := map[string]string{
		"value.converter":                "org.apache.kafka.connect.json.JsonConverter",
		"value.converter.schemas.enable": "false",
	}
	envelope := func(expand string) func(s *cutScenario, cfg map[string]string) {
		return func(s *cutScenario, cfg map[string]string) {
			maps.Copy(cfg, jsonConverter)
			cfg["transforms.outbox.table.fields.additional.placement"] = strings.Join(place, ",")
			cfg["transforms.outbox.table.expand.json.payload"] = expand
		}
	}
	return []parityScenario{
		{name: "cutover-connector", rows: withNull, config: func(*cutScenario, map[string]string) {}},
		{name: "bench-connector", rows: plain, config: func(s *cutScenario, cfg map[string]string) {
			// test/bench/debezium.sh's tuned connector, routing to <prefix>.<aggregatetype>,
			// its publication created beforehand (autocreate disabled).
			pgExec(s.t, s.env.pgDSN, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pgx.Identifier{s.dbzPub}.Sanitize(), qtable(s.table)))
			for _, k := range []string{"heartbeat.interval.ms", "message.prefix.exclude.list", "producer.override.buffer.memory"} {
				delete(cfg, k)
			}
			maps.Copy(cfg, map[string]string{"publication.autocreate.mode": "disabled", "max.batch.size": "8192", "max.queue.size": "32768",
				"poll.interval.ms": "10", "producer.override.linger.ms": "5", "producer.override.batch.size": "1048576",
				"producer.override.compression.type": "lz4", "transforms.outbox.route.topic.replacement": s.prefix + "bench.${routedByValue}"})
		}},
		{name: "envelope", columns: typed, rows: typedRows, config: envelope("false")},
		{name: "envelope-expanded", columns: typed, rows: typedRows, config: envelope("true")},
		{name: "expanded", rows: withNull, config: func(s *cutScenario, cfg map[string]string) {
			maps.Copy(cfg, jsonConverter)
			cfg["transforms.outbox.table.expand.json.payload"] = "true"
		}, differs: func(r parityRow, dbz []byte) []byte {
			if r.null && string(dbz) == "null" {
				return nil // walrelay: a tombstone; Debezium: the JSON null the JsonConverter writes
			}
			return dbz
		}},
	}
}

// runParity creates the scenario's table, Debezium's connector and walrelay from the
// translated configuration, writes the rows, and compares the two producers' records.
func runParity(t *testing.T, env *testEnv, cw *connectWorker, sc parityScenario) {
	start := time.Now()
	s := newCutScenario(t, env, cw, "par")
	if sc.columns != "" {
		pgExec(t, env.pgDSN, `DO $$ BEGIN CREATE TYPE e2e_parity_mood AS ENUM ('happy', 'sad'); EXCEPTION WHEN duplicate_object THEN NULL; END $$`)
		var adds []string
		for _, c := range splitColumns(sc.columns) {
			adds = append(adds, "ADD COLUMN "+c)
		}
		pgExec(t, env.pgDSN, "ALTER TABLE "+qtable(s.table)+" "+strings.Join(adds, ", "))
	}
	cfg := s.connectorConfig(nil)
	sc.config(s, cfg)
	cw.createConnector(s.name, s.dbzSlot, cfg)

	// walrelay, configured by the translation of the connector's configuration.
	connector, err := json.Marshal(map[string]any{"name": s.name, "config": cfg})
	if err != nil {
		t.Fatal(err)
	}
	connectorFile := filepath.Join(s.logDir, "connector.json")
	yml := filepath.Join(s.logDir, "walrelay.yaml")
	if err := os.WriteFile(connectorFile, connector, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(walrelayBin, "config", "from-debezium", connectorFile).Output()
	if err != nil {
		t.Fatalf("walrelay config from-debezium: %v\n%s", err, out)
	}
	if err := os.WriteFile(yml, out, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Logf("walrelay config from-debezium:\n%s", indent(string(out)))
	p := startWalrelay(t, s.name, filepath.Join(s.logDir, "walrelay.log"), []string{"run", "--config", yml,
		"--postgres-dsn", env.pgDSN, "--kafka-brokers", env.kafka, "--slot", s.name, "--publication", s.name,
		"--metrics-addr", "127.0.0.1:0"}, nil)
	p.waitReady(90 * time.Second)
	waitSlotStreaming(t, env.pgDSN, s.name, 90*time.Second, p)

	// The rows, a few to a transaction.
	ids := s.writeParityRows(sc.rows)
	dbz, wr := s.collect(ids, 2*time.Minute)
	compareParity(t, sc, ids, dbz, wr)
	t.Logf("parity %s: %d events compared in %s", sc.name, len(ids), time.Since(start).Round(time.Millisecond))
}

// splitColumns splits a column list at the commas outside parentheses.
func splitColumns(s string) []string {
	var out []string
	depth, last := 0, 0
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[last:i]))
				last = i + 1
			}
		}
	}
	return append(out, strings.TrimSpace(s[last:]))
}

// writeParityRows inserts the rows, three to a transaction, and returns their event ids
// in order with the rows.
func (s *cutScenario) writeParityRows(rows []parityRow) map[string]parityRow {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.env.pgDSN)
	if err != nil {
		s.t.Fatal(err)
	}
	defer conn.Close(context.Background())
	ids := map[string]parityRow{}
	extra := extraColumnNames(s)
	for i := 0; i < len(rows); i += 3 {
		tx, err := conn.Begin(ctx)
		if err != nil {
			s.t.Fatal(err)
		}
		for _, r := range rows[i:min(i+3, len(rows))] {
			id := newUUID()
			var payload any = r.payload
			if r.null {
				payload = nil
			}
			cols, vals := "", ""
			if r.extra != "" {
				cols, vals = ", "+strings.Join(extra, ", "), ", "+r.extra
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+qtable(s.table)+` (id, aggregatetype, aggregateid, type, payload`+cols+`)
				VALUES ($1::uuid, $2, $3, $4, $5::jsonb`+vals+`)`, id, r.aggType, "agg-"+id[:8], r.aggType+"Changed", payload); err != nil {
				s.t.Fatalf("insert %+v: %v", r, err)
			}
			ids[id] = r
		}
		if err := tx.Commit(ctx); err != nil {
			s.t.Fatal(err)
		}
	}
	return ids
}

// extraColumnNames are the table's columns after Debezium's five, in order.
func extraColumnNames(s *cutScenario) []string {
	names, err := pgPool(s.t, s.env.pgDSN).strings(context.Background(), `SELECT attname::text FROM pg_attribute
		WHERE attrelid = $1::regclass AND attnum > 5 AND NOT attisdropped ORDER BY attnum`, s.table)
	if err != nil {
		s.t.Fatalf("columns of %s: %v", s.table, err)
	}
	return names
}

// collect reads the scenario's topics until both producers wrote a record for every id,
// and returns each producer's record by event id.
func (s *cutScenario) collect(ids map[string]parityRow, timeout time.Duration) (dbz, wr map[string]*kgo.Record) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		dbz, wr = map[string]*kgo.Record{}, map[string]*kgo.Record{}
		if topics, _ := topicsWithPrefix(context.Background(), s.t, s.env.kafka, s.prefix); len(topics) > 0 {
			for _, list := range consumeAll(s.t, s.env.kafka, s.prefix, nil) {
				for _, rec := range list {
					id := header(rec, "id")
					if _, ok := ids[id]; !ok {
						continue
					}
					if header(rec, "walrelay.lsn") != "" {
						wr[id] = rec
					} else {
						dbz[id] = rec
					}
				}
			}
		}
		if len(dbz) == len(ids) && len(wr) == len(ids) {
			return dbz, wr
		}
		if time.Now().After(deadline) {
			c, task, trace := s.cw.connectorState(s.name)
			s.t.Fatalf("after %s: Debezium wrote %d of %d events (connector %s/%s %s), walrelay %d", timeout, len(dbz), len(ids), c, task, trace, len(wr))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// compareParity checks every event's two records: the same topic, key, value (or the
// scenario's documented difference) and Debezium's headers, each with the same bytes.
func compareParity(t *testing.T, sc parityScenario, ids map[string]parityRow, dbz, wr map[string]*kgo.Record) {
	t.Helper()
	bad := 0
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		d, w := dbz[id], wr[id]
		var diffs []string
		if d.Topic != w.Topic {
			diffs = append(diffs, fmt.Sprintf("topic %q, Debezium %q", w.Topic, d.Topic))
		}
		if !bytes.Equal(d.Key, w.Key) {
			diffs = append(diffs, fmt.Sprintf("key %q, Debezium %q", w.Key, d.Key))
		}
		want := d.Value
		if sc.differs != nil {
			want = sc.differs(ids[id], d.Value)
		}
		if !bytes.Equal(want, w.Value) || (want == nil) != (w.Value == nil) {
			diffs = append(diffs, fmt.Sprintf("value\n      %s\n    Debezium\n      %s", w.Value, d.Value))
		}
		for _, h := range d.Headers {
			if strings.HasPrefix(h.Key, "__debezium.context.") {
				continue
			}
			if got, ok := headerBytes(w, h.Key); !ok || !bytes.Equal(got, h.Value) {
				diffs = append(diffs, fmt.Sprintf("header %s = %q (present %v), Debezium %q", h.Key, got, ok, h.Value))
			}
		}
		if len(diffs) > 0 {
			bad++
			if bad <= 10 {
				t.Errorf("event %s (row %+v):\n    %s", id, ids[id], strings.Join(diffs, "\n    "))
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d events differ from Debezium's", bad, len(ids))
	}
	for id, r := range ids {
		if !r.null && r.payload == parityPayloads[0] {
			t.Logf("a record, Debezium's and walrelay's: key %q value %s headers %v", dbz[id].Key, dbz[id].Value, wr[id].Headers)
		}
	}
}

func headerBytes(rec *kgo.Record, key string) ([]byte, bool) {
	for _, h := range rec.Headers {
		if h.Key == key {
			return h.Value, true
		}
	}
	return nil, false
}
