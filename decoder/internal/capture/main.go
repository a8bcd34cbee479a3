// Command capture records a raw pgoutput stream for the decoder's tests: it
// creates outbox tables, a publication and a pgoutput slot in a scratch
// database, runs a fixed script of transactions (see scenario), then reads the
// slot over a replication connection (proto_version '1', messages 'true') and
// writes every XLogData's walStart and WALData to a capture file. The decoder
// tests (capture_test.go) assert the exact events of that script, so change
// both together.
//
// Usage, from the repository root, with a throwaway Postgres 15 started and
// removed for you:
//
//	decoder/internal/capture/run.sh
//
// or against a running server where the user is a superuser, wal_level is
// logical and replication connections are allowed (it DROPs and re-creates
// the tables it uses: never point it at a database you care about):
//
//	go run ./decoder/internal/capture -dsn 'host=127.0.0.1 port=55499 user=postgres dbname=postgres' \
//		-out decoder/testdata/capture/pg15.pgo
//
// The file format is described in decoder/testdata/README.md.
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

const (
	slot        = "walrelay_capture"
	publication = "walrelay_capture"
	endPrefix   = "walrelay.capture.end"
	// Magic is the first line of a capture file.
	magic = "walrelay-pgoutput-capture v1\n"
)

// setup creates the schema. It runs before the slot exists, so none of it is
// in the stream.
var setup = []string{
	`DROP PUBLICATION IF EXISTS walrelay_capture`,
	`DROP TABLE IF EXISTS outbox, app.outbox_bytea, outbox_text, outbox_debezium, outbox_drop, outbox_routed, other_table`,
	`DROP TYPE IF EXISTS mood`,
	`CREATE SCHEMA IF NOT EXISTS app`,
	`CREATE TYPE mood AS ENUM ('calm', 'busy')`,
	// The default outbox table, as migrations/001_outbox.sql creates it.
	`CREATE TABLE outbox (
	  id             uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
	  aggregate_type text        NOT NULL,
	  aggregate_id   text        NOT NULL,
	  event_type     text        NOT NULL,
	  payload        jsonb,
	  headers        jsonb       NOT NULL DEFAULT '{}',
	  created_at     timestamptz NOT NULL DEFAULT now()
	)`,
	`CREATE TABLE outbox_drop (LIKE outbox INCLUDING ALL)`,
	`CREATE TABLE app.outbox_bytea (
	  id             uuid        PRIMARY KEY,
	  aggregate_type text        NOT NULL,
	  aggregate_id   text        NOT NULL,
	  event_type     text        NOT NULL,
	  payload        bytea,
	  headers        jsonb       NOT NULL DEFAULT '{}',
	  created_at     timestamptz NOT NULL DEFAULT now()
	)`,
	`ALTER TABLE app.outbox_bytea ALTER COLUMN payload SET STORAGE EXTERNAL`,
	// Nullable columns, json headers, timestamp without time zone and an enum
	// (which makes pgoutput send a Type message).
	`CREATE TABLE outbox_text (
	  id             uuid PRIMARY KEY,
	  aggregate_type text,
	  aggregate_id   text,
	  event_type     text,
	  payload        text,
	  headers        json,
	  created_at     timestamp,
	  mood           mood
	)`,
	// Debezium's outbox router layout, with a leading column dropped later.
	`CREATE TABLE outbox_debezium (
	  tenant        text,
	  id            uuid PRIMARY KEY,
	  aggregatetype varchar(255) NOT NULL,
	  aggregateid   varchar(255) NOT NULL,
	  type          varchar(255) NOT NULL,
	  payload       jsonb
	)`,
	// An explicit partition column and columns copied into headers
	// (trace_id is added mid-stream).
	`CREATE TABLE outbox_routed (
	  id             uuid        PRIMARY KEY,
	  aggregate_type text        NOT NULL,
	  aggregate_id   text        NOT NULL,
	  event_type     text        NOT NULL,
	  payload        jsonb,
	  headers        jsonb       NOT NULL DEFAULT '{}',
	  created_at     timestamptz NOT NULL DEFAULT now(),
	  part           smallint,
	  tenant_id      bigint,
	  sig            bytea
	)`,
	`CREATE TABLE other_table (k int PRIMARY KEY, v text)`,
	`CREATE PUBLICATION walrelay_capture FOR TABLE outbox, outbox_drop, app.outbox_bytea, outbox_text, outbox_debezium, outbox_routed, other_table`,
	`SELECT pg_replication_origin_drop('walrelay_capture_origin') FROM pg_replication_origin WHERE roname = 'walrelay_capture_origin'`,
	`SELECT pg_replication_origin_create('walrelay_capture_origin')`,
}

