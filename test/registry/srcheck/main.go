// Command srcheck exercises a Confluent-compatible schema registry with franz-go's sr client and
// produces Confluent-framed records (magic byte 0, 4-byte big-endian schema id, Protobuf message
// indexes, body) for an independent consumer to decode. It is a check of the test environment
// (test/env/registry.sh, test/registry/consumer.sh), not part of walrelay: it encodes with
// hamba/avro, protocompile + dynamicpb and plain JSON, never with walrelay's code.
//
//	srcheck -registry URL -brokers HOST:PORT [-user U -password-file F] [-prefix P] > expected.jsonl
//	srcheck compare expected.jsonl got.jsonl
//
// Every registry check prints one "ok ..." line on stderr; the first failure exits 1. Stdout gets
// one JSON line per produced record: {"topic","key","schemaId","value"}, value as the consumer is
// expected to print it (Avro as plain JSON with unions unwrapped, Protobuf as protojson with proto
// field names, JSON as is). compare matches the consumer's lines to those by topic and key: same
// schema id, equal values (numbers compared exactly), no error, nothing missing or extra.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/bufbuild/protocompile"
	"github.com/hamba/avro/v2"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

func main() {
	if len(os.Args) == 4 && os.Args[1] == "compare" {
		n, err := compare(os.Args[2], os.Args[3])
		if err != nil {
			fmt.Fprintln(os.Stderr, "srcheck compare: FAIL:", err)
			os.Exit(1)
		}
		ok("the consumer decoded all %d records as produced", n)
		return
	}
	var (
		registry = flag.String("registry", os.Getenv("WALRELAY_TEST_SCHEMA_REGISTRY"), "ccompat base URL")
		brokers  = flag.String("brokers", os.Getenv("WALRELAY_TEST_KAFKA"), "Kafka bootstrap address")
		user     = flag.String("user", os.Getenv("WALRELAY_TEST_SCHEMA_REGISTRY_USER"), "basic auth user")
		passFile = flag.String("password-file", os.Getenv("WALRELAY_TEST_SCHEMA_REGISTRY_PASSWORD_FILE"), "basic auth password file")
		prefix   = flag.String("prefix", fmt.Sprintf("srcheck-%d", time.Now().UnixNano()), "subject and topic prefix")
	)
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := run(ctx, *registry, *brokers, *user, *passFile, *prefix, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "srcheck: FAIL:", err)
		os.Exit(1)
	}
}

func ok(format string, args ...any) { fmt.Fprintf(os.Stderr, "ok "+format+"\n", args...) }

func run(ctx context.Context, registry, brokers, user, passFile, prefix string, out io.Writer) error {
	if registry == "" || brokers == "" {
		return errors.New("need -registry and -brokers (or WALRELAY_TEST_SCHEMA_REGISTRY, WALRELAY_TEST_KAFKA)")
	}
	opts := []sr.ClientOpt{sr.URLs(registry)}
	if user != "" {
		b, err := os.ReadFile(passFile)
		if err != nil {
			return fmt.Errorf("read password: %w", err)
		}
		pass := strings.TrimSpace(string(b))
		if err := refusedWithoutAuth(ctx, registry); err != nil {
			return err
		}
		opts = append(opts, sr.BasicAuth(user, pass))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("sr client: %w", err)
	}
	c := &checker{cl: cl, prefix: prefix}
	recs, err := c.all(ctx)
	if err != nil {
		return err
	}
	if err := produce(ctx, brokers, recs); err != nil {
		return err
	}
	ok("produced %d records to %s-{avro,proto,json}", len(recs), prefix)
	enc := json.NewEncoder(out)
	for _, r := range recs {
		if err := enc.Encode(map[string]any{"topic": r.topic, "key": r.key, "schemaId": r.id, "value": r.want}); err != nil {
			return err
		}
	}
	return nil
}

// refusedWithoutAuth: with basic auth on, a request without credentials gets 401.
func refusedWithoutAuth(ctx context.Context, registry string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, registry+"/subjects", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("registry without credentials: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		return fmt.Errorf("registry without credentials answered %d, want 401", resp.StatusCode)
	}
	ok("GET /subjects without credentials: 401")
	return nil
}

