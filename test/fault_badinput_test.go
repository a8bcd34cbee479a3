package e2e

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walrelay/walrelay/internal/testwait"
)

// TestFaultBadInputs feeds walrelay inputs it cannot turn into ordinary records, end to
// end, each sub-test with its own table, slot and topics, around a few transactions of
// the fault workload. Each asserts one explicit outcome — a dead-letter record with its
// reason, an exit with an ERROR line naming the problem, or (for what Postgres itself
// refuses) the SQLSTATE — and that nothing is lost silently. Dead letters go to
// --dlq-topic <scenario>.dlq (the default mode, --on-poison=dlq).
func TestFaultBadInputs(t *testing.T) {
	env := requireEnv(t)
	rng := testRand(t)

	// NULL and empty aggregate id (the table allows NULL): both dead-lettered with their
	// reason; the rest of the transaction and the stream go on.
	t.Run("null_and_empty_aggregate_id", func(t *testing.T) {
		s := newScenario(t, env, "fbnull")
		pgExec(t, env.pgDSN, "ALTER TABLE "+faultQuote(s.table)+" ALTER COLUMN aggregate_id DROP NOT NULL")
		dlq := s.name + ".dlq"
		p := s.startReady("--dlq-topic", dlq)
		fw := newFaultWriter(t, s, env.pgDSN, newRandFrom(rng))
		fw.writeSome(t, 10)
		good1, nullID, emptyID, good2 := newUUID(), newUUID(), newUUID(), newUUID()
		tx := faultMustTxn(t, env.pgDSN, func(ctx context.Context, c *pgx.Conn) error {
			_, err := c.Exec(ctx, "INSERT INTO "+faultQuote(s.table)+` (id, aggregate_type, aggregate_id, event_type, payload) VALUES
				($1, 'bad', 'bad-1', 'x', '{"n": 1}'), ($2, 'bad', NULL, 'x', '{"n": 2}'),
				($3, 'bad', '', 'x', '{"n": 3}'), ($4, 'bad', 'bad-1', 'x', '{"n": 4}')`, good1, nullID, emptyID, good2)
			return err
		})
		fw.writeSome(t, 10)
		waitSlotLSN(t, env.pgDSN, s.name, max(tx.PostLSN, fw.lastPostLSN()), time.Minute, p)
		dl := faultRecordsByID(t, env.kafka, dlq)
		faultCheckDLQ(t, dl, nullID, "null_aggregate_id", s.name)
		faultCheckDLQ(t, dl, emptyID, "empty_aggregate_id", s.name)
		bad := faultRecordsByID(t, env.kafka, s.name+".bad")
		for _, id := range []string{good1, good2} {
			if len(bad[id]) != 1 {
				t.Errorf("event %s of the same transaction: %d records in %s.bad, want 1", id, len(bad[id]), s.name)
			}
		}
		if len(bad[nullID])+len(bad[emptyID]) > 0 {
			t.Errorf("an event without aggregate id reached the regular topic")
		}
		// The harness reads aggregate_id as a string; the NULL row has done its job.
		pgExec(t, env.pgDSN, "DELETE FROM "+faultQuote(s.table)+" WHERE aggregate_id IS NULL")
		res := faultVerify(t, s, fw)
		res.requireClean(t)
		t.Log(res.summary("fault_bad/null_and_empty_aggregate_id", "outcome=dlq",
			fmt.Sprintf("dlq_records=%d", faultCountRecords(dl)), "reasons=null_aggregate_id,empty_aggregate_id"))
	})

	// The same NULL aggregate id with --on-poison=stop: walrelay exits non-zero with an
	// ERROR naming the event, and the slot stays before it.
	t.Run("null_aggregate_id_stop", func(t *testing.T) {
		s := newScenario(t, env, "fbnstop")
		pgExec(t, env.pgDSN, "ALTER TABLE "+faultQuote(s.table)+" ALTER COLUMN aggregate_id DROP NOT NULL")
		p := s.startReady("--on-poison", "stop", "--status-interval", "200ms")
		fw := newFaultWriter(t, s, env.pgDSN, newRandFrom(rng))
		fw.writeSome(t, 10)
		waitSlotLSN(t, env.pgDSN, s.name, fw.lastPostLSN(), time.Minute, p)
		nullID := newUUID()
		tx := faultMustTxn(t, env.pgDSN, func(ctx context.Context, c *pgx.Conn) error {
			_, err := c.Exec(ctx, "INSERT INTO "+faultQuote(s.table)+` (id, aggregate_type, aggregate_id, event_type) VALUES ($1, 'bad', NULL, 'x')`, nullID)
			return err
		})
		line := faultExpectExit(t, p, 30*time.Second, []string{nullID})
		if c := slotLSN(t, env.pgDSN, s.name); c > tx.PreCommit {
			t.Errorf("slot confirmed %s, past the poison event's transaction (commit after %s)", c, tx.PreCommit)
		}
		pgExec(t, env.pgDSN, "DELETE FROM "+faultQuote(s.table)+" WHERE aggregate_id IS NULL")
		res := faultVerify(t, s, fw)
		res.requireClean(t)
		t.Log(res.summary("fault_bad/null_aggregate_id_stop", "outcome=exit", fmt.Sprintf("exit=%d", p.exitCode()),
			"slot_before_poison=true"))
		t.Logf("error line: %s", line)
	})

	// A 10 MB jsonb payload: larger than the topic's max.message.bytes (1 MiB), so it is
	// dead-lettered as too_large; it is also too large for the DLQ topic, so the DLQ record
	// carries no value and says how many bytes were omitted.
	t.Run("payload_10mb", func(t *testing.T) {
		s := newScenario(t, env, "fbbig")
		dlq := s.name + ".dlq"
		p := s.startReady("--dlq-topic", dlq)
		fw := newFaultWriter(t, s, env.pgDSN, newRandFrom(rng))
		fw.writeSome(t, 5)
		bigID := newUUID()
		payload := `{"blob": "` + strings.Repeat("x", 10<<20) + `"}`
		tx := faultMustTxn(t, env.pgDSN, func(ctx context.Context, c *pgx.Conn) error {
			_, err := c.Exec(ctx, "INSERT INTO "+faultQuote(s.table)+` (id, aggregate_type, aggregate_id, event_type, payload) VALUES ($1, 'bad', 'bad-1', 'x', $2::jsonb)`, bigID, payload)
			return err
		})
		fw.writeSome(t, 5)
		waitSlotLSN(t, env.pgDSN, s.name, max(tx.PostLSN, fw.lastPostLSN()), 2*time.Minute, p)
		dl := faultRecordsByID(t, env.kafka, dlq)
		r := faultCheckDLQ(t, dl, bigID, "too_large", s.name)
		if r != nil {
			if r.Value != nil {
				t.Errorf("DLQ record of the 10 MB event has a %d-byte value, want null (payload omitted)", len(r.Value))
			}
			if got := header(r, "walrelay.dlq.payload_omitted_bytes"); got != strconv.Itoa(len(payload)) {
				t.Errorf("walrelay.dlq.payload_omitted_bytes = %q, want %d", got, len(payload))
			}
		}
		res := faultVerify(t, s, fw)
		res.requireClean(t)
		t.Log(res.summary("fault_bad/payload_10mb", "outcome=dlq", "reason=too_large",
			"payload_bytes="+strconv.Itoa(len(payload)), "omitted_bytes="+header(faultFirst(dl[bigID]), "walrelay.dlq.payload_omitted_bytes")))
	})

	// Encodings. Postgres validates text input: invalid UTF-8 and NUL are refused with
	// SQLSTATE 22021 and never reach the WAL, and jsonb refuses \u0000 (22P05), so the
	// only way to store non-UTF-8 bytes is bytea. Asserted: those refusals; a bytea
	// payload with invalid UTF-8 (and a NUL) arrives byte for byte; unusual but valid
	// characters (astral plane, combining marks, RTL, ZWJ, BOM, U+2028, noncharacters) in
	// the key, a header and the payload arrive unchanged; a non-ASCII aggregate_type
	// renders an invalid topic name and is dead-lettered as invalid_topic.
	t.Run("encodings", func(t *testing.T) {
		s := newScenario(t, env, "fbutf")
		bin := "public." + s.name + "_bin"
		pgExec(t, env.pgDSN, "CREATE TABLE "+faultQuote(bin)+" (LIKE "+faultQuote(s.table)+" INCLUDING ALL)")
		pgExec(t, env.pgDSN, "ALTER TABLE "+faultQuote(bin)+" ALTER COLUMN payload TYPE bytea USING convert_to(payload::text, 'UTF8')")
		dlq := s.name + ".dlq"
		args := faultWithFlag(s.runArgs("--dlq-topic", dlq), "--table", s.table+","+bin)
		p := s.startArgsReady(args...)
		fw := newFaultWriter(t, s, env.pgDSN, newRandFrom(rng))
		fw.writeSome(t, 5)

		// Refused by Postgres.
		for _, c := range []struct {
			what, sql, state string
			arg              any
		}{
			{"invalid UTF-8 in a text column", "INSERT INTO " + faultQuote(s.table) + " (aggregate_type, aggregate_id, event_type) VALUES ('bad', $1, 'x')", "22021", "bad-\xff\xfe"},
			{"NUL in a text column", "INSERT INTO " + faultQuote(s.table) + " (aggregate_type, aggregate_id, event_type) VALUES ('bad', $1, 'x')", "22021", "bad-\x00-nul"},
			{"\\u0000 in jsonb", "INSERT INTO " + faultQuote(s.table) + " (aggregate_type, aggregate_id, event_type, payload) VALUES ('bad', 'bad-1', 'x', $1::jsonb)", "22P05", `{"s": "a\u0000b"}`},
		} {
			_, err := faultTxn(t, env.pgDSN, func(ctx context.Context, conn *pgx.Conn) error {
				_, err := conn.Exec(ctx, c.sql, c.arg)
				return err
			})
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != c.state {
				t.Errorf("%s: Postgres answered %v, want SQLSTATE %s", c.what, err, c.state)
			} else {
				t.Logf("%s: refused by Postgres: %s (%s)", c.what, pe.Message, pe.Code)
			}
		}

		binID, oddID, topicID := newUUID(), newUUID(), newUUID()
		rawBytes := []byte{0xff, 0xfe, 0x00, 0xc3, 0x28, 0xc0, 0xaf, 'o', 'k', 0xed, 0xa0, 0x80}
		oddKey := "bad-\U0001F600-e\u0301-\u05e9\u05dc\u05d5\u05dd-\u200d-\ufeff-\u2028-\uffff-\U0010FFFF"
		oddHeader := "\u05e9\u05dc\u05d5\u05dd \U0001F600 \ufeff \u2028"
		tx := faultMustTxn(t, env.pgDSN, func(ctx context.Context, c *pgx.Conn) error {
			if _, err := c.Exec(ctx, "INSERT INTO "+faultQuote(bin)+` (id, aggregate_type, aggregate_id, event_type, payload) VALUES ($1, 'bad', 'bad-bin', 'x', $2::bytea)`, binID, rawBytes); err != nil {
				return err
			}
			if _, err := c.Exec(ctx, "INSERT INTO "+faultQuote(s.table)+` (id, aggregate_type, aggregate_id, event_type, payload, headers) VALUES ($1, 'bad', $2, 'ev-é', $3::jsonb, $4::jsonb)`,
				oddID, oddKey, `{"s": "`+oddKey+`"}`, `{"odd": "`+oddHeader+`"}`); err != nil {
				return err
			}
			_, err := c.Exec(ctx, "INSERT INTO "+faultQuote(s.table)+` (id, aggregate_type, aggregate_id, event_type) VALUES ($1, 'ordér', 'bad-2', 'x')`, topicID)
			return err
		})
		fw.writeSome(t, 5)
		waitSlotLSN(t, env.pgDSN, s.name, max(tx.PostLSN, fw.lastPostLSN()), time.Minute, p)

		bad := faultRecordsByID(t, env.kafka, s.name+".bad")
		if r := faultFirst(bad[binID]); r == nil {
			t.Errorf("bytea event %s not delivered", binID)
		} else if string(r.Value) != string(rawBytes) {
			t.Errorf("bytea payload arrived as %x, want %x", r.Value, rawBytes)
		}
		var oddPayload string
		pgPool(t, env.pgDSN).scan(context.Background(), "SELECT payload::text FROM "+faultQuote(s.table)+" WHERE id = $1", []any{oddID}, &oddPayload)
		if r := faultFirst(bad[oddID]); r == nil {
			t.Errorf("event %s with unusual characters not delivered", oddID)
		} else {
			if string(r.Key) != oddKey {
				t.Errorf("key %q, want %q", r.Key, oddKey)
			}
			if string(r.Value) != oddPayload {
				t.Errorf("value %q, want %q", r.Value, oddPayload)
			}
			if header(r, "odd") != oddHeader || header(r, "event_type") != "ev-é" {
				t.Errorf("headers odd=%q event_type=%q, want %q and %q", header(r, "odd"), header(r, "event_type"), oddHeader, "ev-é")
			}
		}
		dl := faultRecordsByID(t, env.kafka, dlq)
		faultCheckDLQ(t, dl, topicID, "invalid_topic", s.name)
		res := faultVerify(t, s, fw)
		res.requireClean(t)
		t.Log(res.summary("fault_bad/encodings", "refused_by_postgres=3", "bytea_invalid_utf8=delivered_exact",
			"unusual_valid_chars=delivered_exact", "non_ascii_topic=dlq/invalid_topic"))
	})

	// A jsonb payload nested 1,000 deep, and a headers value with a 1,000-deep entry next
	// to a string header: delivered unchanged, the string header extracted.
	t.Run("jsonb_nested_1000", func(t *testing.T) {
		s := newScenario(t, env, "fbdeep")
		dlq := s.name + ".dlq"
		p := s.startReady("--dlq-topic", dlq)
		fw := newFaultWriter(t, s, env.pgDSN, newRandFrom(rng))
		fw.writeSome(t, 5)
		deep := strings.Repeat("[", 1000) + `"core"` + strings.Repeat("]", 1000)
		id := newUUID()
		tx := faultMustTxn(t, env.pgDSN, func(ctx context.Context, c *pgx.Conn) error {
			_, err := c.Exec(ctx, "INSERT INTO "+faultQuote(s.table)+` (id, aggregate_type, aggregate_id, event_type, payload, headers) VALUES ($1, 'bad', 'bad-1', 'x', $2::jsonb, $3::jsonb)`,
				id, `{"deep": `+deep+`}`, `{"trace": "t-1", "deep": `+deep+`}`)
			return err
		})
		fw.writeSome(t, 5)
		waitSlotLSN(t, env.pgDSN, s.name, max(tx.PostLSN, fw.lastPostLSN()), time.Minute, p)
		var want string
		pgPool(t, env.pgDSN).scan(context.Background(), "SELECT payload::text FROM "+faultQuote(s.table)+" WHERE id = $1", []any{id}, &want)
		outcome := "delivered"
		r := faultFirst(faultRecordsByID(t, env.kafka, s.name+".bad")[id])
		if r == nil {
			if d := faultFirst(faultRecordsByID(t, env.kafka, dlq)[id]); d != nil {
				outcome = "dlq/" + header(d, "walrelay.dlq.reason")
				t.Errorf("1,000-deep jsonb was dead-lettered (%s: %s); Postgres accepted it, so it is a valid payload",
					header(d, "walrelay.dlq.reason"), header(d, "walrelay.dlq.error"))
			} else {
				outcome = "missing"
				t.Errorf("1,000-deep jsonb event %s neither delivered nor dead-lettered", id)
			}
		} else {
			if string(r.Value) != want {
				t.Errorf("value (%d bytes) differs from payload::text (%d bytes)", len(r.Value), len(want))
			}
			if header(r, "trace") != "t-1" || header(r, "deep") != "" {
				t.Errorf("headers: trace=%q deep=%q, want \"t-1\" and no deep header", header(r, "trace"), header(r, "deep"))
			}
		}
		res := faultVerify(t, s, fw)
		res.requireClean(t)
		t.Log(res.summary("fault_bad/jsonb_nested_1000", "outcome="+outcome, fmt.Sprintf("value_bytes=%d", len(want))))
	})

	// An outbox table without a mapped column (no event_type): walrelay must refuse to
	// start naming the column, or stop naming it when the Relation message arrives with
	// the first insert; never run on and confirm past the event.
	t.Run("table_without_mapped_column", func(t *testing.T) {
		s := newScenario(t, env, "fbnocol")
		nocol := "public." + s.name + "_nocol"
		pgExec(t, env.pgDSN, "CREATE TABLE "+faultQuote(nocol)+` (id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
			aggregate_type text NOT NULL, aggregate_id text NOT NULL, payload jsonb, headers jsonb NOT NULL DEFAULT '{}')`)
		p := s.startArgs(faultWithFlag(s.runArgs("--status-interval", "200ms"), "--table", nocol)...)
		time.Sleep(3 * time.Second)
		when := "at start"
		var tx *txnRec
		if !p.exited() {
			when = "when the Relation arrived"
			tx = faultMustTxn(t, env.pgDSN, func(ctx context.Context, c *pgx.Conn) error {
				_, err := c.Exec(ctx, "INSERT INTO "+faultQuote(nocol)+` (aggregate_type, aggregate_id, payload) VALUES ('bad', 'bad-1', '{}')`)
				return err
			})
		}
		line := faultExpectExit(t, p, 30*time.Second, []string{"event_type"})
		if tx != nil {
			if c := slotLSN(t, env.pgDSN, s.name); c > tx.PreCommit {
				t.Errorf("slot confirmed %s, past the insert into the table without event_type (commit after %s)", c, tx.PreCommit)
			}
		}
		t.Logf("scenario=fault_bad/table_without_mapped_column outcome=exit exit=%d refused=%q error_line=%s", p.exitCode(), when, line)
	})

	// A mapped column dropped while walrelay runs: README says it stops with an error
	// naming the table and the column, and the slot stays before the next insert.
	t.Run("mapped_column_dropped", func(t *testing.T) {
		s := newScenario(t, env, "fbdrop")
		p := s.startReady("--status-interval", "200ms")
		fw := newFaultWriter(t, s, env.pgDSN, newRandFrom(rng))
		fw.writeSome(t, 10)
		waitSlotLSN(t, env.pgDSN, s.name, fw.lastPostLSN(), time.Minute, p)
		res := faultVerify(t, s, fw) // before the drop: readOutbox needs event_type
		res.requireClean(t)
		pgExec(t, env.pgDSN, "ALTER TABLE "+faultQuote(s.table)+" DROP COLUMN event_type")
		tx := faultMustTxn(t, env.pgDSN, func(ctx context.Context, c *pgx.Conn) error {
			_, err := c.Exec(ctx, "INSERT INTO "+faultQuote(s.table)+` (aggregate_type, aggregate_id, payload) VALUES ('bad', 'bad-1', '{}')`)
			return err
		})
		line := faultExpectExit(t, p, 30*time.Second, []string{"event_type", s.name})
		if c := slotLSN(t, env.pgDSN, s.name); c > tx.PreCommit {
			t.Errorf("slot confirmed %s, past the insert after the drop (commit after %s)", c, tx.PreCommit)
		}
		t.Log(res.summary("fault_bad/mapped_column_dropped", "outcome=exit", fmt.Sprintf("exit=%d", p.exitCode())))
		t.Logf("error line: %s", line)
	})

	// UPDATE, DELETE and TRUNCATE of outbox rows are not events. With the default
	// publication (publish = 'insert') Postgres does not send them; with a publication
	// that publishes them walrelay counts them in walrelay_changes_ignored_total{reason}.
	// Either way every inserted event arrives once (also rows updated, deleted or
	// truncated later) and nothing else.
	for _, full := range []bool{false, true} {
		name := map[bool]string{false: "update_delete_truncate_default_pub", true: "update_delete_truncate_published"}[full]
		t.Run(name, func(t *testing.T) {
			s := newScenario(t, env, map[bool]string{false: "fbudt", true: "fbudtp"}[full])
			if full {
				pgExec(t, env.pgDSN, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert, update, delete, truncate')",
					pgx.Identifier{s.name}.Sanitize(), faultQuote(s.table)))
			}
			p := s.startReady()
			fw := newFaultWriter(t, s, env.pgDSN, newRandFrom(rng))
			fw.writeSome(t, 15)
			shadow := faultQuote(fw.shadow)
			outbox := faultQuote(s.table)
			// Keep the inserted version of every row the verifier compares with.
			ids, err := pgPool(t, env.pgDSN).strings(context.Background(), "SELECT id::text FROM "+outbox+" ORDER BY random() LIMIT 10")
			if err != nil || len(ids) < 10 {
				t.Fatalf("pick rows: %v (%d)", err, len(ids))
			}
			pgExec(t, env.pgDSN, "INSERT INTO "+shadow+" SELECT * FROM "+outbox+" WHERE id = ANY($1::uuid[])", ids)
			pgExec(t, env.pgDSN, "UPDATE "+outbox+` SET payload = '{"updated": true}', event_type = 'changed' WHERE id = ANY($1::uuid[])`, ids[:5])
			pgExec(t, env.pgDSN, "DELETE FROM "+outbox+" WHERE id = ANY($1::uuid[])", ids[5:])
			pgExec(t, env.pgDSN, "INSERT INTO "+shadow+" SELECT * FROM "+outbox+" o WHERE NOT EXISTS (SELECT 1 FROM "+shadow+" s WHERE s.id = o.id)")
			pgExec(t, env.pgDSN, "TRUNCATE "+outbox)
			fw.writeSome(t, 15)
			waitSlotLSN(t, env.pgDSN, s.name, fw.lastPostLSN(), time.Minute, p)
			if p.exited() {
				t.Fatalf("walrelay exited (%s)\n%s", p.exitStatus(), p.tail(30))
			}
			m, err := p.metrics()
			if err != nil {
				t.Fatalf("metrics: %v", err)
			}
			upd := m[`walrelay_changes_ignored_total{reason="update"}`]
			del := m[`walrelay_changes_ignored_total{reason="delete"}`]
			trn := m[`walrelay_changes_ignored_total{reason="truncate"}`]
			fw.mu.Lock()
			wantDel := 5 + fw.deletedRows // the writer deletes rows in their own transaction too
			fw.mu.Unlock()
			if full {
				if upd != 5 || del != float64(wantDel) || trn < 1 {
					t.Errorf("published UPDATE/DELETE/TRUNCATE: ignored update=%v delete=%v truncate=%v, want 5, %d, ≥1", upd, del, trn, wantDel)
				}
			} else if upd+del+trn != 0 {
				t.Errorf("default publication: ignored update=%v delete=%v truncate=%v, want none (Postgres does not send them)", upd, del, trn)
			}
			res := faultVerify(t, s, fw)
			res.requireClean(t)
			if res.duplicates != 0 || res.delivered != res.committed {
				t.Errorf("delivered %d records for %d events (%d duplicates): UPDATE/DELETE/TRUNCATE must not produce records",
					res.delivered, res.committed, res.duplicates)
			}
			t.Log(res.summary("fault_bad/"+name, fmt.Sprintf("ignored_update=%v ignored_delete=%v ignored_truncate=%v", upd, del, trn)))
		})
	}

	// The publication dropped while walrelay streams. Postgres cannot decode the next
	// change without it. Expected: walrelay exits with an ERROR naming the publication
	// and the slot stays before the events written after the drop; if it instead keeps
	// running, those events must arrive.
	t.Run("publication_dropped", func(t *testing.T) {
		s := newScenario(t, env, "fbpub")
		p := s.startReady("--status-interval", "200ms")
		fw := newFaultWriter(t, s, env.pgDSN, newRandFrom(rng))
		fw.writeSome(t, 10)
		waitSlotLSN(t, env.pgDSN, s.name, fw.lastPostLSN(), time.Minute, p)
		pgExec(t, env.pgDSN, "DROP PUBLICATION "+pgx.Identifier{s.name}.Sanitize())
		droppedAt := time.Now()
		fw.writeSome(t, 10)
		first := fw.firstCommittedAfter(droppedAt)
		outcome := faultExitOrDelivery(t, s, fw, p, 30*time.Second, []string{s.name}, first)
		t.Logf("scenario=fault_bad/publication_dropped outcome=%s exit=%d", outcome, p.exitCode())
	})

	// The slot dropped while walrelay streams (its walsender terminated first, as
	// pg_drop_replication_slot requires). Events committed between the drop and
	// walrelay's reconnect are only in WAL the dropped slot protected: a walrelay that
	// silently creates a new slot skips them. Expected: an exit with an ERROR naming the
	// slot, or every event delivered. Once with the default --create-slot=true, once with
	// --create-slot=false (slot created beforehand).
	for _, create := range []bool{true, false} {
		name := map[bool]string{true: "slot_dropped", false: "slot_dropped_no_create"}[create]
		t.Run(name, func(t *testing.T) {
			s := newScenario(t, env, map[bool]string{true: "fbslot", false: "fbslotn"}[create])
			args := []string{"--status-interval", "200ms"}
			if !create {
				pgExec(t, env.pgDSN, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", s.name)
				args = append(args, "--create-slot=false")
			}
			p := s.startReady(args...)
			fw := newFaultWriter(t, s, env.pgDSN, newRandFrom(rng))
			fw.writeSome(t, 10)
			before := waitSlotLSN(t, env.pgDSN, s.name, fw.lastPostLSN(), time.Minute, p)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := dropSlot(ctx, t, env.pgDSN, s.name); err != nil {
				t.Fatal(err)
			}
			cancel()
			droppedAt := time.Now()
			fw.writeSome(t, 10) // while walrelay waits for its reconnect backoff
			first := fw.firstCommittedAfter(droppedAt)
			time.Sleep(3 * time.Second)
			fw.writeSome(t, 10)
			outcome := faultExitOrDelivery(t, s, fw, p, 30*time.Second, []string{s.name}, first)
			// Where walrelay streamed from, before and after the drop ("streaming" lines).
			var from []string
			for _, m := range p.logLines() {
				if m["msg"] == "streaming" {
					from = append(from, fmt.Sprint(m["lsn"]))
				}
			}
			t.Logf("scenario=fault_bad/%s outcome=%s exit=%d confirmed_before_drop=%s streaming_from=%s created_slot_logs=%d",
				name, outcome, p.exitCode(), before, strings.Join(from, ","), faultLogCount(p, "created replication slot"))
		})
	}

	// max_slot_wal_keep_size invalidates the slot of a stopped walrelay (private cluster:
	// ALTER SYSTEM must not touch the shared one). walrelay must then refuse to start with
	// a message that events may have been lost, and name the recovery command (dropping
	// and recreating the slot by hand would lose the gap).
	t.Run("slot_invalidated", func(t *testing.T) {
		penv, _ := startPrivateCluster(t, env)
		s := newScenario(t, penv, "fbwal")
		dsn := penv.pgDSN
		pgExec(t, dsn, "ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'")
		pgExec(t, dsn, "SELECT pg_reload_conf()")
		t.Cleanup(func() {
			pgExec(t, dsn, "ALTER SYSTEM RESET max_slot_wal_keep_size")
			pgExec(t, dsn, "SELECT pg_reload_conf()")
		})
		p := s.startReady("--status-interval", "200ms")
		fw := newFaultWriter(t, s, dsn, newRandFrom(rng))
		fw.deletePct = 0 // the recovery below re-publishes kept rows
		fw.writeSome(t, 10)
		waitSlotLSN(t, dsn, s.name, fw.lastPostLSN(), time.Minute, p)
		p.sigterm()
		if !p.waitExit(30*time.Second) || p.exitCode() != 0 {
			t.Fatalf("walrelay did not stop cleanly: %s", p.exitStatus())
		}
		fw.writeSome(t, 10) // events the invalidated slot will not deliver
		filler := faultQuote("public." + s.name + "_fill")
		pgExec(t, dsn, "CREATE TABLE "+filler+" (v text)")
		status := ""
		for i := 0; i < 40 && status != "lost"; i++ {
			pgExec(t, dsn, "INSERT INTO "+filler+" SELECT repeat('x', 1000) FROM generate_series(1, 2000)")
			pgExec(t, dsn, "SELECT pg_switch_wal()")
			pgExec(t, dsn, "CHECKPOINT")
			if err := pgPool(t, dsn).scan(context.Background(), "SELECT coalesce(wal_status, '') FROM pg_replication_slots WHERE slot_name = $1",
				[]any{s.name}, &status); err != nil {
				t.Fatal(err)
			}
		}
		if status != "lost" {
			t.Fatalf("slot wal_status=%q after writing WAL past max_slot_wal_keep_size, want lost", status)
		}
		p2 := s.start()
		line := faultExpectExit(t, p2, 60*time.Second, []string{s.name, "lost|invalidated", "missing|may have been lost|lost events"})
		t.Logf("scenario=fault_bad/slot_invalidated wal_status=lost outcome=refused_to_start exit=%d error_line=%s", p2.exitCode(), line)
		if want := "walrelay replay --since-last-delivered --slot=" + s.name; !strings.Contains(p2.log(), want) {
			t.Errorf("the refusal does not name the recovery command %q:\n%s", want, p2.tail(6))
		}
		if strings.Contains(p2.log(), "drop and recreate") {
			t.Errorf("the refusal still advises to drop and recreate the slot by hand (that loses the gap):\n%s", p2.tail(6))
		}

		// With on-slot-lost recover, run recovers by itself: it drops the
		// invalidated slot, replays the gap and streams from a new slot.
		p3 := s.start("--on-slot-lost", "recover")
		testwait.Eventually(t, 2*time.Minute, "walrelay to recover and stream from the new slot", func() bool {
			if p3.exited() {
				t.Fatalf("walrelay run with on-slot-lost recover exited: %s\n%s", p3.exitStatus(), p3.tail(12))
			}
			return strings.Contains(p3.log(), `"msg":"streaming"`)
		})
		fw.writeSome(t, 5) // after the hand-over
		waitSlotLSN(t, dsn, s.name, fw.lastPostLSN(), time.Minute, p3)
		res := recoveryVerify(t, s, fw)
		t.Logf("scenario=fault_bad/slot_invalidated on-slot-lost=recover %s", res.summary("slot_invalidated_recover"))
		if res.lost != 0 || res.rolledBackDelivered != 0 || res.unknown != 0 {
			t.Errorf("on-slot-lost recover after an invalidated slot: lost=%d rolled_back_delivered=%d unknown=%d", res.lost, res.rolledBackDelivered, res.unknown)
		}
	})
}