// scenario is the script whose changes the capture records; each string is
// one Exec (a multi-statement string without BEGIN is one transaction).
var scenario = []string{
	// T1: jsonb payloads, headers, an unmapped table, a NULL payload, and a
	// created_at with a historic (LMT, seconds) offset.
	`BEGIN;
	INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload, created_at) VALUES
	  ('00000000-0000-4000-8000-000000000001', 'order', 'order-1', 'OrderCreated',
	   '{"id": 1, "items": [{"qty": 2, "sku": "A-1"}], "total": 9.99}', '2026-11-21 05:40:01.123456+00');
	INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload, headers, created_at) VALUES
	  ('00000000-0000-4000-8000-000000000002', 'order', 'order-2', 'OrderCreated', '{"id": 2}',
	   '{"n": 1, "nested": {"x": "y"}, "tenant": "acme", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}',
	   '2026-11-21 05:40:02+00');
	INSERT INTO other_table VALUES (1, 'not an event');
	INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload, created_at) VALUES
	  ('00000000-0000-4000-8000-000000000003', 'order', 'order-1', 'OrderDeleted', NULL, '1900-01-01 00:00:00+00');
	COMMIT`,
	// T2: bytea payloads in another schema: non-UTF-8, empty, 20000 bytes
	// stored out of line (TOAST, STORAGE EXTERNAL).
	`INSERT INTO app.outbox_bytea (id, aggregate_type, aggregate_id, event_type, payload) VALUES
	  ('00000000-0000-4000-8000-000000000011', 'blob', 'blob-1', 'BlobStored', '\x00fffe80c328ff0a5c22'::bytea),
	  ('00000000-0000-4000-8000-000000000012', 'blob', 'blob-2', 'BlobStored', ''::bytea),
	  ('00000000-0000-4000-8000-000000000013', 'blob', 'blob-3', 'BlobStored',
	   (SELECT decode(string_agg(lpad(to_hex(i % 256), 2, '0'), '' ORDER BY i), 'hex') FROM generate_series(0, 19999) i))`,
	// T3: text payloads, json headers, NULL aggregate id, headers not an object.
	`INSERT INTO outbox_text (id, aggregate_type, aggregate_id, event_type, payload, headers, created_at, mood) VALUES
	  ('00000000-0000-4000-8000-000000000021', 'note', 'note-1', 'NoteAdded',
	   E'line1\nline2 "quoted" \\ backslash — ünïcödé ✓', '{"traceparent":"t-1","k":"v\u00e9","num":5}',
	   '2026-11-21 05:40:01.123456', 'calm'),
	  ('00000000-0000-4000-8000-000000000022', 'note', NULL, 'NoteAdded', 'no key', NULL, '2026-11-21 05:40:02', 'busy'),
	  ('00000000-0000-4000-8000-000000000023', 'note', 'note-3', 'NoteAdded', 'bad headers', '["not", "object"]', NULL, NULL)`,
	// T4: a heartbeat in its own transaction.
	`SELECT pg_logical_emit_message(true, 'walrelay.heartbeat', 'hb-1')`,
	// T5: tableless outbox messages (good, string payload, not JSON), a
	// foreign message, and a table insert in the same transaction.
	`BEGIN;
	SELECT pg_logical_emit_message(true, 'walrelay.outbox', '{"id": "00000000-0000-4000-8000-000000000031", "aggregate_type": "user", "aggregate_id": "user-7", "event_type": "UserSignedUp", "payload": {"email": "a@example.com"}, "headers": {"traceparent": "t-31", "n": 1}}');
	SELECT pg_logical_emit_message(true, 'walrelay.outbox', '{"id":"00000000-0000-4000-8000-000000000032","aggregate_type":"user","aggregate_id":"user-7","event_type":"UserNote","payload":"plain \"text\""}');
	SELECT pg_logical_emit_message(true, 'walrelay.outbox', 'not json');
	SELECT pg_logical_emit_message(true, 'other.app', 'foreign');
	INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload, created_at) VALUES
	  ('00000000-0000-4000-8000-000000000033', 'user', 'user-7', 'UserUpdated', '{"v": 2}', '2026-11-21 05:40:03+00');
	COMMIT`,
	// Non-transactional messages: sent at once, outside any transaction.
	`SELECT pg_logical_emit_message(false, 'walrelay.outbox', '{"id": "00000000-0000-4000-8000-000000000034", "aggregate_type": "user", "aggregate_id": "user-7", "event_type": "Lost", "payload": {}}')`,
	`SELECT pg_logical_emit_message(false, 'walrelay.heartbeat', 'hb-nontx')`,
	// T6: update and delete.
	`BEGIN;
	UPDATE outbox SET event_type = 'OrderCreatedV2' WHERE id = '00000000-0000-4000-8000-000000000001';
	DELETE FROM outbox WHERE id = '00000000-0000-4000-8000-000000000002';
	COMMIT`,
	// T7: insert and delete in the same transaction (the insert is an event).
	`BEGIN;
	INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload, created_at) VALUES
	  ('00000000-0000-4000-8000-000000000041', 'order', 'order-4', 'OrderShipped', '{"id": 4}', '2026-11-21 05:40:04+00');
	DELETE FROM outbox WHERE id = '00000000-0000-4000-8000-000000000041';
	COMMIT`,
	// T8: truncate of an unmapped and a mapped table.
	`TRUNCATE other_table, outbox_text`,
	// A rolled back transaction: never decoded.
	`BEGIN;
	INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) VALUES
	  ('00000000-0000-4000-8000-000000000051', 'order', 'order-rb', 'ShouldNotAppear', '{}');
	ROLLBACK`,
	// T9: ADD COLUMN between two inserts of one transaction.
	`BEGIN;
	INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload, created_at) VALUES
	  ('00000000-0000-4000-8000-000000000061', 'order', 'order-6', 'BeforeAlter', '{"v": 1}', '2026-11-21 05:40:06+00');
	ALTER TABLE outbox ADD COLUMN source text;
	INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload, created_at, source) VALUES
	  ('00000000-0000-4000-8000-000000000062', 'order', 'order-6', 'AfterAlter', '{"v": 2}', '2026-11-21 05:40:07+00', 'api');
	COMMIT`,
	`INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload, created_at, source) VALUES
	  ('00000000-0000-4000-8000-000000000063', 'order', 'order-6', 'NextTxn', '{"v": 3}', '2026-11-21 05:40:08+00', 'cli')`,
	// T10: Debezium layout; dropping the leading column shifts the others.
	`INSERT INTO outbox_debezium (tenant, id, aggregatetype, aggregateid, type, payload) VALUES
	  ('t1', '00000000-0000-4000-8000-000000000071', 'invoice', 'inv-1', 'InvoiceIssued', '{"amount": 10}')`,
	`ALTER TABLE outbox_debezium DROP COLUMN tenant`,
	`INSERT INTO outbox_debezium (id, aggregatetype, aggregateid, type, payload) VALUES
	  ('00000000-0000-4000-8000-000000000072', 'invoice', 'inv-1', 'InvoicePaid', '{"amount": 10, "paid": true}')`,
	// T11: a transaction from a replication origin (pgoutput sends Origin).
	`SELECT pg_replication_origin_session_setup('walrelay_capture_origin')`,
	`BEGIN;
	SELECT pg_replication_origin_xact_setup('0/1000', '2026-11-21 05:40:00+00');
	INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload, created_at, source) VALUES
	  ('00000000-0000-4000-8000-000000000081', 'order', 'order-8', 'Replicated', '{"v": 8}', '2026-11-21 05:40:09+00', 'origin');
	COMMIT`,
	`SELECT pg_replication_origin_session_reset()`,
	// T12: a mapped column dropped (event_type of outbox_drop).
	`INSERT INTO outbox_drop (id, aggregate_type, aggregate_id, event_type, payload) VALUES
	  ('00000000-0000-4000-8000-000000000091', 'drop', 'drop-1', 'BeforeDrop', '{}')`,
	`ALTER TABLE outbox_drop DROP COLUMN event_type`,
	`INSERT INTO outbox_drop (id, aggregate_type, aggregate_id, payload) VALUES
	  ('00000000-0000-4000-8000-000000000092', 'drop', 'drop-1', '{}')`,
	// T13: partition and header columns; ADD COLUMN trace_id (a header
	// column) mid-transaction; a negative partition; a message with a
	// partition.
	`BEGIN;
	INSERT INTO outbox_routed (id, aggregate_type, aggregate_id, event_type, payload, headers, created_at, part, tenant_id, sig) VALUES
	  ('00000000-0000-4000-8000-0000000000a1', 'order', 'order-10', 'Routed', '{"v": 10}', '{"tenant": "acme"}', '2026-11-21 05:40:10+00', 2, 42, '\x00ff'::bytea),
	  ('00000000-0000-4000-8000-0000000000a2', 'order', 'order-10', 'RoutedNulls', '{"v": 11}', '{}', '2026-11-21 05:40:11+00', NULL, NULL, NULL);
	ALTER TABLE outbox_routed ADD COLUMN trace_id text;
	INSERT INTO outbox_routed (id, aggregate_type, aggregate_id, event_type, payload, created_at, part, tenant_id, sig, trace_id) VALUES
	  ('00000000-0000-4000-8000-0000000000a3', 'order', 'order-10', 'Traced', '{"v": 12}', '2026-11-21 05:40:12+00', 32767, 9223372036854775807, ''::bytea, '00-abc-01'),
	  ('00000000-0000-4000-8000-0000000000a4', 'order', 'order-10', 'BadPartition', '{"v": 13}', '2026-11-21 05:40:13+00', -1, -9223372036854775808, NULL, NULL);
	SELECT pg_logical_emit_message(true, 'walrelay.outbox', '{"id": "00000000-0000-4000-8000-0000000000a5", "aggregate_type": "user", "aggregate_id": "user-7", "event_type": "Partitioned", "payload": {}, "partition": 4}');
	COMMIT`,
	// The end of the capture.
	`SELECT pg_logical_emit_message(false, '` + endPrefix + `', 'end')`,
}