type record struct {
	topic, key string
	id         int
	value      []byte // framed
	want       any    // what the consumer should print as the value
}

type checker struct {
	cl     *sr.Client
	prefix string
}

func (c *checker) all(ctx context.Context) ([]record, error) {
	types, err := c.cl.SupportedTypes(ctx)
	if err != nil {
		return nil, fmt.Errorf("supported types: %w", err)
	}
	for _, t := range []sr.SchemaType{sr.TypeAvro, sr.TypeProtobuf, sr.TypeJSON} {
		if !slices.Contains(types, t) {
			return nil, fmt.Errorf("supported types %v lack %v", types, t)
		}
	}
	ok("SupportedTypes: %v", types)
	compat := c.cl.Compatibility(ctx)
	if len(compat) != 1 || compat[0].Err != nil {
		return nil, fmt.Errorf("global compatibility: %+v", compat)
	}
	ok("global compatibility: %v", compat[0].Level)

	var recs []record
	for _, f := range []func(context.Context) ([]record, error){c.avro, c.protobuf, c.jsonSchema} {
		r, err := f(ctx)
		if err != nil {
			return nil, err
		}
		recs = append(recs, r...)
	}
	return recs, nil
}

// register creates s under subject and checks the id with SchemaByID, LookupSchema and a second
// CreateSchema of the same text (same id, no new version).
func (c *checker) register(ctx context.Context, subject string, s sr.Schema) (sr.SubjectSchema, error) {
	ss, err := c.cl.CreateSchema(ctx, subject, s)
	if err != nil {
		return ss, fmt.Errorf("create %s: %w", subject, err)
	}
	if ss.ID <= 0 || ss.Version <= 0 {
		return ss, fmt.Errorf("create %s: id %d version %d", subject, ss.ID, ss.Version)
	}
	again, err := c.cl.CreateSchema(ctx, subject, s)
	if err != nil || again.ID != ss.ID || again.Version != ss.Version {
		return ss, fmt.Errorf("create %s again: %+v, %v; want id %d version %d", subject, again, err, ss.ID, ss.Version)
	}
	byID, err := c.cl.SchemaByID(ctx, ss.ID)
	if err != nil {
		return ss, fmt.Errorf("schema by id %d: %w", ss.ID, err)
	}
	if byID.Type != s.Type || byID.Schema != s.Schema || len(byID.References) != len(s.References) {
		return ss, fmt.Errorf("schema by id %d: type %v refs %v, text %q; registered type %v refs %v", ss.ID, byID.Type, byID.References, byID.Schema, s.Type, s.References)
	}
	look, err := c.cl.LookupSchema(ctx, subject, s)
	if err != nil || look.ID != ss.ID || look.Version != ss.Version || look.Subject != subject {
		return ss, fmt.Errorf("lookup %s: %+v, %v", subject, look, err)
	}
	ok("%s: CreateSchema (twice), SchemaByID, LookupSchema: id %d version %d type %v refs %d", subject, ss.ID, ss.Version, s.Type, len(s.References))
	return ss, nil
}

