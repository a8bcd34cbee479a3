package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/walrelay/walrelay/test/registrytest"
)

// The schemas of the Schema Registry tests (registrytest's, as the sink's
// test uses them) and an Avro key.
const (
	srMoneyAvsc       = registrytest.MoneyAvsc
	srOrderAvsc       = registrytest.OrderAvsc
	srKeyAvsc         = `"string"`
	srMoneyProto      = registrytest.MoneyProto
	srOrdersProto     = registrytest.OrdersProto
	srOrderJSONSchema = registrytest.OrderJSONSchema
)

// requireRegistry returns the URL of the schema registry `make test` starts
// (test/env/registry.sh). Without it the test fails under make test and CI
// (WALRELAY_TEST_SCHEMA_REGISTRY_REQUIRED, CI) and is skipped elsewhere.
func requireRegistry(t *testing.T) string {
	t.Helper()
	if url := os.Getenv("WALRELAY_TEST_SCHEMA_REGISTRY"); url != "" {
		return url
	}
	msg := "WALRELAY_TEST_SCHEMA_REGISTRY is not set: the schema registry is not running (make test starts it: see its schema-registry step; by hand: test/env/registry.sh start; eval \"$(test/env/registry.sh env)\")"
	if isCI() || os.Getenv("WALRELAY_TEST_SCHEMA_REGISTRY_REQUIRED") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// srClient is a franz-go registry client of url (with basic auth when user is set).
func srClient(t *testing.T, url, user, password string) *sr.Client {
	t.Helper()
	opts := []sr.ClientOpt{sr.URLs(url)}
	if user != "" {
		opts = append(opts, sr.BasicAuth(user, password))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// srCreate registers text under subject and returns the subject's version.
func srCreate(ctx context.Context, t *testing.T, cl *sr.Client, subject, text string, typ sr.SchemaType) sr.SubjectSchema {
	t.Helper()
	ss, err := cl.CreateSchema(ctx, subject, sr.Schema{Schema: text, Type: typ})
	if err != nil {
		t.Fatalf("register %s: %v", subject, err)
	}
	return ss
}

// srSubjectID is the schema id of subject's latest version.
func srSubjectID(ctx context.Context, t *testing.T, cl *sr.Client, subject string) int {
	t.Helper()
	ss, err := cl.SchemaByVersion(ctx, subject, -1)
	if err != nil {
		t.Fatalf("subject %s: %v", subject, err)
	}
	return ss.ID
}

// writeFiles writes name → content into dir and returns dir.
func writeFiles(t *testing.T, dir string, files map[string]string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// srEvent is one outbox row of the end-to-end test and what must come of it.
type srEvent struct {
	eventType, key string
	payload        *string // nil: NULL (a tombstone)
	want           string  // the consumer's JSON of the value; "" for a dead letter
	dlqError       string  // a dead letter: what walrelay.dlq.error must contain
	id             string
}

func strp(s string) *string { return &s }

// TestSchemaRegistryEndToEnd: walrelay run encodes outbox rows in the Confluent wire format
// with the real registry (Apicurio's Confluent-compatible API), by per-event-type rules
// from the YAML key schema_rules (Avro with a referenced record and an Avro key; Protobuf,
// two messages of one file) and from --schema-dir (JSON Schema); and an exactly-once walrelay
// encodes a whole table with Avro, its subjects resolved at each topic's first event. Apicurio's
// own Kafka deserializers (test/registry/consumer.sh, a read_committed consumer) read every
// record as the row held it. The frames carry the ids of the subjects the strategy names, the
// key is an Avro string, a NULL payload stays a tombstone; payloads that do not fit their
// schema, and an event type of the table without a rule, are dead-lettered with reason
// schema_mismatch and the validator's message in walrelay.dlq.error, never sent unencoded.
func TestSchemaRegistryEndToEnd(t *testing.T) {
	env := requireEnv(t)
	url := requireRegistry(t)
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := newScenario(t, env, "sr")
	x := newScenario(t, env, "sreos")
	cl := srClient(t, url, "", "")

	// The referenced schemas are in the registry already, under their own subjects.
	money := srCreate(ctx, t, cl, s.name+"-wr.common.Money", srMoneyAvsc, sr.TypeAvro)
	moneyProto := srCreate(ctx, t, cl, s.name+"-money.proto", srMoneyProto, sr.TypeProtobuf)
	dir := writeFiles(t, filepath.Join(t.TempDir(), "schemas"), map[string]string{
		"order.avsc": srOrderAvsc, "key.avsc": srKeyAvsc, "orders.proto": srOrdersProto})
	jsonDir := writeFiles(t, filepath.Join(t.TempDir(), "dir"), map[string]string{
		s.table + ".OrderJSON-value.json": srOrderJSONSchema})
	avroRefs := fmt.Sprintf(`[{name: wr.common.Money, subject: %q, version: %d}]`, money.Subject, money.Version)
	protoRefs := fmt.Sprintf(`[{name: wr/common/money.proto, subject: %q, version: %d}]`, moneyProto.Subject, moneyProto.Version)
	yml := writeFiles(t, filepath.Join(t.TempDir(), "conf"), map[string]string{"walrelay.yaml": fmt.Sprintf(`
schema_rules:
  - table: %[1]s
    event_type: OrderAvro
    value: {file: %[2]s/order.avsc, references: %[3]s}
    key: {file: %[2]s/key.avsc}
  - table: %[1]s
    event_type: OrderProto
    value: {file: %[2]s/orders.proto, references: %[4]s}
  - table: %[1]s
    event_type: RefundProto
    value: {file: %[2]s/orders.proto, references: %[4]s, message: wr.it.Refund}
`, s.table, dir, avroRefs, protoRefs),
		"eos.yaml": fmt.Sprintf("schema_rules: [{table: %s, value: {file: %s/order.avsc, references: %s}}]\n", x.table, dir, avroRefs)})

	p := s.startReady("--config", filepath.Join(yml, "walrelay.yaml"), "--schema-registry-url", url, "--schema-dir", jsonDir,
		"--topic", s.name+".{event_type}", "--dlq-topic", s.name+".dlq")
	px := x.startReady("--config", filepath.Join(yml, "eos.yaml"), "--schema-registry-url", url, "--delivery", "exactly-once")

	events := []*srEvent{
		{eventType: "OrderAvro", key: "o-1", payload: strp(`{"id":"o-1","qty":9007199254740993,"total":12.5,"paid":true,"note":"door","status":"PAID","tags":["a","b"],"at":"2024-03-01T10:20:30.123+01:00","amount":{"currency":"EUR","units":1250}}`),
			want: `{"id":"o-1","qty":9007199254740993,"total":12.5,"paid":true,"note":"door","status":"PAID","tags":["a","b"],"at":1709284830123,"amount":{"currency":"EUR","units":1250}}`},
		{eventType: "OrderAvro", key: "o-2", payload: strp(`{"id":"o-2","qty":0,"total":0,"paid":false,"status":"NEW","tags":[],"at":1709284830123,"amount":{"currency":"USD","units":-1}}`),
			want: `{"id":"o-2","qty":0,"total":0,"paid":false,"note":null,"status":"NEW","tags":[],"at":1709284830123,"amount":{"currency":"USD","units":-1}}`},
		{eventType: "OrderAvro", key: "o-3", payload: nil, want: `null`},
		{eventType: "OrderProto", key: "o-1", payload: strp(`{"id":"o-1","qty":"9007199254740993","items":[{"sku":"s-1","count":2}],"amount":{"currency":"EUR","units":1250}}`),
			want: `{"id":"o-1","qty":"9007199254740993","items":[{"sku":"s-1","count":2}],"amount":{"currency":"EUR","units":"1250"}}`},
		{eventType: "RefundProto", key: "r-1", payload: strp(`{"orderId":"o-1","cents":-500}`), want: `{"order_id":"o-1","cents":"-500"}`},
		{eventType: "OrderJSON", key: "o-1", payload: strp(`{"id":"o-1","total":12.50,"tags":["a"]}`), want: `{"id":"o-1","total":12.50,"tags":["a"]}`},
		{eventType: "OrderJSON", key: "o-9", payload: strp(`{"id":1}`), dlqError: "missing property 'total'"},
		{eventType: "OrderAvro", key: "o-8", payload: strp(`{"id":"o-8","qty":"many","total":1,"paid":true,"status":"NEW","tags":[],"at":0,"amount":{"currency":"EUR","units":1}}`),
			dlqError: "qty"},
		{eventType: "Unknown", key: "u-1", payload: strp(`{"any":"thing"}`), dlqError: `none for event type "Unknown"`},
	}
	eosEvents := []*srEvent{
		{eventType: "order", key: "e-1", payload: events[0].payload, want: events[0].want},
		{eventType: "invoice", key: "e-2", payload: events[1].payload, want: events[1].want},
		{eventType: "order", key: "e-3", payload: events[1].payload, want: events[1].want},
	}
	insert := func(table string, evs []*srEvent, aggType func(*srEvent) string) {
		err := pgPool(t, env.pgDSN).with(ctx, func(c *pgx.Conn) error {
			return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
				for _, ev := range evs {
					ev.id = newUUID()
					if _, err := tx.Exec(ctx, "INSERT INTO "+pgx.Identifier(strings.Split(table, ".")).Sanitize()+
						" (id, aggregate_type, aggregate_id, event_type, payload) VALUES ($1, $2, $3, $4, $5::jsonb)",
						ev.id, aggType(ev), ev.key, ev.eventType, ev.payload); err != nil {
						return err
					}
				}
				return nil
			})
		})
		if err != nil {
			t.Fatalf("insert into %s: %v", table, err)
		}
	}
	insert(s.table, events, func(*srEvent) string { return "order" })
	insert(x.table, eosEvents, func(ev *srEvent) string { return ev.eventType })
	target := currentLSN(t, env.pgDSN)
	waitSlotLSN(t, env.pgDSN, s.name, target, 90*time.Second, p)
	waitSlotLSN(t, env.pgDSN, x.name, target, 90*time.Second, px)

	// What Kafka holds: each record under its id, the frames checked against the registry.
	topicOf := func(ev *srEvent) string { return s.name + "." + ev.eventType }
	expectTopics := []string{s.name + ".dlq"}
	dead := 0
	for _, ev := range events {
		if ev.dlqError != "" {
			dead++
		} else if !slices.Contains(expectTopics, topicOf(ev)) {
			expectTopics = append(expectTopics, topicOf(ev))
		}
	}
	recs := consumeAll(t, env.kafka, s.name+".", expectTopics)
	eosRecs := consumeAllIsolation(t, env.kafka, x.name+".", []string{x.name + ".order", x.name + ".invoice"}, true)
	byID := map[string]*kgo.Record{}
	for _, rs := range []map[string][]*kgo.Record{recs, eosRecs} {
		for _, list := range rs {
			for _, r := range list {
				if !r.Attrs.IsControl() {
					byID[header(r, "id")] = r
				}
			}
		}
	}
	ids := map[string]int{} // subject → schema id
	id := func(subject string) int {
		if _, ok := ids[subject]; !ok {
			ids[subject] = srSubjectID(ctx, t, cl, subject)
		}
		return ids[subject]
	}
	consumerTopics := map[string]string{}
	expect := map[string]*srEvent{} // topic/partition/offset → event
	for _, ev := range append(append([]*srEvent(nil), events...), eosEvents...) {
		r := byID[ev.id]
		if r == nil {
			t.Errorf("event %s %s (%s) is not in Kafka", ev.eventType, ev.key, ev.id)
			continue
		}
		if ev.dlqError != "" {
			srCheckDeadLetter(t, r, ev, s.name+".dlq")
			continue
		}
		topic, subject := r.Topic, r.Topic+"-value"
		format := map[string]string{"OrderProto": "protobuf", "RefundProto": "protobuf", "OrderJSON": "json"}[ev.eventType]
		if format == "" {
			format = "avro"
		}
		consumerTopics[topic] = format
		expect[fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset)] = ev
		if ev.payload == nil {
			if r.Value != nil {
				t.Errorf("%s %s: a NULL payload became value %x, want a tombstone", ev.eventType, ev.key, r.Value)
			}
		} else {
			indexes := map[string][]byte{"OrderProto": {0}, "RefundProto": {2, 2}}[ev.eventType] // zigzag: [] / count 1, index 1
			srCheckFrame(t, r.Value, id(subject), indexes, fmt.Sprintf("%s %s value", ev.eventType, ev.key))
		}
		if ev.eventType == "OrderAvro" {
			// An Avro string: the zigzag length, then the bytes.
			body := srCheckFrame(t, r.Key, id(topic+"-key"), nil, fmt.Sprintf("%s %s key", ev.eventType, ev.key))
			if want := append([]byte{byte(2 * len(ev.key))}, ev.key...); !bytes.Equal(body, want) {
				t.Errorf("%s key: body %x, want the Avro string %x", ev.key, body, want)
			}
		} else if string(r.Key) != ev.key {
			t.Errorf("%s %s: key %q, want the aggregate id", ev.eventType, ev.key, r.Key)
		}
	}

	// The independent consumer: Apicurio's deserializers, read_committed.
	lines := registrytest.Consume(ctx, t, consumerTopics, len(expect))
	for _, l := range lines {
		k := fmt.Sprintf("%s/%d/%d", l.Topic, l.Partition, l.Offset)
		ev := expect[k]
		switch {
		case ev == nil:
			t.Errorf("the consumer read %s, which is no event of the test", k)
		case l.Error != "":
			t.Errorf("%s %s: the consumer could not decode it: %s", ev.eventType, ev.key, l.Error)
		case !registrytest.SameJSON(t, l.Value, []byte(ev.want)):
			t.Errorf("%s %s: the consumer read %s, want %s", ev.eventType, ev.key, l.Value, ev.want)
		}
		delete(expect, k)
	}
	for k, ev := range expect {
		t.Errorf("%s %s (%s): not read by the consumer", ev.eventType, ev.key, k)
	}
	t.Logf("schema registry end to end: %d events, %d dead letters, subjects %v, in %s", len(events)+len(eosEvents), dead, ids,
		time.Since(began).Round(100*time.Millisecond))
}

// srCheckFrame checks the Confluent frame of b: magic byte 0, the schema id want, the
// Protobuf message indexes (nil: none), and returns the body.
func srCheckFrame(t *testing.T, b []byte, want int, indexes []byte, what string) []byte {
	t.Helper()
	if len(b) < 5+len(indexes) || b[0] != 0 {
		t.Errorf("%s: %x is not Confluent-framed (magic byte 0, 4-byte schema id)", what, b)
		return nil
	}
	if got := int(binary.BigEndian.Uint32(b[1:5])); got != want {
		t.Errorf("%s: schema id %d in the frame, want %d (the subject's)", what, got, want)
	}
	if !bytes.Equal(b[5:5+len(indexes)], indexes) {
		t.Errorf("%s: message indexes %x, want %x", what, b[5:5+len(indexes)], indexes)
	}
	return b[5+len(indexes):]
}

// srCheckDeadLetter checks that r is ev's dead letter: reason schema_mismatch, the
// validator's message, the payload as stored.
func srCheckDeadLetter(t *testing.T, r *kgo.Record, ev *srEvent, dlqTopic string) {
	t.Helper()
	reason, msg := header(r, "walrelay.dlq.reason"), header(r, "walrelay.dlq.error")
	switch {
	case r.Topic != dlqTopic:
		t.Errorf("%s %s: in topic %s, want the dead-letter topic %s (it does not fit its schema)", ev.eventType, ev.key, r.Topic, dlqTopic)
	case reason != "schema_mismatch":
		t.Errorf("%s %s: walrelay.dlq.reason=%q, want schema_mismatch", ev.eventType, ev.key, reason)
	case !strings.Contains(msg, "schema mismatch") || !strings.Contains(msg, ev.dlqError):
		t.Errorf("%s %s: walrelay.dlq.error=%q, want the validator's message (%q)", ev.eventType, ev.key, msg, ev.dlqError)
	case !registrytest.SameJSON(t, r.Value, []byte(*ev.payload)):
		t.Errorf("%s %s: dead letter value %s, want the payload as stored", ev.eventType, ev.key, r.Value)
	default:
		t.Logf("dead letter %s %s: %s", ev.eventType, ev.key, msg)
	}
}

// ownRegistry is a schema registry of one test's own (test/env/registry.sh with a state dir
// under the suite's), for tests that stop it or require credentials. Its schemas live in an
// H2 file database, so a restart keeps them and their ids. The test's cleanup stops it
// (and make test's stop_services, should the test die).
type ownRegistry struct {
	t              *testing.T
	env            *testEnv
	extra          []string // registry.sh's environment
	url            string
	user, password string // with basic auth
	passwordFile   string
}

func startOwnRegistry(t *testing.T, env *testEnv, name string, basicAuth bool) *ownRegistry {
	t.Helper()
	dir := filepath.Join(env.dir, name)
	r := &ownRegistry{t: t, env: env, extra: []string{
		"WALRELAY_TEST_DIR=" + dir, "WALRELAY_TEST_SCHEMA_REGISTRY_PORT=",
		"APICURIO_DATASOURCE_URL=jdbc:h2:file:" + filepath.Join(dir, "schema-registry", "db", "registry"),
	}}
	if basicAuth {
		r.extra = append(r.extra, "WALRELAY_TEST_SCHEMA_REGISTRY_AUTH=basic")
	}
	t.Cleanup(func() { _ = runEnvScript(t, env, time.Minute, r.extra, "registry.sh", "stop") })
	r.start()
	cmd := exec.Command("bash", filepath.Join(env.envDir, "registry.sh"), "env")
	cmd.Env = append(os.Environ(), r.extra...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("registry.sh env: %v", err)
	}
	for _, m := range regexp.MustCompile(`(?m)^export (\w+)='([^']*)'$`).FindAllStringSubmatch(string(out), -1) {
		switch m[1] {
		case "WALRELAY_TEST_SCHEMA_REGISTRY":
			r.url = m[2]
		case "WALRELAY_TEST_SCHEMA_REGISTRY_USER":
			r.user = m[2]
		case "WALRELAY_TEST_SCHEMA_REGISTRY_PASSWORD_FILE":
			r.passwordFile = m[2]
			b, err := os.ReadFile(m[2])
			if err != nil {
				t.Fatal(err)
			}
			r.password = strings.TrimSpace(string(b))
		}
	}
	if r.url == "" || basicAuth && r.password == "" {
		t.Fatalf("registry.sh env printed no URL or credentials:\n%s", out)
	}
	return r
}

func (r *ownRegistry) start() {
	r.t.Helper()
	if err := runEnvScript(r.t, r.env, 3*time.Minute, r.extra, "registry.sh", "start"); err != nil {
		r.t.Fatal(err)
	}
}

func (r *ownRegistry) stop() {
	r.t.Helper()
	if err := runEnvScript(r.t, r.env, time.Minute, r.extra, "registry.sh", "stop"); err != nil {
		r.t.Fatal(err)
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
