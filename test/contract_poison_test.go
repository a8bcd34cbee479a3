package e2e

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// poisonEvent is one row the dead-letter test writes.
type poisonEvent struct {
	name    string // good1, too_large, ...
	reason  string // expected walrelay.dlq.reason; "" for a good event
	aggType string
	aggID   *string // nil: NULL
	payload string  // SQL expression of the jsonb payload
	id      string
	tx      *txnInfo
}

// insertPoisonEvent writes ev in a transaction of its own.
func insertPoisonEvent(t *testing.T, conn *pgx.Conn, table string, ev *poisonEvent) {
	t.Helper()
	ev.id = newUUID()
	ev.tx = runTxn(t, conn, false, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `INSERT INTO `+qtable(table)+` (id, aggregate_type, aggregate_id, event_type, payload)
			VALUES ($1::uuid, $2, $3, $4, `+ev.payload+`)`, ev.id, ev.aggType, ev.aggID, "Poison-"+ev.name)
		return err
	})
}

// poisonEvents are the events of TestContractDeadLetters, in commit order: good ones
// around the three kinds of records Kafka can never accept.
func poisonEvents() []*poisonEvent {
	key := func(s string) *string { return &s }
	return []*poisonEvent{
		{name: "good1", aggType: "order", aggID: key("o-1"), payload: `'{"n": 1}'::jsonb`},
		// 2 MiB of JSON, far above the topic's max.message.bytes (1 MiB). lz4 would
		// compress it to a few KiB: walrelay must check the uncompressed size.
		{name: "too_large", reason: "too_large", aggType: "order", aggID: key("o-big"),
			payload: `jsonb_build_object('blob', repeat('x', 2 * 1024 * 1024))`},
		{name: "good2", aggType: "order", aggID: key("o-1"), payload: `'{"n": 2}'::jsonb`},
		{name: "invalid_topic", reason: "invalid_topic", aggType: "bad type!", aggID: key("b-1"), payload: `'{"topic": "bad"}'::jsonb`},
		{name: "null_aggregate_id", reason: "null_aggregate_id", aggType: "order", aggID: nil, payload: `'{"key": null}'::jsonb`},
		{name: "good3", aggType: "order", aggID: key("o-2"), payload: `'{"n": 3}'::jsonb`},
	}
}

var lsnInErrorRE = regexp.MustCompile(`lsn=([0-9A-Fa-f]+/[0-9A-Fa-f]+)`)