func main() {
	dsn := flag.String("dsn", "host=127.0.0.1 port=55499 user=postgres dbname=postgres sslmode=disable", "Postgres connection string (superuser)")
	out := flag.String("out", "decoder/testdata/capture/pg15.pgo", "capture file to write")
	timeout := flag.Duration("timeout", time.Minute, "give up after this long")
	flag.Parse()
	log.SetFlags(0)
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *dsn, *out); err != nil {
		log.Fatalf("capture: %v", err)
	}
}

func run(ctx context.Context, dsn, out string) error {
	conn, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())

	exec := func(sql string) error {
		if _, err := conn.Exec(ctx, sql).ReadAll(); err != nil {
			return fmt.Errorf("exec %q: %w", firstLine(sql), err)
		}
		return nil
	}
	_ = exec(`SELECT pg_drop_replication_slot('` + slot + `') FROM pg_replication_slots WHERE slot_name = '` + slot + `'`)
	for _, sql := range setup {
		if err := exec(sql); err != nil {
			return err
		}
	}
	if err := exec(`SELECT pg_create_logical_replication_slot('` + slot + `', 'pgoutput')`); err != nil {
		return err
	}
	for _, sql := range scenario {
		if err := exec(sql); err != nil {
			return err
		}
	}

	msgs, err := stream(ctx, dsn)
	if err != nil {
		return err
	}
	if err := exec(`SELECT pg_drop_replication_slot('` + slot + `')`); err != nil {
		return err
	}

	var buf bytes.Buffer
	buf.WriteString(magic)
	for _, m := range msgs {
		var h [12]byte
		binary.BigEndian.PutUint64(h[:8], uint64(m.walStart))
		binary.BigEndian.PutUint32(h[8:], uint32(len(m.data)))
		buf.Write(h[:])
		buf.Write(m.data)
	}
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		return err
	}
	log.Printf("capture: wrote %d messages (%d bytes) to %s", len(msgs), buf.Len(), out)
	return nil
}