// evolve registers a compatible second version, then checks that a change incompatible with it
// is refused with HTTP 409 and leaves the versions at [1 2]. Apicurio's compatibility endpoint
// answers 422 for a schema with references (it does not resolve them there, though registration
// does): that is reported as a note, not a failure.
func (c *checker) evolve(ctx context.Context, subject string, v2, bad sr.Schema) error {
	ss, err := c.cl.CreateSchema(ctx, subject, v2)
	if err != nil {
		return fmt.Errorf("create %s v2: %w", subject, err)
	}
	if ss.Version != 2 {
		return fmt.Errorf("create %s v2: version %d", subject, ss.Version)
	}
	res, err := c.cl.CheckCompatibility(ctx, subject, -1, bad)
	var re *sr.ResponseError
	switch {
	case err == nil && !res.Is:
		ok("%s: CheckCompatibility of the breaking change: false", subject)
	case len(bad.References) > 0 && errors.As(err, &re) && re.StatusCode == http.StatusUnprocessableEntity:
		fmt.Fprintf(os.Stderr, "note %s: CheckCompatibility with references: HTTP 422 %q\n", subject, re.Message)
	default:
		return fmt.Errorf("check compatibility of the breaking change on %s: %+v, %v", subject, res, err)
	}
	_, err = c.cl.CreateSchema(ctx, subject, bad)
	if !errors.As(err, &re) || re.StatusCode != http.StatusConflict || re.ErrorCode != 409 {
		return fmt.Errorf("create %s breaking: %v, want a 409 ResponseError", subject, err)
	}
	vs, err := c.cl.SubjectVersions(ctx, subject)
	if err != nil || !slices.Equal(vs, []int{1, 2}) {
		return fmt.Errorf("subject versions %s: %v, %v", subject, vs, err)
	}
	latest, err := c.cl.SchemaByVersion(ctx, subject, -1)
	if err != nil || latest.ID != ss.ID || latest.Version != 2 {
		return fmt.Errorf("latest of %s: %+v, %v", subject, latest, err)
	}
	ok("%s: v2 id %d; CreateSchema of the breaking change: 409 %q; versions %v", subject, ss.ID, re.Message, vs)
	return nil
}

// avroOrder is the value of the Avro records; the fields follow avroOrderSchema.
type avroOrder struct {
	ID     string    `avro:"id"`
	Total  float64   `avro:"total"`
	Qty    int64     `avro:"qty"`
	Paid   bool      `avro:"paid"`
	Note   *string   `avro:"note"`
	Status string    `avro:"status"`
	Tags   []string  `avro:"tags"`
	Amount avroMoney `avro:"amount"`
}

type avroMoney struct {
	Currency string `avro:"currency"`
	Units    int64  `avro:"units"`
}

const avroMoneySchema = `{"type":"record","name":"Money","namespace":"walrelay.common","fields":[{"name":"currency","type":"string"},{"name":"units","type":"long"}]}`

const avroOrderSchema = `{"type":"record","name":"Order","namespace":"walrelay.check","fields":[` +
	`{"name":"id","type":"string"},{"name":"total","type":"double"},{"name":"qty","type":"long"},` +
	`{"name":"paid","type":"boolean"},{"name":"note","type":["null","string"],"default":null},` +
	`{"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW","PAID"]}},` +
	`{"name":"tags","type":{"type":"array","items":"string"}},{"name":"amount","type":"walrelay.common.Money"}]}`

func (c *checker) avro(ctx context.Context) ([]record, error) {
	money, err := c.register(ctx, c.prefix+"-walrelay.common.Money", sr.Schema{Schema: avroMoneySchema})
	if err != nil {
		return nil, err
	}
	subject := c.prefix + "-avro-value"
	ref := sr.SchemaReference{Name: "walrelay.common.Money", Subject: money.Subject, Version: money.Version}
	order, err := c.register(ctx, subject, sr.Schema{Schema: avroOrderSchema, References: []sr.SchemaReference{ref}})
	if err != nil {
		return nil, err
	}
	refBy, err := c.cl.SchemaReferences(ctx, money.Subject, money.Version)
	if err != nil || len(refBy) != 1 || refBy[0].ID != order.ID {
		return nil, fmt.Errorf("schemas referencing %s: %+v, %v; want id %d", money.Subject, refBy, err, order.ID)
	}
	ok("%s: SchemaReferences (referenced by) -> id %d", money.Subject, refBy[0].ID)
	v2 := avroOrderSchema[:len(avroOrderSchema)-2] + `,{"name":"currency","type":"string","default":"EUR"}]}`
	bad := v2[:len(v2)-2] + `,{"name":"region","type":"string"}]}`
	if err := c.evolve(ctx, subject, sr.Schema{Schema: v2, References: []sr.SchemaReference{ref}},
		sr.Schema{Schema: bad, References: []sr.SchemaReference{ref}}); err != nil {
		return nil, err
	}

	// Encode with version 1 (its id), the way a producer pinned to a schema does.
	names := &avro.SchemaCache{}
	if _, err := avro.ParseWithCache(avroMoneySchema, "", names); err != nil {
		return nil, fmt.Errorf("parse money: %w", err)
	}
	schema, err := avro.ParseWithCache(avroOrderSchema, "", names)
	if err != nil {
		return nil, fmt.Errorf("parse order: %w", err)
	}
	var serde sr.Serde
	serde.Register(order.ID, avroOrder{}, sr.EncodeFn(func(v any) ([]byte, error) { return avro.Marshal(schema, v) }))
	note := "leave at the door"
	values := []avroOrder{
		{ID: "o-1", Total: 12.5, Qty: 3, Paid: true, Note: &note, Status: "PAID", Tags: []string{"a", "b"}, Amount: avroMoney{"EUR", 1250}},
		{ID: "o-2", Total: 0, Qty: 9007199254740993, Status: "NEW", Tags: []string{}, Amount: avroMoney{"USD", -1}},
	}
	var recs []record
	for _, v := range values {
		b, err := serde.Encode(v)
		if err != nil {
			return nil, fmt.Errorf("avro encode: %w", err)
		}
		var n any
		if v.Note != nil {
			n = *v.Note
		}
		recs = append(recs, record{topic: c.prefix + "-avro", key: v.ID, id: order.ID, value: b, want: map[string]any{
			"id": v.ID, "total": v.Total, "qty": v.Qty, "paid": v.Paid, "note": n, "status": v.Status,
			"tags": v.Tags, "amount": map[string]any{"currency": v.Amount.Currency, "units": v.Amount.Units},
		}})
	}
	return recs, nil
}

