package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
)

// What a real Kafka broker does to walrelay's records, where kfake would not show it:
// topic names that collide, partitions added to a topic in use, and reserved header names.

// createTopic creates topic with the given partition count and fails t on error.
func createTopic(t *testing.T, env *testEnv, topic string, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := newKafkaClient(t, env.kafka)
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, -1, nil, topic); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// insertEvent writes one event in a transaction of its own; extraCols/extraVals name
// further columns (e.g. ", kpart" and ", 2").
func insertEvent(t *testing.T, conn *pgx.Conn, table, id, aggType, headers, extraCols, extraVals string) *txnInfo {
	t.Helper()
	return runTxn(t, conn, false, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `INSERT INTO `+qtable(table)+` (id, aggregate_type, aggregate_id, event_type, payload, headers`+extraCols+`)
			VALUES ($1::uuid, $2, 'a-1', 'Placed', '{"n": 1}'::jsonb, $3::jsonb`+extraVals+`)`, id, aggType, headers)
		return err
	})
}

// TestTopicCollisionRefusedIsPoison on a real Kafka 4: a rendered topic
// that collides with an existing one (`order.item` next to `order_item`: Kafka refuses
// names that differ only in '.' versus '_') is poison. Under --on-poison=dlq the event
// goes to the dead-letter topic with reason topic_refused and the broker's message, the
// events after it are delivered and the slot moves on; under --on-poison=stop walrelay
// exits non-zero with an ERROR line naming the event and the reason, and the slot stays
// before it (walrelay once exited on it in both modes, and again on restart).
func TestTopicCollisionRefusedIsPoison(t *testing.T) {
	env := requireEnv(t)
	c := newContract(t, env, "hcoll")
	c.migrate(env.pgDSN, c.table)
	prefix := c.name + "."
	existing, colliding, dlqTopic := prefix+"order_item", prefix+"order.item", prefix+"dlq"
	createTopic(t, env, existing, 1)

	p := c.startReady("--dlq-topic", dlqTopic)
	addr := p.metricsAddr()
	conn := connect(t, env.pgDSN)
	badID, goodID := newUUID(), newUUID()
	insertEvent(t, conn, c.table, badID, "order.item", "{}", "", "")
	last := insertEvent(t, conn, c.table, goodID, "order_item", "{}", "", "")
	waitSlotLSN(t, env.pgDSN, c.name, last.post, 90*time.Second, p)

	recs := consumeAll(t, env.kafka, prefix, []string{existing, dlqTopic})
	if n := len(recs[existing]); n != 1 || header(recs[existing][0], "id") != goodID {
		t.Errorf("%s holds %d records, want only the good event %s", existing, n, goodID)
	}
	if _, ok := recs[colliding]; ok {
		t.Errorf("the colliding topic %s exists", colliding)
	}
	if n := len(recs[dlqTopic]); n != 1 {
		t.Fatalf("%s holds %d records, want the colliding event only", dlqTopic, n)
	}
	r := recs[dlqTopic][0]
	for k, want := range map[string]string{"id": badID, "walrelay.dlq.reason": "topic_refused", "walrelay.dlq.topic": colliding,
		"walrelay.dlq.table": c.table} {
		if got := header(r, k); got != want {
			t.Errorf("dead letter header %s = %q, want %q", k, got, want)
		}
	}
	if e := header(r, "walrelay.dlq.error"); !strings.Contains(e, "INVALID_TOPIC_EXCEPTION") || !strings.Contains(e, "collides") {
		t.Errorf("walrelay.dlq.error = %q, want Kafka's INVALID_TOPIC_EXCEPTION and its message about the collision", e)
	}
	series := `walrelay_dead_letters_total{reason="topic_refused"}`
	if v, ok := metricValue(t, addr, series); !ok || v != 1 {
		t.Errorf("%s = %v (present %v), want 1", series, v, ok)
	}
	if p.exited() {
		t.Fatalf("walrelay exited (%s) in dlq mode\n%s", p.exitStatus(), p.tail(20))
	}
	t.Logf("dead letter: %s", header(r, "walrelay.dlq.error"))
	p.sigterm()
	if !p.waitExit(60*time.Second) || p.exitCode() != 0 {
		t.Errorf("walrelay after SIGTERM: %s, want exit 0\n%s", p.exitStatus(), p.tail(20))
	}

	// --on-poison=stop on a fresh slot: exits, says why, and the slot stays before it.
	slot := c.extraSlot("stop")
	p2 := c.start("--slot", slot, "--on-poison", "stop", "--dlq-topic", dlqTopic, "--heartbeat-interval", "0")
	p2.waitReady(60 * time.Second)
	waitSlotStreaming(t, env.pgDSN, slot, 60*time.Second, p2)
	before := slotLSN(t, env.pgDSN, slot)
	stopID := newUUID()
	tx := insertEvent(t, conn, c.table, stopID, "order.item", "{}", "", "")
	if !p2.waitExit(60 * time.Second) {
		t.Fatalf("walrelay still running 60 s after a colliding topic under --on-poison=stop\n%s", p2.tail(20))
	}
	if p2.exitCode() == 0 {
		t.Errorf("walrelay exited 0 on a refused topic, want non-zero")
	}
	line := errorLine(p2.log(), []string{stopID, "topic_refused", "collides"})
	if line == "" {
		t.Fatalf("no ERROR line names the event %s, topic_refused and the collision\n%s", stopID, p2.tail(20))
	}
	if got := slotLSN(t, env.pgDSN, slot); got > tx.begin {
		t.Errorf("slot %s confirmed %s, past the refused event's transaction (begins %s, slot was at %s)", slot, got, tx.begin, before)
	}
	t.Logf("stop: %s", line)
}

