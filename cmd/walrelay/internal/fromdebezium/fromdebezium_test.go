package fromdebezium

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/walrelay/walrelay/cmd/walrelay/internal/config"
)

// TestDebeziumMappingIsTheDoc: docs/migrating-from-debezium.md's mapping tables list one
// Debezium key per row, connector keys then the outbox router's, and the translation has
// a rule for exactly those keys.
func TestDebeziumMappingIsTheDoc(t *testing.T) {
	doc, err := os.ReadFile("../../../../docs/migrating-from-debezium.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(doc)
	start := strings.Index(section, "## Configuration mapping")
	end := strings.Index(section[start+1:], "\n## ")
	if start < 0 || end < 0 {
		t.Fatal("no Configuration mapping section")
	}
	section = section[start : start+1+end]
	firstCell := regexp.MustCompile("(?m)^\\| `([^`]+)` \\|")
	var tables [][]string
	for _, block := range strings.Split(section, "| Debezium key | walrelay |")[1:] {
		var keys []string
		for _, line := range strings.Split(block, "\n")[2:] {
			if !strings.HasPrefix(line, "|") {
				break
			}
			m := firstCell.FindStringSubmatch(line)
			if m == nil {
				t.Errorf("row without one key in its first cell: %s", line)
				continue
			}
			keys = append(keys, m[1])
		}
		tables = append(tables, keys)
	}
	if len(tables) != 2 {
		t.Fatalf("%d mapping tables, want 2 (connector keys, router keys)", len(tables))
	}
	connector, router := Keys()
	for i, c := range []struct {
		what      string
		doc, code []string
	}{{"connector", tables[0], connector}, {"router", tables[1], router}} {
		for _, k := range c.doc {
			if !slices.Contains(c.code, k) {
				t.Errorf("%s key %s is in the doc's table %d but has no rule", c.what, k, i+1)
			}
		}
		for _, k := range c.code {
			if !slices.Contains(c.doc, k) {
				t.Errorf("%s key %s has a rule but no row in the doc's table %d", c.what, k, i+1)
			}
		}
	}
}

// cutoverConnector is the connector configuration of test/cutover_test.go.
var cutoverConnector = `{"name": "e2e_cut", "config": {
	"connector.class": "io.debezium.connector.postgresql.PostgresConnector", "tasks.max": "1", "plugin.name": "pgoutput",
	"database.hostname": "127.0.0.1", "database.port": "55432", "database.user": "postgres", "database.password": "hunter2",
	"database.dbname": "postgres", "topic.prefix": "e2e_cut_dbz", "slot.name": "e2e_cut_dbz", "publication.name": "e2e_cut_dbz",
	"publication.autocreate.mode": "filtered", "table.include.list": "public.e2e_cut", "snapshot.mode": "no_data",
	"heartbeat.interval.ms": "1000", "message.prefix.exclude.list": "walrelay\\.cutover", "max.queue.size": "64", "max.batch.size": "16",
	"producer.override.buffer.memory": "65536", "producer.override.batch.size": "16384", "transforms": "outbox",
	"transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
	"transforms.outbox.route.topic.replacement": "e2e_cut.outbox.event.${routedByValue}",
	"transforms.outbox.table.fields.additional.placement": "type:header:event_type,aggregatetype:header:aggregate_type"}}`

func TestTranslateDebezium(t *testing.T) {
	name, raw, err := ParseConnectorConfig([]byte(cutoverConnector))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := Translate(name, raw)
	if err != nil {
		t.Fatal(err)
	}
	yml := tr.YAML("connector.json")
	for _, want := range []string{
		"postgres_dsn: postgres://postgres@127.0.0.1:55432/postgres\n", "from_slot: e2e_cut_dbz\n", "table: public.e2e_cut\n",
		"columns: debezium\n", "topic: e2e_cut.outbox.event.{aggregate_type}\n", "heartbeat_interval: 1s\n",
		"batch_max_bytes: 16384\n", "max_buffered_bytes: 65536\n",
		"# from transforms.outbox.route.by.field (default aggregatetype), transforms.outbox.route.topic.replacement: ",
		"#   database.password=(not shown): ",
		"#   transforms.outbox.table.fields.additional.placement=type:header:event_type: walrelay writes the event_type header",
	} {
		if !strings.Contains(yml, want) {
			t.Errorf("translation lacks %q:\n%s", want, yml)
		}
	}
	if strings.Contains(yml, "hunter2") {
		t.Errorf("the password is printed:\n%s", yml)
	}
	// Every key of the connector is in the output: as a source or a note.
	for k := range raw {
		if !strings.Contains(yml, k) {
			t.Errorf("key %s is not in the translation", k)
		}
	}
	if err := tr.Check(yml, t.TempDir()); err != nil {
		t.Errorf("walrelay run refuses the translation: %v", err)
	}
	cfg := config.Defaults()
	if err := config.Load(config.Command{Name: "run"}, &cfg, []string{"--config", writeTemp(t, yml), "--kafka-brokers", "k:9092"}, func(string) string { return "" }, nil); err != nil {
		t.Fatal(err)
	}
	if cfg.Topic != "e2e_cut.outbox.event.{aggregate_type}" || cfg.Columns != "debezium" || cfg.OnPoison != "dlq" || len(cfg.EnvelopeColumns) != 0 {
		t.Errorf("loaded %+v", cfg)
	}
}

func TestTranslateDebeziumEnvelope(t *testing.T) {
	props := `
# an envelope connector, as .properties
name=env
connector.class=io.debezium.connector.postgresql.PostgresConnector
database.hostname=db.example
database.user=dbz
database.dbname=app
database.sslmode=verify-full
table.include.list=app\\.outbox
errors.tolerance=all
value.converter=org.apache.kafka.connect.json.JsonConverter
value.converter.schemas.enable=false
transforms=unwrap,outbox
transforms.unwrap.type=io.debezium.transforms.ExtractNewRecordState
transforms.outbox.type=io.debezium.transforms.outbox.EventRouter
transforms.outbox.table.field.event.key=agg_id
transforms.outbox.route.by.field=kind
transforms.outbox.route.topic.replacement=events.${routedByValue}
transforms.outbox.table.fields.additional.placement=type:envelope:eventType,created_at:envelope,tenant:header:tenantId,\
  shard:partition
transforms.outbox.table.expand.json.payload=true
transforms.outbox.route.topic.regex=(?<routedByValue>.*)
producer.override.compression.type=lz4
producer.override.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required password="pw";
`
	name, raw, err := ParseConnectorConfig([]byte(props))
	if err != nil || name != "env" || raw["table.include.list"] != `app\.outbox` {
		t.Fatalf("properties: %q %v %v", name, raw, err)
	}
	tr, err := Translate(name, raw)
	if err != nil {
		t.Fatal(err)
	}
	yml := tr.YAML("env.properties")
	for _, want := range []string{
		"postgres_dsn: postgres://dbz@db.example/app?sslmode=verify-full\n", "table: app.outbox\n", "column_aggregate_type: kind\n",
		"column_aggregate_id: agg_id\n", "column_partition: shard\n", "header_columns:\n    - tenant:tenantId\n",
		"envelope:\n    - type:eventType\n    - created_at\n", "expand_json_payload: true\n", "topic: events.{aggregate_type}\n",
		"on_poison: dlq\n", "compression: lz4\n",
		"#   transforms=unwrap,outbox: the outbox router outbox is walrelay's own routing; the other transforms (unwrap) have no walrelay equivalent",
		"#   transforms.unwrap.type=io.debezium.transforms.ExtractNewRecordState: another transform",
		"#   producer.override.sasl.jaas.config=(not shown): ",
	} {
		if !strings.Contains(yml, want) {
			t.Errorf("translation lacks %q:\n%s", want, yml)
		}
	}
	if strings.Contains(yml, `password="pw"`) {
		t.Errorf("a secret is printed:\n%s", yml)
	}
	if err := tr.Check(yml, t.TempDir()); err != nil {
		t.Errorf("walrelay run refuses the translation: %v", err)
	}

	// The JsonConverter with schemas, and no envelope with the JsonConverter: not mapped.
	raw["value.converter.schemas.enable"] = "true"
	tr, _ = Translate(name, raw)
	if yml := tr.YAML("x"); strings.Contains(yml, "envelope:") || !strings.Contains(yml, "walrelay writes no Connect schemas") {
		t.Errorf("schemas enabled:\n%s", yml)
	}
	for _, bad := range []map[string]string{
		{"connector.class": "io.debezium.connector.mysql.MySqlConnector"},
		{"connector.class": "io.debezium.connector.postgresql.PostgresConnector", "transforms": "x", "transforms.x.type": "org.apache.kafka.connect.transforms.RegexRouter"},
	} {
		if _, err := Translate("", bad); err == nil {
			t.Errorf("%v: translated", bad)
		}
	}
}

func writeTemp(t *testing.T, s string) string {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return f.Name()
}
