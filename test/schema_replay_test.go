package e2e

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/walrelay/walrelay/internal/testwait"
	"github.com/walrelay/walrelay/test/registrytest"
)

// srRow is one outbox row of TestSchemaReplay.
type srRow struct {
	id, aggType, key string
	payload          *string // nil: NULL (a tombstone)
	twin             *srRow  // a refused row: the delivered row with the same payload
}

// srReplayPayload is the i-th order of TestSchemaReplay, in the form the
// consumer prints it back (every field present, "at" in epoch milliseconds).
func srReplayPayload(i int) string {
	note := "null"
	if i%2 == 1 {
		note = fmt.Sprintf("%q", fmt.Sprintf("note %d", i))
	}
	status := []string{"NEW", "PAID"}[i%2]
	return fmt.Sprintf(`{"id":"o-%d","qty":%d,"total":%d.25,"paid":%t,"note":%s,"status":%q,"tags":["t%d","u"],"at":%d,"amount":{"currency":"EUR","units":%d}}`,
		i, 1000+i, i, i%2 == 1, note, status, i, 1709284830123+int64(i)*1000, -50*i)
}

// TestSchemaReplay: records encoded through the schema registry (Avro value and
// key, by a table-wide YAML rule, the real Apicurio registry) are replayed and
// redriven like any other, encoded from the row with the same rules:
//   - `walrelay replay`, at least once and --delivery exactly-once, sends each row
//     as the very record `walrelay run` made: the same Confluent frame (magic
//     byte, schema id) and Avro body byte for byte, the same framed key and
//     headers apart from the replay marker; a tombstone stays one; the exactly-once
//     replay's records are transactional.
//   - events dead-lettered topic_refused (their topic collided with another) keep
//     the payload as stored in the dead-letter topic; once the topic exists,
//     `walrelay dlq redrive` sends them framed and encoded with the subject of
//     their topic, byte for byte what run makes of the same payload: from their
//     rows, and, for a row deleted meanwhile, from the stored record.
//
// Apicurio's deserializers (test/registry/consumer.sh, read_committed) then decode
// every record of the topics to the row's payload.
func TestSchemaReplay(t *testing.T) {
	env := requireEnv(t)
	url := requireRegistry(t)
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	s := newScenario(t, env, "srreplay")
	cl := srClient(t, url, "", "")
	dlq := s.name + ".dlq"
	topic, colliding, target := s.name+".order", s.name+".order_item", s.name+".order.item"

	kcl := newKafkaClient(t, env.kafka)
	defer kcl.Close()
	adm := kadm.NewClient(kcl)
	if _, err := adm.CreateTopic(ctx, 3, -1, nil, colliding); err != nil {
		t.Fatal(err)
	}

	money := srCreate(ctx, t, cl, s.name+"-wr.common.Money", srMoneyAvsc, sr.TypeAvro)
	dir := writeFiles(t, filepath.Join(t.TempDir(), "schemas"), map[string]string{"order.avsc": srOrderAvsc, "key.avsc": srKeyAvsc})
	conf := writeFiles(t, filepath.Join(t.TempDir(), "conf"), map[string]string{"walrelay.yaml": fmt.Sprintf(`
schema_rules:
  - table: %[1]s
    value: {file: %[2]s/order.avsc, references: [{name: wr.common.Money, subject: %[3]q, version: %[4]d}]}
    key: {file: %[2]s/key.avsc}
`, s.table, dir, money.Subject, money.Version)})
	// Every command gets the same settings, as the README asks.
	schemaArgs := []string{"--config", filepath.Join(conf, "walrelay.yaml"), "--schema-registry-url", url, "--dlq-topic", dlq}
	p := s.startReady(schemaArgs...)

	// Three transactions of orders (one a tombstone), each with a row whose
	// topic Kafka refuses; a refused row has the payload of an order.
	var orders, refused []*srRow
	for i := range 12 {
		r := &srRow{id: newUUID(), aggType: "order", key: fmt.Sprintf("o-%d", i%4)}
		if i != 5 {
			r.payload = strp(srReplayPayload(i))
		}
		orders = append(orders, r)
	}
	for i := range 3 {
		refused = append(refused, &srRow{id: newUUID(), aggType: "order.item", key: fmt.Sprintf("oi-%d", i%2), payload: orders[i*4+2].payload, twin: orders[i*4+2]})
	}
	for txn := range 3 {
		rows := append(append([]*srRow(nil), orders[txn*4:txn*4+4]...), refused[txn])
		err := pgPool(t, env.pgDSN).with(ctx, func(c *pgx.Conn) error {
			return pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
				for _, r := range rows {
					if _, err := tx.Exec(ctx, "INSERT INTO "+faultQuote(s.table)+" (id, aggregate_type, aggregate_id, event_type, payload) VALUES ($1, $2, $3, 'OrderChanged', $4::jsonb)",
						r.id, r.aggType, r.key, r.payload); err != nil {
						return err
					}
				}
				return nil
			})
		})
		if err != nil {
			t.Fatalf("insert into %s: %v", s.table, err)
		}
	}
	waitSlotLSN(t, env.pgDSN, s.name, currentLSN(t, env.pgDSN), 90*time.Second, p)

	subjectIDs := map[string]int{}
	subjectID := func(subject string) int {
		if _, ok := subjectIDs[subject]; !ok {
			subjectIDs[subject] = srSubjectID(ctx, t, cl, subject)
		}
		return subjectIDs[subject]
	}
	// checkEncoded checks that rec is row's record as run makes it for rec's
	// topic: value and key framed with the ids of the topic's subjects, the
	// key an Avro string, a NULL payload a tombstone.
	checkEncoded := func(rec *kgo.Record, row *srRow, what string) {
		t.Helper()
		if row.payload == nil {
			if rec.Value != nil {
				t.Errorf("%s %s: a NULL payload became value %x, want a tombstone", what, row.id, rec.Value)
			}
		} else {
			srCheckFrame(t, rec.Value, subjectID(rec.Topic+"-value"), nil, fmt.Sprintf("%s %s value", what, row.id))
		}
		body := srCheckFrame(t, rec.Key, subjectID(rec.Topic+"-key"), nil, fmt.Sprintf("%s %s key", what, row.id))
		if want := append([]byte{byte(2 * len(row.key))}, row.key...); body != nil && !bytes.Equal(body, want) {
			t.Errorf("%s %s: key body %x, want the Avro string %x", what, row.id, body, want)
		}
		// Partitioned by the aggregate id, not by the framed key.
		if want := aggregatePartition(ctx, t, adm, rec.Topic, row.key); rec.Partition != want {
			t.Errorf("%s %s: partition %d, want %d (murmur2 of the aggregate id %q, not of the encoded key)", what, row.id, rec.Partition, want, row.key)
		}
	}

	// What run made: the orders encoded; the refused rows dead-lettered with
	// the payload as stored (not encoded) and the aggregate id as key.
	recs := consumeAll(t, env.kafka, s.name+".", []string{topic, dlq})
	orig, _ := splitReplays(recs)
	for _, r := range orders {
		if o := orig[r.id]; o == nil || o.Topic != topic {
			t.Fatalf("order %s: not in %s after walrelay run", r.id, topic)
		} else {
			checkEncoded(o, r, "run's record of")
		}
	}
	dead := map[string]*kgo.Record{}
	for _, d := range recs[dlq] {
		dead[header(d, "id")] = d
	}
	for _, r := range refused {
		d := dead[r.id]
		switch {
		case d == nil:
			t.Fatalf("refused row %s: no dead letter in %s", r.id, dlq)
		case header(d, "walrelay.dlq.reason") != "topic_refused" || header(d, "walrelay.dlq.topic") != target:
			t.Fatalf("refused row %s: dead letter reason %q for %q, want topic_refused for %s", r.id, header(d, "walrelay.dlq.reason"), header(d, "walrelay.dlq.topic"), target)
		case string(d.Key) != r.key || !registrytest.SameJSON(t, d.Value, []byte(*r.payload)):
			t.Errorf("refused row %s: dead letter key %q value %s, want the aggregate id and the payload as stored", r.id, d.Key, d.Value)
		}
	}
	if len(recs[dlq]) != len(refused) {
		t.Fatalf("%s holds %d dead letters, want %d", dlq, len(recs[dlq]), len(refused))
	}

	// Replays of the orders, at least once and exactly once.
	replays := map[string]string{"sr-alo": "at-least-once", "sr-eos": "exactly-once"}
	for _, id := range []string{"sr-alo", "sr-eos"} {
		args := append(s.commonArgs("replay", "--replay-id", id, "--aggregate-type", "order", "--delivery", replays[id]), schemaArgs...)
		code, out, _ := s.cmdRun(3*time.Minute, args...)
		if code != 0 || !strings.Contains(out, fmt.Sprintf("replayed %d rows", len(orders))) {
			t.Fatalf("replay %s (%s): exit %d, want 0 and 'replayed %d rows'", id, replays[id], code, len(orders))
		}
	}
	// Kafka writes a transaction's commit markers after EndTxn returns: a
	// read_committed reader sees the exactly-once replay once the last
	// stable offsets reach the end.
	testwait.Eventually(t, 30*time.Second, "the exactly-once replay's commit markers", func() bool {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil || ends.Error() != nil {
			return false
		}
		stable, err := adm.ListCommittedOffsets(ctx, topic)
		if err != nil || stable.Error() != nil {
			return false
		}
		done := true
		ends.Each(func(e kadm.ListedOffset) {
			if o, ok := stable.Lookup(topic, e.Partition); !ok || o.Offset != e.Offset {
				done = false
			}
		})
		return done
	})
	recs = consumeAllIsolation(t, env.kafka, topic, []string{topic}, true)
	_, replayed := splitReplays(recs)
	rows := map[string]*srRow{}
	for _, r := range orders {
		rows[r.id] = r
	}
	seen := map[string]int{}
	for _, rec := range replayed {
		id, marker := header(rec, "id"), header(rec, hdrReplay)
		row, o := rows[id], orig[id]
		mode, ok := replays[marker]
		if row == nil || !ok {
			t.Errorf("replayed record of %s (marker %q): no order of the test", id, marker)
			continue
		}
		seen[marker+"/"+id]++
		if d := sameAsOriginal(rec, o); d != "" {
			t.Errorf("%s replay of %s differs from run's record: %s", mode, id, d)
		}
		checkEncoded(rec, row, mode+" replay of")
		if rec.Attrs.IsTransactional() != (mode == "exactly-once") {
			t.Errorf("%s replay of %s: transactional=%t", mode, id, rec.Attrs.IsTransactional())
		}
	}
	for marker := range replays {
		for _, r := range orders {
			if n := seen[marker+"/"+r.id]; n != 1 {
				t.Errorf("replay %s sent order %s %d times, want once", marker, r.id, n)
			}
		}
	}
	if len(replayed) != len(replays)*len(orders) {
		t.Fatalf("%s holds %d replayed records, want %d", topic, len(replayed), len(replays)*len(orders))
	}

	// The refusal's cause goes: the colliding topic is deleted and the right
	// one made. One refused row is deleted meanwhile: it goes from the stored
	// record.
	replaceTopic(ctx, t, adm, colliding, target)
	gone := refused[1]
	pgExec(t, env.pgDSN, "DELETE FROM "+faultQuote(s.table)+" WHERE id = $1", gone.id)
	code, out, _ := s.cmdRun(2*time.Minute, append(s.commonArgs("dlq", "redrive"), schemaArgs...)...)
	wantOut := fmt.Sprintf("sent %d dead letters of %s to their topics (%d made again from their rows), 0 dead-lettered again", len(refused), dlq, len(refused)-1)
	if code != 0 || !strings.Contains(out, wantOut) {
		t.Fatalf("redrive: exit %d, want 0 and %q", code, wantOut)
	}
	redriven := consumeAll(t, env.kafka, target, []string{target})[target]
	for _, r := range refused {
		rows[r.id] = r
	}
	byID := map[string]*kgo.Record{}
	for _, rec := range redriven {
		byID[header(rec, "id")] = rec
	}
	for _, r := range refused {
		rec, d := byID[r.id], dead[r.id]
		from := "from its row"
		if r == gone {
			from = "from the stored record"
		}
		if rec == nil {
			t.Errorf("refused row %s: not in %s after the redrive", r.id, target)
			continue
		}
		checkEncoded(rec, r, "redriven ("+from+")")
		// The Avro body is the one run wrote for the same payload.
		if twin := orig[r.twin.id]; len(rec.Value) < 5 || !bytes.Equal(rec.Value[5:], twin.Value[5:]) {
			t.Errorf("redriven %s (%s): value %x, want the frame of %s-value and run's Avro body of the same payload %x", r.id, from, rec.Value, target, twin.Value[5:])
		}
		if header(rec, hdrLSN) != header(d, hdrLSN) || header(rec, "walrelay.dlq.reason") != "" {
			t.Errorf("redriven %s (%s): headers %v, want its dead letter's without the dead-letter ones", r.id, from, rec.Headers)
		}
	}
	if len(redriven) != len(refused) {
		t.Fatalf("%s holds %d records after the redrive, want %d", target, len(redriven), len(refused))
	}

	// The independent consumer decodes every record to its row's payload.
	want := map[string]string{} // topic/partition/offset → payload
	for _, list := range []([]*kgo.Record){recs[topic], redriven} {
		for _, rec := range list {
			row := rows[header(rec, "id")]
			w := "null"
			if row.payload != nil {
				w = *row.payload
			}
			want[fmt.Sprintf("%s/%d/%d", rec.Topic, rec.Partition, rec.Offset)] = w
		}
	}
	lines := registrytest.Consume(ctx, t, map[string]string{topic: "avro", target: "avro"}, len(want))
	for _, l := range lines {
		k := fmt.Sprintf("%s/%d/%d", l.Topic, l.Partition, l.Offset)
		w, ok := want[k]
		switch {
		case !ok:
			t.Errorf("the consumer read %s, which is no record of the test", k)
		case l.Error != "":
			t.Errorf("%s: the consumer could not decode it: %s", k, l.Error)
		case !registrytest.SameJSON(t, l.Value, []byte(w)):
			t.Errorf("%s: the consumer read %s, want %s", k, l.Value, w)
		case w != "null" && l.SchemaID != subjectID(l.Topic+"-value"):
			t.Errorf("%s: schema id %d, want %d", k, l.SchemaID, subjectID(l.Topic+"-value"))
		}
		delete(want, k)
	}
	for k := range want {
		t.Errorf("%s: not read by the consumer", k)
	}
	t.Logf("schema replay: %d orders replayed twice, %d refused rows redriven (1 from the stored record), subjects %v, in %s",
		len(orders), len(refused), subjectIDs, time.Since(began).Round(100*time.Millisecond))
}

// aggregatePartition is the partition of aggregate id agg in topic: Kafka's
// default partitioner formula over the id's bytes (franz-go's
// implementation of it; sink's TestMurmur2Reference checks the formula
// against Kafka's own values).
func aggregatePartition(ctx context.Context, t *testing.T, adm *kadm.Client, topic, agg string) int32 {
	t.Helper()
	td, err := adm.ListTopics(ctx, topic)
	if err != nil || td.Error() != nil || len(td[topic].Partitions) == 0 {
		t.Fatalf("partitions of %s: %v %v", topic, err, td.Error())
	}
	n := len(td[topic].Partitions)
	return int32(kgo.StickyKeyPartitioner(nil).ForTopic(topic).Partition(&kgo.Record{Key: []byte(agg)}, n))
}