// faultQuote quotes "schema.name".
func faultQuote(t string) string { return pgx.Identifier(strings.Split(t, ".")).Sanitize() }

// writeSome writes k transactions of the fault workload, synchronously.
func (fw *faultWriter) writeSome(t *testing.T, k int) {
	t.Helper()
	for range k {
		if _, err := fw.writeTxn(1+fw.rng.IntN(50), fw.rng.IntN(100) < 10); err != nil {
			t.Fatalf("workload: %v", err)
		}
	}
}

// faultTxn runs fn in one transaction and returns its WAL positions (BeginLSN, PreCommit,
// PostLSN, XID). When fn fails the transaction is rolled back and the error returned.
func faultTxn(t *testing.T, dsn string, fn func(context.Context, *pgx.Conn) error) (*txnRec, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer c.Close(context.Background())
	tx := &txnRec{Before: time.Now()}
	r, err := multiResult(ctx, c, "BEGIN; SELECT pg_current_wal_insert_lsn()::text, pg_current_xact_id()::text")
	if err != nil {
		return nil, err
	}
	tx.BeginLSN, _ = parseLSN(r[0])
	x, _ := strconv.ParseUint(r[1], 10, 64)
	tx.XID = uint32(x)
	if err := fn(ctx, c); err != nil {
		_, _ = c.Exec(ctx, "ROLLBACK")
		return nil, err
	}
	r, err = multiResult(ctx, c, "SELECT pg_current_wal_insert_lsn()::text; COMMIT; SELECT pg_current_wal_lsn()::text")
	if err != nil {
		return nil, err
	}
	tx.PreCommit, _ = parseLSN(r[0])
	tx.PostLSN, _ = parseLSN(r[1])
	tx.After, tx.Committed = time.Now(), true
	return tx, nil
}