const protoMoney = `syntax = "proto3";
package walrelay.common;

message Money {
  string currency = 1;
  int64 units = 2;
}
`

const protoOrders = `syntax = "proto3";
package walrelay.check;

import "walrelay/common/money.proto";

message Order {
  message Item {
    string sku = 1;
    int32 count = 2;
  }
  string id = 1;
  double total = 2;
  int64 qty = 3;
  bool paid = 4;
  repeated string tags = 5;
  walrelay.common.Money amount = 6;
  Item first = 7;
}

message Refund {
  string order_id = 1;
  int64 cents = 2;
}
`

func (c *checker) protobuf(ctx context.Context) ([]record, error) {
	const moneyPath = "walrelay/common/money.proto"
	money, err := c.register(ctx, c.prefix+"-money.proto", sr.Schema{Schema: protoMoney, Type: sr.TypeProtobuf})
	if err != nil {
		return nil, err
	}
	subject := c.prefix + "-proto-value"
	ref := sr.SchemaReference{Name: moneyPath, Subject: money.Subject, Version: money.Version}
	orders, err := c.register(ctx, subject, sr.Schema{Schema: protoOrders, Type: sr.TypeProtobuf, References: []sr.SchemaReference{ref}})
	if err != nil {
		return nil, err
	}
	v2 := strings.Replace(protoOrders, "  int64 cents = 2;\n", "  int64 cents = 2;\n  string reason = 3;\n", 1)
	bad := strings.Replace(v2, "  string id = 1;\n", "  int64 id = 1;\n", 1)
	if err := c.evolve(ctx, subject, sr.Schema{Schema: v2, Type: sr.TypeProtobuf, References: []sr.SchemaReference{ref}},
		sr.Schema{Schema: bad, Type: sr.TypeProtobuf, References: []sr.SchemaReference{ref}}); err != nil {
		return nil, err
	}

	// Compile the schema text as the registry holds it, imports resolved from the reference.
	text, err := c.cl.SchemaByID(ctx, orders.ID)
	if err != nil {
		return nil, err
	}
	depText, err := c.cl.SchemaByVersion(ctx, text.References[0].Subject, text.References[0].Version)
	if err != nil {
		return nil, err
	}
	sources := map[string]string{"orders.proto": text.Schema, text.References[0].Name: depText.Schema.Schema}
	comp := protocompile.Compiler{Resolver: &protocompile.SourceResolver{Accessor: protocompile.SourceAccessorFromMap(sources)}}
	files, err := comp.Compile(ctx, "orders.proto")
	if err != nil {
		return nil, fmt.Errorf("compile the registered .proto: %w", err)
	}
	fd := files[0]
	ok("%s: compiled the registered text with protocompile: %d messages", subject, fd.Messages().Len())

	order := fd.Messages().ByName("Order")
	item := order.Messages().ByName("Item")
	refund := fd.Messages().ByName("Refund")
	mo := dynamicpb.NewMessage(order)
	set(mo, "id", "o-1")
	set(mo, "total", 12.5)
	set(mo, "qty", int64(9007199254740993))
	set(mo, "paid", true)
	tags := mo.Mutable(order.Fields().ByName("tags")).List()
	tags.Append(protoreflect.ValueOfString("a"))
	tags.Append(protoreflect.ValueOfString("b"))
	amount := mo.Mutable(order.Fields().ByName("amount")).Message()
	amount.Set(amount.Descriptor().Fields().ByName("currency"), protoreflect.ValueOfString("EUR"))
	amount.Set(amount.Descriptor().Fields().ByName("units"), protoreflect.ValueOfInt64(1250))
	first := mo.Mutable(order.Fields().ByName("first")).Message()
	first.Set(item.Fields().ByName("sku"), protoreflect.ValueOfString("sku-1"))
	first.Set(item.Fields().ByName("count"), protoreflect.ValueOfInt32(2))
	mr := dynamicpb.NewMessage(refund)
	set(mr, "order_id", "o-1")
	set(mr, "cents", int64(-500))
	mi := dynamicpb.NewMessage(item)
	set(mi, "sku", "sku-9")
	set(mi, "count", int32(7))

	var recs []record
	for _, m := range []struct {
		key   string
		msg   *dynamicpb.Message
		index []int
	}{{"o-1", mo, []int{0}}, {"r-1", mr, []int{1}}, {"i-1", mi, []int{0, 0}}} {
		body, err := proto.Marshal(m.msg)
		if err != nil {
			return nil, err
		}
		b, err := (&sr.ConfluentHeader{}).AppendEncode(nil, orders.ID, m.index)
		if err != nil {
			return nil, err
		}
		want, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m.msg)
		if err != nil {
			return nil, err
		}
		recs = append(recs, record{topic: c.prefix + "-proto", key: m.key, id: orders.ID, value: append(b, body...), want: json.RawMessage(want)})
	}
	return recs, nil
}

