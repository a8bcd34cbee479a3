package sink_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/sink"
	"github.com/walrelay/walrelay/sink/schema"
)

// The real registry test's schemas: Avro and Protobuf with a reference to a
// schema under another subject, JSON Schema.
const (
	itMoneyAvsc = `{"type":"record","name":"Money","namespace":"wr.common","fields":[{"name":"currency","type":"string"},{"name":"units","type":"long"}]}`
	itOrderAvsc = `{"type":"record","name":"Order","namespace":"wr.it","fields":[
 {"name":"id","type":"string"},{"name":"qty","type":"long"},{"name":"total","type":"double"},{"name":"paid","type":"boolean"},
 {"name":"note","type":["null","string"],"default":null},
 {"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW","PAID"]}},
 {"name":"tags","type":{"type":"array","items":"string"}},
 {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
 {"name":"amount","type":"wr.common.Money"}]}`
	itMoneyProto = `syntax = "proto3";
package wr.common;
message Money { string currency = 1; int64 units = 2; }
`
	itOrdersProto = `syntax = "proto3";
package wr.it;
import "wr/common/money.proto";
message Order {
  message Item { string sku = 1; int32 count = 2; }
  string id = 1;
  int64 qty = 2;
  repeated Item items = 3;
  wr.common.Money amount = 4;
}
message Refund { string order_id = 1; int64 cents = 2; }
`
	itOrderJSONSchema = `{"$schema":"http://json-schema.org/draft-07/schema#","title":"wr.it.Order","type":"object",
 "properties":{"id":{"type":"string"},"total":{"type":"number"},"tags":{"type":"array","items":{"type":"string"}}},
 "required":["id","total"],"additionalProperties":false}`
)

// itRecord is one event of the real registry test and what a consumer with
// the registry's deserializers must read.
type itRecord struct {
	table, eventType, key, payload string
	format                         string // the consumer's format: avro, protobuf, json
	want                           string // the consumer's JSON of the value
}

var itRecords = []itRecord{
	{"public.avro_outbox", "OrderCreated", "o-1", `{"id":"o-1","qty":9007199254740993,"total":12.5,"paid":true,"note":"door",
	  "status":"PAID","tags":["a","b"],"at":"2024-03-01T10:20:30.123+01:00","amount":{"currency":"EUR","units":1250}}`,
		"avro", `{"id":"o-1","qty":9007199254740993,"total":12.5,"paid":true,"note":"door","status":"PAID","tags":["a","b"],
	  "at":1709284830123,"amount":{"currency":"EUR","units":1250}}`},
	{"public.avro_outbox", "OrderCreated", "o-2", `{"id":"o-2","qty":0,"total":0,"paid":false,"status":"NEW","tags":[],
	  "at":1709284830123,"amount":{"currency":"USD","units":-1}}`,
		"avro", `{"id":"o-2","qty":0,"total":0,"paid":false,"note":null,"status":"NEW","tags":[],"at":1709284830123,"amount":{"currency":"USD","units":-1}}`},
	{"public.proto_outbox", "OrderCreated", "o-1", `{"id":"o-1","qty":"9007199254740993","items":[{"sku":"s-1","count":2}],"amount":{"currency":"EUR","units":1250}}`,
		"protobuf", `{"id":"o-1","qty":"9007199254740993","items":[{"sku":"s-1","count":2}],"amount":{"currency":"EUR","units":"1250"}}`},
	{"public.proto_outbox", "RefundIssued", "r-1", `{"orderId":"o-1","cents":-500}`,
		"protobuf", `{"order_id":"o-1","cents":"-500"}`},
	{"public.proto_outbox", "ItemAdded", "i-1", `{"sku":"s-9","count":7}`,
		"protobuf", `{"sku":"s-9","count":7}`},
	{"public.json_outbox", "OrderCreated", "o-1", `{"id":"o-1","total":12.50,"tags":["a"]}`,
		"json", `{"id":"o-1","total":12.50,"tags":["a"]}`},
}