func faultMustTxn(t *testing.T, dsn string, fn func(context.Context, *pgx.Conn) error) *txnRec {
	t.Helper()
	tx, err := faultTxn(t, dsn, fn)
	if err != nil {
		t.Fatalf("transaction: %v", err)
	}
	return tx
}

// faultRecordsByID reads a topic to its end and groups its records by their id header.
func faultRecordsByID(t *testing.T, brokers, topic string) map[string][]*kgo.Record {
	t.Helper()
	out := map[string][]*kgo.Record{}
	for _, r := range consumeAll(t, brokers, topic, []string{topic})[topic] {
		id := header(r, "id")
		out[id] = append(out[id], r)
	}
	return out
}

func faultCountRecords(m map[string][]*kgo.Record) int {
	n := 0
	for _, rs := range m {
		n += len(rs)
	}
	return n
}

func faultFirst(rs []*kgo.Record) *kgo.Record {
	if len(rs) == 0 {
		return nil
	}
	return rs[0]
}

// faultCheckDLQ asserts that event id was dead-lettered exactly once with reason, an
// error text and the source table, and returns its record.
func faultCheckDLQ(t *testing.T, dl map[string][]*kgo.Record, id, reason, table string) *kgo.Record {
	t.Helper()
	rs := dl[id]
	if len(rs) != 1 {
		t.Errorf("event %s: %d dead-letter records, want 1 (reason %s)", id, len(rs), reason)
		return faultFirst(rs)
	}
	r := rs[0]
	if got := header(r, "walrelay.dlq.reason"); got != reason {
		t.Errorf("event %s: walrelay.dlq.reason=%q, want %q", id, got, reason)
	}
	if header(r, "walrelay.dlq.error") == "" {
		t.Errorf("event %s: dead letter without walrelay.dlq.error", id)
	}
	if !strings.Contains(header(r, "walrelay.dlq.table"), table) {
		t.Errorf("event %s: walrelay.dlq.table=%q, want the table %s", id, header(r, "walrelay.dlq.table"), table)
	}
	if header(r, "walrelay.lsn") == "" || header(r, "walrelay.xid") == "" {
		t.Errorf("event %s: dead letter without walrelay.lsn/xid", id)
	}
	t.Logf("dead letter %s: reason=%s topic=%q error=%q", id, header(r, "walrelay.dlq.reason"),
		header(r, "walrelay.dlq.topic"), header(r, "walrelay.dlq.error"))
	return r
}