func set(m *dynamicpb.Message, field string, v any) {
	m.Set(m.Descriptor().Fields().ByName(protoreflect.Name(field)), protoreflect.ValueOf(v))
}

const jsonOrderSchema = `{"$schema":"http://json-schema.org/draft-07/schema#","title":"Order","type":"object",` +
	`"properties":{"id":{"type":"string"},"total":{"type":"number"},"tags":{"type":"array","items":{"type":"string"}}},` +
	`"required":["id","total"],"additionalProperties":false}`

func (c *checker) jsonSchema(ctx context.Context) ([]record, error) {
	subject := c.prefix + "-json-value"
	ss, err := c.register(ctx, subject, sr.Schema{Schema: jsonOrderSchema, Type: sr.TypeJSON})
	if err != nil {
		return nil, err
	}
	v2 := strings.Replace(jsonOrderSchema, `"additionalProperties":false`, `"additionalProperties":true`, 1)
	bad := strings.Replace(v2, `"id":{"type":"string"}`, `"id":{"type":"integer"}`, 1)
	if err := c.evolve(ctx, subject, sr.Schema{Schema: v2, Type: sr.TypeJSON}, sr.Schema{Schema: bad, Type: sr.TypeJSON}); err != nil {
		return nil, err
	}

	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(jsonOrderSchema))
	if err != nil {
		return nil, err
	}
	jc := jsonschema.NewCompiler()
	if err := jc.AddResource("order.json", doc); err != nil {
		return nil, err
	}
	sch, err := jc.Compile("order.json")
	if err != nil {
		return nil, fmt.Errorf("compile json schema: %w", err)
	}
	payloads := []string{`{"id":"o-1","total":12.5,"tags":["a"]}`, `{"id":"o-2","total":0}`}
	var recs []record
	for i, p := range payloads {
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(p))
		if err != nil {
			return nil, err
		}
		if err := sch.Validate(v); err != nil {
			return nil, fmt.Errorf("payload %s: %w", p, err)
		}
		b, err := (&sr.ConfluentHeader{}).AppendEncode(nil, ss.ID, nil)
		if err != nil {
			return nil, err
		}
		recs = append(recs, record{topic: c.prefix + "-json", key: fmt.Sprintf("o-%d", i+1), id: ss.ID, value: append(b, p...), want: json.RawMessage(p)})
	}
	bad2, _ := jsonschema.UnmarshalJSON(strings.NewReader(`{"id":1,"total":"x"}`))
	if sch.Validate(bad2) == nil {
		return nil, errors.New("json schema accepted a payload that does not fit")
	}
	ok("%s: payloads validated with santhosh-tekuri/jsonschema, a misfit refused", subject)
	return recs, nil
}