// TestContractDeadLetters: records Kafka will never accept (docs/outbox-contract.md, Dead letters) — larger than
// the topic's max.message.bytes, an invalid rendered topic, a NULL aggregate id — go to
// the dead-letter topic with the reason in headers under the default --on-poison=dlq,
// while the good events around them arrive in order and the slot moves past all of them.
// Under --on-poison=stop (each kind on a fresh slot) walrelay exits non-zero with an
// ERROR line naming the event id, the slot stays before the event, and a restart stops at
// the same event again: never skipped, never silent.
func TestContractDeadLetters(t *testing.T) {
	env := requireEnv(t)
	c := newContract(t, env, "cdlq")
	c.migrate(env.pgDSN, c.table)
	c.exec("ALTER TABLE " + qtable(c.table) + " ALTER COLUMN aggregate_id DROP NOT NULL")
	prefix := c.name + "."
	orderTopic, dlqTopic := prefix+"order", prefix+"dlq"

	// The target topic exists beforehand with a 1 MiB limit and one partition (so that
	// "in order" is offset order).
	{
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cl := newKafkaClient(t, env.kafka)
		maxBytes := "1048576"
		_, err := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, map[string]*string{"max.message.bytes": &maxBytes}, orderTopic)
		cl.Close()
		cancel()
		if err != nil {
			t.Fatalf("create topic %s: %v", orderTopic, err)
		}
	}

	p := c.startReady("--dlq-topic", dlqTopic)
	addr := p.metricsAddr()
	conn := connect(t, env.pgDSN)
	evs := poisonEvents()
	for _, ev := range evs {
		insertPoisonEvent(t, conn, c.table, ev)
	}
	last := evs[len(evs)-1].tx
	waitSlotLSN(t, env.pgDSN, c.name, last.post, 90*time.Second, p)

	payloads := payloadTexts(t, env.pgDSN, c.table, "id")
	var good []*wantRec
	for _, ev := range evs {
		if ev.reason == "" {
			good = append(good, &wantRec{id: ev.id, topic: orderTopic, key: *ev.aggID, value: bytesOrNil(payloads[ev.id]),
				hdrs: stdHeaders(ev.id, "Poison-"+ev.name, ev.aggType), exact: true, tx: ev.tx})
		}
	}
	recs := consumeAll(t, env.kafka, prefix, []string{orderTopic, dlqTopic})
	d := checkDelivery(t, recs, good, dlqTopic)
	var order []string
	for _, r := range recs[orderTopic] {
		order = append(order, header(r, "id"))
	}
	if wantOrder := []string{good[0].id, good[1].id, good[2].id}; !slices.Equal(order, wantOrder) {
		t.Errorf("%s holds ids %v, want the good events in commit order %v", orderTopic, order, wantOrder)
	}
	for topic := range recs {
		if topic != orderTopic && topic != dlqTopic {
			t.Errorf("unexpected topic %s with %d records", topic, len(recs[topic]))
		}
	}

	// The dead letters.
	dlq := map[string]*kgo.Record{}
	for _, r := range recs[dlqTopic] {
		if _, dup := dlq[header(r, "id")]; dup {
			t.Errorf("dead letter %s appears twice", header(r, "id"))
		}
		dlq[header(r, "id")] = r
	}
	if len(recs[dlqTopic]) != 3 {
		t.Errorf("%s has %d records, want 3", dlqTopic, len(recs[dlqTopic]))
	}
	reasons := map[string]int{}
	for _, ev := range evs {
		if ev.reason == "" {
			continue
		}
		r, ok := dlq[ev.id]
		if !ok {
			t.Errorf("%s event %s is not in %s", ev.name, ev.id, dlqTopic)
			continue
		}
		reasons[header(r, "walrelay.dlq.reason")]++
		bad := func(format string, args ...any) {
			t.Errorf("dead letter %s (%s) at %s/%d@%d: %s", ev.id, ev.name, r.Topic, r.Partition, r.Offset, fmt.Sprintf(format, args...))
		}
		for k, v := range map[string]string{
			"walrelay.dlq.reason": ev.reason,
			"walrelay.dlq.table":  c.table,
			"id":                  ev.id,
			"event_type":          "Poison-" + ev.name,
			"aggregate_type":      ev.aggType,
		} {
			if got := header(r, k); got != v {
				bad("header %s = %q, want %q", k, got, v)
			}
		}
		if header(r, "walrelay.dlq.error") == "" {
			bad("header walrelay.dlq.error is empty")
		}
		if l, err := parseLSN(header(r, "walrelay.lsn")); err != nil {
			bad("walrelay.lsn: %v", err)
		} else if l < ev.tx.begin || l > ev.tx.post {
			bad("walrelay.lsn %s outside the transaction's WAL range [%s, %s]", l, ev.tx.begin, ev.tx.post)
		}
		payload := payloads[ev.id]
		switch ev.reason {
		case "too_large":
			if got := header(r, "walrelay.dlq.topic"); got != orderTopic {
				bad("walrelay.dlq.topic = %q, want %q", got, orderTopic)
			}
			if r.Value != nil {
				if string(r.Value) != *payload {
					bad("value %s, want null (omitted) or the payload", describeBytes(r.Value))
				}
			} else if got, want := header(r, "walrelay.dlq.payload_omitted_bytes"), fmt.Sprint(len(*payload)); got != want {
				bad("null value with walrelay.dlq.payload_omitted_bytes = %q, want %q", got, want)
			}
		case "invalid_topic":
			if got, want := header(r, "walrelay.dlq.topic"), prefix+ev.aggType; got != want {
				bad("walrelay.dlq.topic = %q, want %q", got, want)
			}
			if string(r.Value) != *payload {
				bad("value %s, want the payload %q", describeBytes(r.Value), *payload)
			}
		case "null_aggregate_id":
			// The topic renders (aggregate_type is fine); only the key is missing.
			if got, want := header(r, "walrelay.dlq.topic"), orderTopic; got != want {
				bad("walrelay.dlq.topic = %q, want the intended topic %q", got, want)
			}
			if len(r.Key) != 0 {
				bad("key %q, want none", r.Key)
			}
			if string(r.Value) != *payload {
				bad("value %s, want the payload %q", describeBytes(r.Value), *payload)
			}
		}
	}
	for _, reason := range []string{"too_large", "invalid_topic", "null_aggregate_id"} {
		series := fmt.Sprintf(`walrelay_dead_letters_total{reason=%q}`, reason)
		if v, ok := metricValue(t, addr, series); !ok || v != 1 {
			t.Errorf("%s = %v (present %v), want 1", series, v, ok)
		}
	}
	confirmed := slotLSN(t, env.pgDSN, c.name)
	if p.exited() {
		t.Errorf("walrelay exited (%s) in dlq mode\n%s", p.exitStatus(), p.tail(20))
	}
	p.sigterm()
	if !p.waitExit(60 * time.Second) {
		t.Fatalf("walrelay did not exit within 60 s of SIGTERM\n%s", p.tail(20))
	}
	if code := p.exitCode(); code != 0 {
		t.Errorf("exit code after SIGTERM: %d, want 0\n%s", code, p.tail(20))
	}
	t.Log(d.summary("dead_letters", fmt.Sprintf("dead_letters=%d too_large=%d invalid_topic=%d null_aggregate_id=%d slot=%s last_commit<=%s",
		len(recs[dlqTopic]), reasons["too_large"], reasons["invalid_topic"], reasons["null_aggregate_id"], confirmed, last.post)))
	d.requireExact(t)

	// --on-poison=stop, each kind of poison on a fresh slot.
	for _, tmpl := range poisonEvents() {
		if tmpl.reason == "" {
			continue
		}
		t.Run("stop_"+tmpl.reason, func(t *testing.T) {
			slot := c.extraSlot("stop_" + strings.ReplaceAll(tmpl.reason, "_", ""))
			// No heartbeats: nothing else commits while the poison transaction is open.
			args := []string{"--slot", slot, "--on-poison", "stop", "--dlq-topic", dlqTopic, "--heartbeat-interval", "0"}
			p := c.start(args...)
			p.waitReady(60 * time.Second)
			waitSlotStreaming(t, env.pgDSN, slot, 60*time.Second, p)

			goodEv := &poisonEvent{name: "good_before_" + tmpl.reason, aggType: "order", aggID: evs[0].aggID, payload: `'{"n": 10}'::jsonb`}
			poison := *tmpl
			insertPoisonEvent(t, conn, c.table, goodEv)
			insertPoisonEvent(t, conn, c.table, &poison)

			checkStopped := func(p *walrelayProc, run string) lsn {
				t.Helper()
				if !p.waitExit(60 * time.Second) {
					t.Fatalf("%s: walrelay still running 60 s after the poison event %s (--on-poison=stop)\n%s", run, poison.id, p.tail(20))
				}
				if p.exitCode() == 0 {
					t.Errorf("%s: walrelay exited 0 on a poison event, want non-zero", run)
				}
				line := errorLine(p.log(), []string{poison.id})
				if line == "" {
					t.Fatalf("%s: no ERROR line names the event id %s\n%s", run, poison.id, p.tail(20))
				}
				m := lsnInErrorRE.FindStringSubmatch(line)
				if m == nil {
					t.Fatalf("%s: the ERROR line names no lsn=: %s", run, line)
				}
				evLSN, err := parseLSN(m[1])
				if err != nil {
					t.Fatal(err)
				}
				if evLSN < poison.tx.begin || evLSN > poison.tx.post {
					t.Errorf("%s: ERROR line lsn %s outside the poison transaction [%s, %s]", run, evLSN, poison.tx.begin, poison.tx.post)
				}
				// The event's LSN is where its WAL record starts; the end LSN of the
				// transaction before it may be exactly that position. A transaction of
				// another session that commits while the poison transaction is open
				// may legitimately be confirmed even if its commit record lies after
				// the event (it is streamed first, in commit order); the poison
				// transaction itself must never be covered.
				confirmed := slotLSN(t, env.pgDSN, slot)
				switch {
				case confirmed >= poison.tx.post:
					t.Errorf("%s: slot %s confirmed_flush_lsn %s passed the poison transaction (event at %s, commit ends ≤ %s)",
						run, slot, confirmed, evLSN, poison.tx.post)
				case confirmed > evLSN:
					t.Logf("%s: slot %s confirmed_flush_lsn %s is past the event (%s) but before the poison commit: a concurrent transaction committed in between",
						run, slot, confirmed, evLSN)
				}
				t.Logf("%s: %s; slot at %s, poison event at %s, good event before it confirmed: %v",
					run, p.exitStatus(), confirmed, evLSN, confirmed >= goodEv.tx.post)
				t.Logf("%s: ERROR line: %s", run, line)
				return confirmed
			}
			first := checkStopped(p, "run 1")
			// A restart on the same slot meets the same event again.
			p2 := c.start(args...)
			second := checkStopped(p2, "run 2")
			if second < first {
				t.Errorf("slot went back from %s to %s", first, second)
			}
			t.Logf("scenario=contract/dead_letters/stop_%s exit=%d stopped_again_on_restart=true slot=%s poison_txn=[%s,%s]",
				tmpl.reason, p.exitCode(), second, poison.tx.begin, poison.tx.post)
		})
	}

	// Stop mode dead-letters nothing.
	recs = consumeAll(t, env.kafka, prefix, []string{orderTopic, dlqTopic})
	if n := len(recs[dlqTopic]); n != 3 {
		t.Errorf("%s has %d records after the stop runs, want still 3", dlqTopic, n)
	}
}