// TestSchemaRegistryReal runs the encoding against a real registry (Apicurio
// through its Confluent-compatible API, test/env/registry.sh) and, with
// WALRELAY_TEST_KAFKA set, a real Kafka; with WALRELAY_TEST_REGISTRY_CONSUMER=1
// too, test/registry/consumer.sh (Apicurio's Java deserializers) must read
// every record back as the row held it. Skipped without
// WALRELAY_TEST_SCHEMA_REGISTRY.
func TestSchemaRegistryReal(t *testing.T) {
	url := os.Getenv("WALRELAY_TEST_SCHEMA_REGISTRY")
	if url == "" {
		t.Skip("WALRELAY_TEST_SCHEMA_REGISTRY is not set (test/env/registry.sh start; eval \"$(test/env/registry.sh env)\")")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("wr%d", time.Now().UnixNano()%1e9)
	base := schema.Config{URLs: []string{url}, Username: os.Getenv("WALRELAY_TEST_SCHEMA_REGISTRY_USER")}
	if f := os.Getenv("WALRELAY_TEST_SCHEMA_REGISTRY_PASSWORD_FILE"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		base.Password = strings.TrimSpace(string(b))
	}

	// The referenced schemas are in the registry already, under their own subjects.
	srOpts := []sr.ClientOpt{sr.URLs(url)}
	if base.Username != "" {
		srOpts = append(srOpts, sr.BasicAuth(base.Username, base.Password))
	}
	cl, err := sr.NewClient(srOpts...)
	if err != nil {
		t.Fatal(err)
	}
	moneyAvro, err := cl.CreateSchema(ctx, prefix+"-wr.common.Money", sr.Schema{Schema: itMoneyAvsc})
	if err != nil {
		t.Fatal(err)
	}
	moneyProto, err := cl.CreateSchema(ctx, prefix+"-money.proto", sr.Schema{Schema: itMoneyProto, Type: sr.TypeProtobuf})
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	avsc, proto, jsonFile := write("order.avsc", itOrderAvsc), write("orders.proto", itOrdersProto), write("order.json", itOrderJSONSchema)
	protoRefs := []schema.Reference{{Name: "wr/common/money.proto", Subject: moneyProto.Subject, Version: moneyProto.Version}}
	cfg := base
	cfg.Rules = []schema.Rule{
		{Table: "public.avro_outbox", Value: schema.Binding{File: avsc,
			References: []schema.Reference{{Name: "wr.common.Money", Subject: moneyAvro.Subject, Version: moneyAvro.Version}}}},
		{Table: "public.proto_outbox", Value: schema.Binding{File: proto, References: protoRefs}},
		{Table: "public.proto_outbox", EventType: "RefundIssued", Value: schema.Binding{File: proto, References: protoRefs, Message: "wr.it.Refund"}},
		{Table: "public.proto_outbox", EventType: "ItemAdded", Value: schema.Binding{File: proto, References: protoRefs, Message: "wr.it.Order.Item"}},
		{Table: "public.json_outbox", Value: schema.Binding{File: jsonFile}},
	}
	brokers, kafkaReal := itBrokers(t)
	topics := map[string]string{"public.avro_outbox": prefix + "-avro", "public.proto_outbox": prefix + "-proto", "public.json_outbox": prefix + "-json"}
	s := newSink(t, sink.Config{Brokers: brokers, TableTopics: topics, Schema: cfg})

	// Start: every subject is known (fixed topics); the files are registered.
	if err := s.RegisterSchemas(ctx); err != nil {
		t.Fatalf("RegisterSchemas: %v", err)
	}
	if err := s.RegisterSchemas(ctx); err != nil {
		t.Fatalf("RegisterSchemas again: %v", err)
	}
	for _, subject := range []string{prefix + "-avro-value", prefix + "-proto-value", prefix + "-json-value"} {
		vs, err := cl.SubjectVersions(ctx, subject)
		if err != nil || len(vs) != 1 {
			t.Fatalf("subject %s: versions %v, %v; want one version", subject, vs, err)
		}
	}
	fs, err := s.CheckRegistry(ctx)
	if err != nil {
		t.Fatalf("CheckRegistry: %v", err)
	}
	for _, f := range fs {
		t.Logf("check: ok=%v %s: %s", f.OK, f.Check, f.Note)
		if !f.OK {
			t.Errorf("CheckRegistry: %s: %s", f.Check, f.Note)
		}
	}

	// Produce, then read back with independent decoders.
	a := newAcks(len(itRecords))
	var ids []string
	for i, r := range itRecords {
		ev := &decoder.Event{Table: r.table, TableName: strings.TrimPrefix(r.table, "public."), ID: fmt.Sprintf("%s-%d", prefix, i),
			AggregateType: "order", AggregateID: []byte(r.key), EventType: r.eventType, Payload: []byte(r.payload),
			CommitTime: time.Now().UTC(), LSN: pglogrepl.LSN(0x1000 + i), XID: 1}
		if err := s.Produce(ctx, ev, a.done(ev.ID)); err != nil {
			t.Fatalf("%s %s: %v", r.table, r.eventType, err)
		}
		ids = append(ids, ev.ID)
	}
	allOK(t, a.wait(t, len(itRecords)), ids)
	got := itConsume(t, ctx, brokers, []string{prefix + "-avro", prefix + "-proto", prefix + "-json"}, len(itRecords))
	frameIDs := map[string]int{} // by topic/key
	for i, r := range itRecords {
		rec := got[topics[r.table]+"/"+r.key]
		if rec == nil {
			t.Fatalf("record %d (%s %s) not in Kafka", i, r.table, r.key)
		}
		id, body, err := (&sr.ConfluentHeader{}).DecodeID(rec.Value)
		if err != nil {
			t.Fatal(err)
		}
		frameIDs[topics[r.table]+"/"+r.key] = id
		byID, err := cl.SchemaByID(ctx, id)
		if err != nil {
			t.Fatalf("%s: schema id %d from the frame is not in the registry: %v", r.table, id, err)
		}
		switch r.format {
		case "avro":
			names := &avro.SchemaCache{}
			avro.ParseWithCache(itMoneyAvsc, "", names)
			order, err := avro.ParseWithCache(byID.Schema, "", names)
			if err != nil {
				t.Fatalf("the registry's text of id %d: %v", id, err)
			}
			var v any
			if err := avro.Unmarshal(order, body, &v); err != nil {
				t.Fatalf("avro decode: %v", err)
			}
			if m := v.(map[string]any); m["qty"] != int64(itQty(r.payload)) || m["id"] != r.key {
				t.Errorf("avro %s: decoded %v", r.key, m)
			}
		case "json":
			if string(body) != r.payload {
				t.Errorf("json %s: body %s, want the payload as stored", r.key, body)
			}
		}
	}

	// A misfit is a mismatch with the validator's message, for each format.
	for _, table := range []string{"public.avro_outbox", "public.proto_outbox", "public.json_outbox"} {
		ev := &decoder.Event{Table: table, ID: "bad", AggregateID: []byte("k"), EventType: "OrderCreated", Payload: []byte(`{"id":1}`)}
		if _, err := s.Prepare(ctx, ev); !errors.Is(err, sink.ErrSchemaMismatch) {
			t.Errorf("%s: Prepare of a misfit: %v, want ErrSchemaMismatch", table, err)
		} else {
			t.Logf("%s misfit: %v", table, err)
		}
	}

	// An incompatible new version of a file is refused at start with the registry's message.
	bad := cfg
	bad.Rules = []schema.Rule{{Table: "public.json_outbox", Value: schema.Binding{File: write("bad.json",
		strings.Replace(itOrderJSONSchema, `"id":{"type":"string"}`, `"id":{"type":"integer"}`, 1))}}}
	s2 := newSink(t, sink.Config{Brokers: brokers, TableTopics: topics, Schema: bad})
	err = s2.RegisterSchemas(ctx)
	if !errors.Is(err, schema.ErrRefused) || !strings.Contains(err.Error(), "HTTP 409") {
		t.Fatalf("an incompatible schema: %v, want ErrRefused with HTTP 409", err)
	}
	t.Logf("incompatible: %v", err)

	// A subject that is not there is named at start.
	missing := cfg
	missing.Rules = []schema.Rule{{Table: "public.avro_outbox", Value: schema.Binding{Subject: prefix + "-nope"}}}
	s3 := newSink(t, sink.Config{Brokers: brokers, Schema: missing})
	if err := s3.RegisterSchemas(ctx); !errors.Is(err, schema.ErrSubjectMissing) || !strings.Contains(err.Error(), prefix+"-nope") {
		t.Fatalf("a missing subject: %v", err)
	} else {
		t.Logf("missing: %v", err)
	}

	// Wrong credentials: 401 with an empty body, reported as not authorized.
	if base.Username != "" {
		wrong := cfg
		wrong.Password = "wrong-password"
		s4 := newSink(t, sink.Config{Brokers: brokers, TableTopics: topics, Schema: wrong})
		err := s4.RegisterSchemas(ctx)
		if !errors.Is(err, schema.ErrNotAuthorized) || !strings.Contains(err.Error(), "HTTP 401") || strings.Contains(err.Error(), "wrong-password") {
			t.Fatalf("wrong password: %v", err)
		}
		t.Logf("wrong password: %v", err)
	}

	if !kafkaReal || os.Getenv("WALRELAY_TEST_REGISTRY_CONSUMER") == "" {
		t.Log("the Java consumer is not run (set WALRELAY_TEST_KAFKA and WALRELAY_TEST_REGISTRY_CONSUMER=1)")
		return
	}
	itJavaConsumer(t, ctx, prefix, topics, frameIDs)
}

// itQty reads the payload's qty as an integer (for the Avro check).
func itQty(payload string) int64 {
	var v struct{ Qty json.Number }
	json.Unmarshal([]byte(payload), &v)
	n, _ := v.Qty.Int64()
	return n
}

// itBrokers is the real Kafka of WALRELAY_TEST_KAFKA, else a kfake cluster.
func itBrokers(t *testing.T) ([]string, bool) {
	if b := os.Getenv("WALRELAY_TEST_KAFKA"); b != "" {
		return strings.Split(b, ","), true
	}
	return newCluster(t).ListenAddrs(), false
}

// itConsume reads n records of topics, by "topic/key".
func itConsume(t *testing.T, ctx context.Context, brokers, topics []string, n int) map[string]*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	out := map[string]*kgo.Record{}
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records", len(out), n)
		}
		fs.EachRecord(func(r *kgo.Record) { out[r.Topic+"/"+string(r.Key)] = r })
	}
	return out
}