type message struct {
	walStart pglogrepl.LSN
	data     []byte
}

// stream reads the slot from the start until the end marker message.
func stream(ctx context.Context, dsn string) ([]message, error) {
	conn, err := pgconn.Connect(ctx, dsn+" replication=database")
	if err != nil {
		return nil, fmt.Errorf("replication connect: %w", err)
	}
	defer conn.Close(context.Background())
	err = pglogrepl.StartReplication(ctx, conn, slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + publication + "'", "messages 'true'"},
	})
	if err != nil {
		return nil, fmt.Errorf("start replication: %w", err)
	}
	var msgs []message
	for {
		raw, err := conn.ReceiveMessage(ctx)
		if err != nil {
			return nil, fmt.Errorf("receive: %w", err)
		}
		switch m := raw.(type) {
		case *pgproto3.ErrorResponse:
			return nil, pgconn.ErrorResponseToPgError(m)
		case *pgproto3.CopyData:
			if len(m.Data) == 0 {
				continue
			}
			switch m.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(m.Data[1:])
				if err != nil {
					return nil, err
				}
				if ka.ReplyRequested {
					// Confirm nothing: the slot is dropped afterwards.
					if err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{}); err != nil {
						return nil, err
					}
				}
			case pglogrepl.XLogDataByteID:
				x, err := pglogrepl.ParseXLogData(m.Data[1:])
				if err != nil {
					return nil, err
				}
				// WALData points into a buffer pgconn reuses.
				data := bytes.Clone(x.WALData)
				msgs = append(msgs, message{walStart: x.WALStart, data: data})
				if isEnd(data) {
					return msgs, nil
				}
			}
		}
	}
}

// isEnd reports whether data is the non-transactional end marker message:
// 'M', flags, 8-byte LSN, then the prefix.
func isEnd(data []byte) bool {
	return len(data) > 10 && data[0] == 'M' && bytes.HasPrefix(data[10:], []byte(endPrefix+"\x00"))
}

func firstLine(s string) string {
	if i := bytes.IndexByte([]byte(s), '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
