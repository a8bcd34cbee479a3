package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/walrelay/walrelay/test/pgtest"
)

// TestTablelessOptIn: with a message prefix configured (the tableless outbox
// is off by default: config.TestTablelessOptIn), walrelay doctor warns while
// EXECUTE on pg_logical_emit_message (both
// overloads) is granted to PUBLIC.
func TestTablelessOptIn(t *testing.T) {
	t.Run("doctor warns while PUBLIC may emit", func(t *testing.T) {
		dsn := pgtest.Database(t, "h8d_tableless")
		pg := pgtest.Connect(t, dsn)
		doctorOut := func(extra ...string) string {
			var out, errOut bytes.Buffer
			args := append([]string{"doctor", "--postgres-dsn", dsn, "--kafka-brokers", "127.0.0.1:1", "--kafka-timeout", "1s"}, extra...)
			Main(context.Background(), args, envMap(nil), &out, &errOut)
			return out.String() + errOut.String()
		}
		// The overloads as this server has them: (boolean,text,text) and
		// (boolean,text,bytea), with a fourth boolean (flush) since 17.
		var sigs []string
		rows, err := pg.Conn.Query(context.Background(), "SELECT oid::regprocedure::text FROM pg_proc WHERE proname = 'pg_logical_emit_message' ORDER BY 1 DESC")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var sig string
			if err := rows.Scan(&sig); err != nil {
				t.Fatal(err)
			}
			sigs = append(sigs, sig)
		}
		if rows.Close(); len(sigs) != 2 {
			t.Fatalf("pg_logical_emit_message overloads %v, want the text and the bytea one", sigs)
		}
		out := doctorOut("--table", "", "--message-prefix", "walrelay.outbox")
		for _, want := range []string{"WARN tableless", "granted to PUBLIC",
			"REVOKE EXECUTE ON FUNCTION " + sigs[0] + " FROM PUBLIC;", "REVOKE EXECUTE ON FUNCTION " + sigs[1] + " FROM PUBLIC;"} {
			if !strings.Contains(out, want) {
				t.Fatalf("doctor with the default privileges does not say %q:\n%s", want, out)
			}
		}
		if out := doctorOut(); strings.Contains(out, "tableless") || !strings.Contains(out, "ok   server") {
			t.Fatalf("doctor without a message prefix mentions the tableless outbox:\n%s", out)
		}
		// Only the text overload revoked: still a warning, naming the other one.
		pg.Exec("REVOKE EXECUTE ON FUNCTION " + sigs[0] + " FROM PUBLIC")
		out = doctorOut("--table", "", "--message-prefix", "walrelay.outbox")
		if !strings.Contains(out, "WARN tableless") || !strings.Contains(out, sigs[1]+" is granted to PUBLIC") {
			t.Fatalf("doctor with the bytea overload still granted:\n%s", out)
		}
		pg.Exec("REVOKE EXECUTE ON FUNCTION " + sigs[1] + " FROM PUBLIC")
		out = doctorOut("--table", "", "--message-prefix", "walrelay.outbox")
		if !strings.Contains(out, "ok   tableless") || strings.Contains(out, "WARN") {
			t.Fatalf("doctor after REVOKE ... FROM PUBLIC on both overloads:\n%s", out)
		}
	})
}
