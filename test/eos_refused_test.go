package e2e

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
)

// TestExactlyOnceRecordRefusedByTheBroker: in exactly-once mode, an operator
// lowers a topic's max.message.bytes while walrelay runs, and the broker
// refuses (MESSAGE_TOO_LARGE) a record walrelay had checked against the old
// limit, while the other record of the same Postgres transaction, on another
// topic, is accepted. walrelay must not commit that Kafka transaction: it
// stops with the broker's error, and after a restart (which reads the new
// limit) the refused event is dead-lettered as too_large and the other one
// delivered, each exactly once for a read_committed consumer. Committing
// the accepted record would move the checkpoint past the refused one, and
// the restart would skip it for good.
func TestExactlyOnceRecordRefusedByTheBroker(t *testing.T) {
	env := requireEnv(t)
	s := newScenario(t, env, "eosrefused")
	prefix := s.name + "."
	keep, small, dlq := prefix+"keep", prefix+"small", prefix+"dlq"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl := newKafkaClient(t, env.kafka)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for _, topic := range []string{keep, small, dlq} {
		if _, err := adm.CreateTopic(ctx, 1, -1, nil, topic); err != nil {
			t.Fatalf("create topic %s: %v", topic, err)
		}
	}
	// Two threads: the refusal then often reaches walrelay while it flushes
	// the transaction's commit, the race that used to commit it.
	args := []string{"--delivery", "exactly-once", "--dlq-topic", dlq, "--status-interval", "100ms", "--procs", "2"}
	p := s.startReady(args...)
	conn := connect(t, env.pgDSN)
	insert := func(tx pgx.Tx, aggType, payload string) string {
		t.Helper()
		var id string
		if err := tx.QueryRow(ctx, "INSERT INTO "+pgx.Identifier{"public", s.name}.Sanitize()+
			" (aggregate_type, aggregate_id, event_type, payload) VALUES ($1, 'a-1', 'Refused', $2::jsonb) RETURNING id::text",
			aggType, payload).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	txn := func(rows ...[2]string) []string {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range rows {
			ids = append(ids, insert(tx, r[0], r[1]))
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		return ids
	}
	// walrelay reads the small topic's limit (1 MiB by default) with its
	// first record.
	first := txn([2]string{"small", `{"n": 0}`})
	waitSlotLSN(t, env.pgDSN, s.name, currentLSN(t, env.pgDSN), 60*time.Second, p)

	limit := "2048"
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &limit}}, small); err != nil {
		t.Fatalf("lower max.message.bytes of %s: %v", small, err)
	}
	// Incompressible 16 KiB: over the new limit after zstd.
	noise := make([]byte, 12<<10)
	_, _ = crand.Read(noise)
	ids := txn([2]string{"keep", `{"n": 1}`}, [2]string{"small", `{"blob": "` + hex.EncodeToString(noise) + `"}`})
	accepted, refused := ids[0], ids[1]

	if !p.waitExit(90 * time.Second) {
		t.Fatalf("walrelay kept running after the broker refused a record:\n%s", p.tail(30))
	}
	if p.exitCode() == 0 || !strings.Contains(p.log(), "MESSAGE_TOO_LARGE") {
		t.Fatalf("walrelay exited with %s, want non-zero naming MESSAGE_TOO_LARGE:\n%s", p.exitStatus(), p.tail(30))
	}

	p = s.startReady(args...)
	defer func() {
		if t.Failed() {
			t.Logf("the second run's log ends:\n%s", p.tail(12))
		}
	}()
	waitSlotLSN(t, env.pgDSN, s.name, currentLSN(t, env.pgDSN), 90*time.Second, p)
	recs := consumeAllIsolation(t, env.kafka, prefix, []string{keep, small, dlq}, true)
	count := func(topic, id string) int {
		n := 0
		for _, r := range recs[topic] {
			if header(r, "id") == id {
				n++
			}
		}
		return n
	}
	for _, c := range []struct {
		topic, id, what string
	}{{small, first[0], "the first event"}, {keep, accepted, "the accepted event"}, {dlq, refused, "the refused event"}} {
		if n := count(c.topic, c.id); n != 1 {
			t.Errorf("%s (%s) appears %d times in %s for a read_committed consumer, want once", c.what, c.id, n, c.topic)
		}
	}
	if n := count(small, refused); n != 0 {
		t.Errorf("the refused event appears %d times in %s", n, small)
	}
	for _, r := range recs[dlq] {
		if header(r, "id") == refused && header(r, "walrelay.dlq.reason") != "too_large" {
			t.Errorf("the refused event was dead-lettered with reason %q, want too_large", header(r, "walrelay.dlq.reason"))
		}
	}
	p.sigterm()
	if !p.waitExit(30*time.Second) || p.exitCode() != 0 {
		t.Errorf("walrelay after SIGTERM: %s", p.exitStatus())
	}
}