// faultExpectExit waits for walrelay to exit non-zero with an ERROR line containing keywords
// (see errorLine) and returns that line.
func faultExpectExit(t *testing.T, p *walrelayProc, within time.Duration, keywords []string) string {
	t.Helper()
	if !p.waitExit(within) {
		t.Errorf("walrelay still running %s later; want an exit with an ERROR naming %q\n%s", within, keywords, p.tail(30))
		return ""
	}
	if p.exitCode() <= 0 {
		t.Errorf("walrelay exited with %s, want a non-zero exit code", p.exitStatus())
	}
	line := errorLine(p.log(), keywords)
	if line == "" {
		t.Errorf("no ERROR line mentions all of %q\n%s", keywords, p.tail(30))
	}
	return line
}

// faultExitOrDelivery accepts either of the two loud outcomes of a broken stream: walrelay
// exits non-zero with an ERROR naming keywords, and the slot stays before first (the first
// transaction committed after the breakage); or walrelay keeps running and every event of
// the workload arrives. Anything else — above all running on with events missing — fails.
func faultExitOrDelivery(t *testing.T, s *scenario, fw *faultWriter, p *walrelayProc, within time.Duration, keywords []string, first *txnRec) string {
	t.Helper()
	target := fw.lastPostLSN()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) && !p.exited() && slotLSN(t, fw.dsn, s.name) < target {
		time.Sleep(200 * time.Millisecond)
	}
	if p.exited() {
		line := errorLine(p.log(), keywords)
		if p.exitCode() <= 0 || line == "" {
			t.Errorf("walrelay exited with %s without an ERROR line naming %q\n%s", p.exitStatus(), keywords, p.tail(30))
		}
		if first != nil {
			if si, err := querySlot(context.Background(), t, fw.dsn, s.name); err == nil && si.exists && si.confirmed > first.PreCommit {
				t.Errorf("slot confirmed %s, past txn %d (commit after %s), which was never delivered", si.confirmed, first.Index, first.PreCommit)
			}
		}
		t.Logf("walrelay stopped: %s", line)
		return "exit"
	}
	res := faultVerify(t, s, fw)
	t.Log(res.summary("fault_bad/"+t.Name()[strings.LastIndex(t.Name(), "/")+1:]+"_kept_running", fw.extras()...))
	if res.lost > 0 {
		t.Errorf("walrelay kept running (no exit, no ERROR) while %d committed events were never delivered: silent loss\n%s",
			res.lost, p.tail(15))
		return "silent_loss"
	}
	res.requireClean(t)
	return "kept_running_all_delivered"
}