// itJavaConsumer reads the records with test/registry/consumer.sh and
// compares each value with what the row held.
func itJavaConsumer(t *testing.T, ctx context.Context, prefix string, topics map[string]string, frameIDs map[string]int) {
	t.Helper()
	cmd := exec.CommandContext(ctx, "bash", "../test/registry/consumer.sh",
		"--topic", prefix+"-avro=avro", "--topic", prefix+"-proto=protobuf", "--topic", prefix+"-json=json",
		"--count", fmt.Sprint(len(itRecords)), "--timeout-ms", "60000")
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	runErr := cmd.Run()
	type consumed struct {
		Topic, Key, Error string
		SchemaID          int `json:"schemaId"`
		Value             json.RawMessage
	}
	got := map[string]consumed{}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		t.Logf("consumer: %s", sc.Text())
		var l consumed
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("consumer line %q: %v", sc.Text(), err)
		}
		got[l.Topic+"/"+l.Key] = l
	}
	if runErr != nil {
		t.Fatalf("consumer.sh: %v", runErr)
	}
	for _, r := range itRecords {
		k := topics[r.table] + "/" + r.key
		l, ok := got[k]
		switch {
		case !ok:
			t.Errorf("%s %s: not consumed", r.table, r.key)
		case l.SchemaID != frameIDs[k]:
			t.Errorf("%s %s: the consumer read schema id %d, the frame holds %d", r.table, r.key, l.SchemaID, frameIDs[k])
		case l.Error != "":
			t.Errorf("%s %s: consumer error %s", r.table, r.key, l.Error)
		case !sameJSONValue(t, l.Value, r.want):
			t.Errorf("%s %s: consumer read %s, want %s", r.table, r.key, l.Value, r.want)
		}
	}
}

// sameJSONValue compares two JSON texts, numbers by their exact value.
func sameJSONValue(t *testing.T, a json.RawMessage, b string) bool {
	norm := func(s []byte) any {
		d := json.NewDecoder(bytes.NewReader(s))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		return ratNumbers(v)
	}
	return reflect.DeepEqual(norm(a), norm([]byte(b)))
}

func ratNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		r, _ := new(big.Rat).SetString(x.String())
		return r.RatString()
	case []any:
		for i := range x {
			x[i] = ratNumbers(x[i])
		}
	case map[string]any:
		for k := range x {
			x[k] = ratNumbers(x[k])
		}
	}
	return v
}
