package relay

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/test/pgtest"
)

// TestTablelessOptIn: the tableless outbox is off unless a message prefix is
// configured (any role may call pg_logical_emit_message), and with a prefix
// walrelay doctor warns while EXECUTE on pg_logical_emit_message (both
// overloads) is granted to PUBLIC.
func TestTablelessOptIn(t *testing.T) {
	msg := []byte(`{"id": "e1", "aggregate_type": "order", "aggregate_id": "o-1", "event_type": "Forged", "payload": {}}`)
	t.Run("off by default", func(t *testing.T) {
		if p := Defaults().MessagePrefix; p != "" {
			t.Fatalf("default message prefix %q, want none", p)
		}
		cfg, err := Load([]string{"--postgres-dsn", "postgres://u@h/db", "--kafka-brokers", "k:9092"}, envMap(nil), nil)
		if err != nil {
			t.Fatal(err)
		}
		dc, err := cfg.decoderConfig()
		if err != nil {
			t.Fatal(err)
		}
		dec, err := decoder.New(dc)
		if err != nil {
			t.Fatal(err)
		}
		// What any role can write with SELECT pg_logical_emit_message(true, 'walrelay.outbox', ...).
		var out decoder.Output
		if err := dec.Decode(0x100, pgoBegin(0x200, time.Now(), 7), &out); err != nil {
			t.Fatal(err)
		}
		if err := dec.Decode(0x150, pgoMessage(true, 0x150, "walrelay.outbox", msg), &out); err != nil {
			t.Fatal(err)
		}
		if out.Kind == decoder.KindEvent {
			t.Fatalf("a walrelay.outbox message became an event without --message-prefix: %+v", out.Event)
		}
	})
	t.Run("on when configured", func(t *testing.T) {
		cfg, err := Load([]string{"--postgres-dsn", "postgres://u@h/db", "--kafka-brokers", "k:9092", "--message-prefix", "walrelay.outbox"}, envMap(nil), nil)
		if err != nil {
			t.Fatal(err)
		}
		dc, _ := cfg.decoderConfig()
		dec, err := decoder.New(dc)
		if err != nil {
			t.Fatal(err)
		}
		var out decoder.Output
		_ = dec.Decode(0x100, pgoBegin(0x200, time.Now(), 7), &out)
		if err := dec.Decode(0x150, pgoMessage(true, 0x150, "walrelay.outbox", msg), &out); err != nil || out.Kind != decoder.KindEvent {
			t.Fatalf("with --message-prefix walrelay.outbox: kind %v, err %v; want an event", out.Kind, err)
		}
	})
	t.Run("doctor warns while PUBLIC may emit", func(t *testing.T) {
		dsn := pgtest.Database(t, "h8d_tableless")
		pg := newPG(t, dsn)
		doctorOut := func(extra ...string) string {
			var out, errOut bytes.Buffer
			args := append([]string{"doctor", "--postgres-dsn", dsn, "--kafka-brokers", "127.0.0.1:1", "--kafka-timeout", "1s"}, extra...)
			Main(context.Background(), args, envMap(nil), &out, &errOut)
			return out.String() + errOut.String()
		}
		out := doctorOut("--table", "", "--message-prefix", "walrelay.outbox")
		for _, want := range []string{"WARN tableless", "granted to PUBLIC",
			"REVOKE EXECUTE ON FUNCTION pg_logical_emit_message(boolean,text,text) FROM PUBLIC;",
			"REVOKE EXECUTE ON FUNCTION pg_logical_emit_message(boolean,text,bytea) FROM PUBLIC;"} {
			if !strings.Contains(out, want) {
				t.Fatalf("doctor with the default privileges does not say %q:\n%s", want, out)
			}
		}
		if out := doctorOut(); strings.Contains(out, "tableless") || !strings.Contains(out, "ok   server") {
			t.Fatalf("doctor without a message prefix mentions the tableless outbox:\n%s", out)
		}
		// Only the text overload revoked: still a warning, naming the other one.
		pg.exec("REVOKE EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, text) FROM PUBLIC")
		out = doctorOut("--table", "", "--message-prefix", "walrelay.outbox")
		if !strings.Contains(out, "WARN tableless") || !strings.Contains(out, "pg_logical_emit_message(boolean,text,bytea) is granted to PUBLIC") {
			t.Fatalf("doctor with the bytea overload still granted:\n%s", out)
		}
		pg.exec("REVOKE EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, bytea) FROM PUBLIC")
		out = doctorOut("--table", "", "--message-prefix", "walrelay.outbox")
		if !strings.Contains(out, "ok   tableless") || strings.Contains(out, "WARN") {
			t.Fatalf("doctor after REVOKE ... FROM PUBLIC on both overloads:\n%s", out)
		}
	})
}