func produce(ctx context.Context, brokers string, recs []record) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers), kgo.AllowAutoTopicCreation())
	if err != nil {
		return err
	}
	defer cl.Close()
	for _, r := range recs {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: r.topic, Key: []byte(r.key), Value: r.value}).FirstErr(); err != nil {
			return fmt.Errorf("produce to %s: %w", r.topic, err)
		}
	}
	return nil
}

// line is one record as srcheck expects it or as the consumer printed it.
type line struct {
	Topic    string          `json:"topic"`
	Key      string          `json:"key"`
	SchemaID int             `json:"schemaId"`
	Value    json.RawMessage `json:"value"`
	Error    string          `json:"error"`
}

func readLines(path string) (map[string]line, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := map[string]line{}
	for _, s := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if s == "" {
			continue
		}
		var l line
		if err := json.Unmarshal([]byte(s), &l); err != nil {
			return nil, fmt.Errorf("%s: %q: %w", path, s, err)
		}
		k := l.Topic + "/" + l.Key
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("%s: record %s twice", path, k)
		}
		m[k] = l
	}
	return m, nil
}

func compare(expectedPath, gotPath string) (int, error) {
	want, err := readLines(expectedPath)
	if err != nil {
		return 0, err
	}
	got, err := readLines(gotPath)
	if err != nil {
		return 0, err
	}
	var errs []error
	for k, w := range want {
		g, found := got[k]
		switch {
		case !found:
			errs = append(errs, fmt.Errorf("%s: not consumed", k))
		case g.Error != "":
			errs = append(errs, fmt.Errorf("%s: consumer error: %s", k, g.Error))
		case g.SchemaID != w.SchemaID:
			errs = append(errs, fmt.Errorf("%s: schema id %d, want %d", k, g.SchemaID, w.SchemaID))
		default:
			if eq, err := sameJSON(w.Value, g.Value); err != nil || !eq {
				errs = append(errs, fmt.Errorf("%s: value %s, want %s (%v)", k, g.Value, w.Value, err))
			}
		}
	}
	for k := range got {
		if _, found := want[k]; !found {
			errs = append(errs, fmt.Errorf("%s: consumed but not produced by this run", k))
		}
	}
	return len(want), errors.Join(errs...)
}

// sameJSON: a and b hold the same JSON value; numbers are equal when they denote the same
// rational (0 and 0.0, no float rounding of 64-bit integers).
func sameJSON(a, b json.RawMessage) (bool, error) {
	var va, vb any
	for _, x := range []struct {
		raw json.RawMessage
		v   *any
	}{{a, &va}, {b, &vb}} {
		d := json.NewDecoder(strings.NewReader(string(x.raw)))
		d.UseNumber()
		if err := d.Decode(x.v); err != nil {
			return false, err
		}
	}
	return equalValues(va, vb), nil
}

func equalValues(a, b any) bool {
	switch x := a.(type) {
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		rx, okx := new(big.Rat).SetString(x.String())
		ry, oky := new(big.Rat).SetString(y.String())
		return okx && oky && rx.Cmp(ry) == 0
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, found := y[k]
			if !found || !equalValues(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equalValues(x[i], y[i]) {
				return false
			}
		}
		return true
	default:
		return a == b
	}
}