// TestPartitionsAddedSeenWithoutRestart on a real Kafka 4: an event
// with an explicit partition (--column-partition) that the topic lacks is dead-lettered
// as bad_partition; once partitions are added to the topic (kadm CreatePartitions), the
// next events for that partition land there, without restarting walrelay.
func TestPartitionsAddedSeenWithoutRestart(t *testing.T) {
	env := requireEnv(t)
	c := newContract(t, env, "hpart")
	c.migrate(env.pgDSN, c.table)
	c.exec("ALTER TABLE " + qtable(c.table) + " ADD COLUMN kpart integer")
	prefix := c.name + "."
	topic, dlqTopic := prefix+"order", prefix+"dlq"
	createTopic(t, env, topic, 1)

	p := c.startReady("--dlq-topic", dlqTopic, "--column-partition", "kpart")
	conn := connect(t, env.pgDSN)
	// A keyed event first: walrelay's producer then knows the topic with one partition.
	keyed := newUUID()
	insertEvent(t, conn, c.table, keyed, "order", "{}", ", kpart", ", NULL")
	tx := insertEvent(t, conn, c.table, newUUID(), "order", "{}", ", kpart", ", 2")
	waitSlotLSN(t, env.pgDSN, c.name, tx.post, 90*time.Second, p)
	recs := consumeAll(t, env.kafka, prefix, []string{topic, dlqTopic})
	if n := len(recs[dlqTopic]); n != 1 || header(recs[dlqTopic][0], "walrelay.dlq.reason") != "bad_partition" {
		t.Fatalf("%s holds %d records, want the event for partition 2 of 1 as bad_partition", dlqTopic, n)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := newKafkaClient(t, env.kafka)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.UpdatePartitions(ctx, 3, topic); err != nil {
		t.Fatalf("add partitions to %s: %v", topic, err)
	}
	for {
		td, err := adm.ListTopics(ctx, topic)
		if err == nil && len(td[topic].Partitions) == 3 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%s never showed 3 partitions: %v", topic, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // past the sink's re-read limit for a topic (100ms)

	var ids []string
	for range 3 {
		id := newUUID()
		ids = append(ids, id)
		tx = insertEvent(t, conn, c.table, id, "order", "{}", ", kpart", ", 2")
	}
	waitSlotLSN(t, env.pgDSN, c.name, tx.post, 90*time.Second, p)
	recs = consumeAll(t, env.kafka, prefix, []string{topic, dlqTopic})
	if n := len(recs[dlqTopic]); n != 1 {
		t.Errorf("%s holds %d records, want still only the event from before the partitions were added", dlqTopic, n)
	}
	got := map[string]int32{}
	for _, r := range recs[topic] {
		got[header(r, "id")] = r.Partition
	}
	if _, ok := got[keyed]; !ok || len(got) != 1+len(ids) {
		t.Errorf("%s holds %v, want the keyed event and the 3 for partition 2", topic, got)
	}
	for _, id := range ids {
		if part, ok := got[id]; !ok || part != 2 {
			t.Errorf("event %s: in %s=%v partition %d, want partition 2", id, topic, ok, part)
		}
	}
	if p.exited() {
		t.Fatalf("walrelay exited (%s)\n%s", p.exitStatus(), p.tail(20))
	}
}

// TestReservedHeadersDropped end to end: entries of the headers column
// named like walrelay's own headers (id, event_type, aggregate_type, walrelay.*, ce_*)
// are dropped, the app's other entries kept, and
// walrelay_reserved_headers_dropped_total counts them.
func TestReservedHeadersDropped(t *testing.T) {
	env := requireEnv(t)
	c := newContract(t, env, "hhdr")
	c.migrate(env.pgDSN, c.table)
	prefix := c.name + "."
	p := c.startReady()
	addr := p.metricsAddr()
	conn := connect(t, env.pgDSN)
	id := newUUID()
	tx := insertEvent(t, conn, c.table, id, "order",
		`{"id": "forged", "event_type": "Forged", "walrelay.lsn": "0/0", "ce_type": "forged", "traceparent": "00-abc-def-01"}`, "", "")
	waitSlotLSN(t, env.pgDSN, c.name, tx.post, 90*time.Second, p)
	recs := consumeAll(t, env.kafka, prefix, []string{prefix + "order"})
	if n := len(recs[prefix+"order"]); n != 1 {
		t.Fatalf("%sorder holds %d records, want 1", prefix, n)
	}
	r := recs[prefix+"order"][0]
	count := map[string]int{}
	for _, h := range r.Headers {
		count[h.Key]++
	}
	for _, k := range []string{"id", "event_type", "walrelay.lsn"} {
		if count[k] != 1 {
			t.Errorf("header %s appears %d times, want once", k, count[k])
		}
	}
	if count["ce_type"] != 0 {
		t.Errorf("the headers column's ce_type was kept")
	}
	if header(r, "id") != id || header(r, "event_type") != "Placed" || header(r, "traceparent") != "00-abc-def-01" {
		t.Errorf("headers id=%q event_type=%q traceparent=%q, want %s, Placed and the app's traceparent",
			header(r, "id"), header(r, "event_type"), header(r, "traceparent"), id)
	}
	if l, err := parseLSN(header(r, "walrelay.lsn")); err != nil || l < tx.begin {
		t.Errorf("walrelay.lsn = %q (%v), want the event's position, not the forged 0/0", header(r, "walrelay.lsn"), err)
	}
	if v, ok := metricValue(t, addr, "walrelay_reserved_headers_dropped_total"); !ok || v != 4 {
		t.Errorf("walrelay_reserved_headers_dropped_total = %v (present %v), want 4", v, ok)
	}
	if n := strings.Count(p.log(), "would shadow a walrelay header"); n != 4 {
		t.Errorf("%d log lines about dropped headers, want 4 (one per key)", n)
	}
}
