package replication

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walrelay/walrelay/test/pgtest"
)

func TestFailoverSlotSQL(t *testing.T) {
	for _, tc := range []struct{ slot, want string }{
		{"walrelay", `CREATE_REPLICATION_SLOT "walrelay" LOGICAL pgoutput (SNAPSHOT 'nothing', FAILOVER true)`},
		{"orders_1", `CREATE_REPLICATION_SLOT "orders_1" LOGICAL pgoutput (SNAPSHOT 'nothing', FAILOVER true)`},
	} {
		t.Run(tc.slot, func(t *testing.T) {
			if got := failoverSlotSQL(tc.slot); got != tc.want {
				t.Errorf("failoverSlotSQL(%q) = %s, want %s", tc.slot, got, tc.want)
			}
		})
	}
}

// TestParseSlotEachVersion parses pg_replication_slots rows captured from each
// supported major version (testdata/slots): the columns a version has are read,
// the ones it lacks are unknown (nil, Has false), and NULLs are told from both.
func TestParseSlotEachVersion(t *testing.T) {
	for _, v := range []int{14, 15, 16, 17, 18} {
		t.Run(fmt.Sprintf("pg%d", v), func(t *testing.T) {
			b, err := os.ReadFile(fmt.Sprintf("testdata/slots/pg%d.jsonl", v))
			if err != nil {
				t.Fatal(err)
			}
			slots := map[string]Slot{}
			for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				if strings.HasPrefix(line, "#") {
					continue
				}
				s, err := parseSlot([]byte(line))
				if err != nil {
					t.Fatalf("parseSlot(%s): %v", line, err)
				}
				slots[s.Name] = s
			}
			active, idle, phys := slots["cap_active"], slots["cap_idle"], slots["cap_physical"]
			for _, s := range []Slot{active, idle} {
				if s.Type != "logical" || s.Plugin != "pgoutput" || s.Database != "postgres" || s.RestartLSN == 0 ||
					s.ConfirmedFlushLSN < s.RestartLSN || s.WALStatus != "reserved" || s.SafeWALSize != nil || s.Temporary {
					t.Errorf("logical slot: %+v", s)
				}
			}
			if !active.Active || active.ActivePID == 0 || idle.Active || idle.ActivePID != 0 {
				t.Errorf("active %v pid %d, idle %v pid %d", active.Active, active.ActivePID, idle.Active, idle.ActivePID)
			}
			if phys.Type != "physical" || phys.Plugin != "" || phys.Database != "" || phys.RestartLSN == 0 || phys.ConfirmedFlushLSN != 0 || phys.CatalogXmin != 0 {
				t.Errorf("physical slot: %+v", phys)
			}
			if active.CatalogXmin == 0 || idle.CatalogXmin == 0 {
				t.Errorf("logical slots' catalog_xmin: active %d, idle %d, want the xid", active.CatalogXmin, idle.CatalogXmin)
			}
			for name, s := range slots {
				if s.TwoPhase == nil || *s.TwoPhase || !s.Has("two_phase") || !s.Has("wal_status") {
					t.Errorf("%s: two_phase %v (Has %v)", name, s.TwoPhase, s.Has("two_phase"))
				}
				// Postgres 16 added conflicting (NULL for a physical slot); 17
				// invalidation_reason, failover, synced and inactive_since.
				if s.Has("conflicting") != (v >= 16) || (s.Conflicting != nil) != (v >= 16 && s.Type == "logical") ||
					(s.Conflicting != nil && *s.Conflicting) {
					t.Errorf("%s: conflicting %v (Has %v)", name, s.Conflicting, s.Has("conflicting"))
				}
				v17 := v >= 17
				if s.Has("invalidation_reason") != v17 || (s.InvalidationReason != nil) != v17 || (v17 && *s.InvalidationReason != "") {
					t.Errorf("%s: invalidation_reason %v (Has %v)", name, s.InvalidationReason, s.Has("invalidation_reason"))
				}
				if (s.Failover != nil) != v17 || (s.Synced != nil) != v17 || (v17 && (*s.Failover || *s.Synced)) {
					t.Errorf("%s: failover %v, synced %v", name, s.Failover, s.Synced)
				}
				if s.Has("inactive_since") != v17 || (s.InactiveSince != nil) != (v17 && !s.Active) {
					t.Errorf("%s: inactive_since %v (Has %v), active %v", name, s.InactiveSince, s.Has("inactive_since"), s.Active)
				}
			}
		})
	}
}

// TestParseSlotValues: the values that the captures lack (an invalidated
// slot, a bounded safe_wal_size) and rows ReadSlot must refuse.
func TestParseSlotValues(t *testing.T) {
	lost, err := parseSlot([]byte(`{"slot_name": "s", "slot_type": "logical", "plugin": "pgoutput", "database": "app", "active": false,
		"restart_lsn": null, "confirmed_flush_lsn": "16/B374D848", "wal_status": "lost", "safe_wal_size": null, "two_phase": true,
		"conflicting": false, "invalidation_reason": "wal_removed", "failover": true, "synced": true,
		"inactive_since": "2026-11-25T14:23:25.597992+00:00"}`))
	if err != nil {
		t.Fatal(err)
	}
	since := time.Date(2026, 11, 25, 14, 23, 25, 597992000, time.UTC)
	if lost.WALStatus != "lost" || lost.RestartLSN != 0 || lost.ConfirmedFlushLSN != 0x16B374D848 || *lost.InvalidationReason != "wal_removed" ||
		!*lost.TwoPhase || !*lost.Failover || !*lost.Synced || !lost.InactiveSince.Equal(since) {
		t.Errorf("invalidated slot: %+v", lost)
	}
	bounded, err := parseSlot([]byte(`{"slot_name": "s", "slot_type": "logical", "active": true, "active_pid": 4242, "safe_wal_size": 5368709120, "wal_status": "extended"}`))
	if err != nil {
		t.Fatal(err)
	}
	if bounded.SafeWALSize == nil || *bounded.SafeWALSize != 5<<30 || bounded.ActivePID != 4242 || bounded.Has("two_phase") || bounded.TwoPhase != nil {
		t.Errorf("bounded slot: %+v", bounded)
	}
	for _, bad := range []string{`not json`, `{"slot_name": "s", "restart_lsn": "not an lsn"}`, `{"slot_name": "s", "active": "yes"}`,
		`{"slot_name": "s", "catalog_xmin": "not an xid"}`} {
		if s, err := parseSlot([]byte(bad)); err == nil {
			t.Errorf("parseSlot(%s) = %+v, want an error", bad, s)
		}
	}
}

func TestSlotLag(t *testing.T) {
	s := Slot{WALEnd: 0x3000, RestartLSN: 0x1000, ConfirmedFlushLSN: 0x2800}
	if s.RetainedBytes() != 0x2000 || s.LagBytes() != 0x800 {
		t.Errorf("retained %d, lag %d", s.RetainedBytes(), s.LagBytes())
	}
	if u := (Slot{RestartLSN: 0x1000}); u.RetainedBytes() != 0 || u.LagBytes() != 0 {
		t.Errorf("unknown WAL end: retained %d, lag %d", u.RetainedBytes(), u.LagBytes())
	}
}

func TestBindLiterals(t *testing.T) {
	esc := func(s string) (string, error) { return strings.ReplaceAll(s, "'", "''"), nil }
	for _, tc := range []struct {
		sql  string
		args []string
		want string
	}{
		{"SELECT 1", nil, "SELECT 1"},
		{"WHERE slot_name = $1", []string{"x' OR true --"}, "WHERE slot_name = 'x'' OR true --'"},
		{"f($2, $1)", []string{"a", "b"}, "f('b', 'a')"},
		{"f($1)::text", []string{""}, "f('')::text"},
	} {
		got, err := bindLiterals(tc.sql, tc.args, esc)
		if err != nil || got != tc.want {
			t.Errorf("bindLiterals(%q, %q) = %q, %v; want %q", tc.sql, tc.args, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		sql  string
		args []string
	}{{"f($2)", []string{"a"}}, {"f($0)", []string{"a"}}, {"f($)", []string{"a"}}} {
		if got, err := bindLiterals(tc.sql, tc.args, esc); err == nil {
			t.Errorf("bindLiterals(%q, %q) = %q, want an error", tc.sql, tc.args, got)
		}
	}
	if _, err := bindLiterals("f($1)", []string{"a"}, func(string) (string, error) { return "", errors.New("no") }); err == nil {
		t.Error("an escape failure was not reported")
	}
}

// TestReadSlotAndEmitMessage reads one slot through both queriers (an ordinary
// connection with parameters, a replication connection with driver-quoted
// literals) and writes a logical message with parameters, against the test
// Postgres. A replication connection refuses parameters (SQLSTATE 08P01, which
// IsRetryable takes for a lost connection): that is why it has its own querier.
func TestReadSlotAndEmitMessage(t *testing.T) {
	dsn := pgtest.DSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rnd [3]byte
	_, _ = rand.Read(rnd[:])
	name := "readslot_" + hex.EncodeToString(rnd[:])
	conn, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) }) // after the drops below
	exec := func(sql string) [][][]byte {
		t.Helper()
		res, err := conn.Exec(context.Background(), sql).ReadAll()
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return res[len(res)-1].Rows
	}
	exec("SELECT pg_create_logical_replication_slot('" + name + "', 'pgoutput')")
	exec("CREATE PUBLICATION " + name)
	t.Cleanup(func() {
		exec("SELECT pg_drop_replication_slot('" + name + "')")
		exec("DROP PUBLICATION " + name)
	})
	pc, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	pc.RuntimeParams["replication"] = "database"
	rconn, err := pgconn.ConnectConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	defer rconn.Close(context.Background())

	if _, err := ReadSlot(ctx, NewQuerier(rconn), name); err == nil || !strings.Contains(err.Error(), "08P01") {
		t.Errorf("parameters on a replication connection: %v, want SQLSTATE 08P01", err)
	}
	var read []Slot
	for _, q := range []struct {
		name string
		q    Querier
	}{{"ordinary", NewQuerier(conn)}, {"replication", simpleQuerier{rconn}}} {
		s, err := ReadSlot(ctx, q.q, name)
		if err != nil {
			t.Fatalf("%s connection: %v", q.name, err)
		}
		if s.Name != name || s.Type != "logical" || s.Plugin != "pgoutput" || !s.InCurrentDatabase || s.Active ||
			s.ConfirmedFlushLSN == 0 || s.RestartLSN == 0 || s.WALEnd < s.ConfirmedFlushLSN || s.WALStatus != "reserved" || !s.Has("two_phase") {
			t.Errorf("%s connection: %+v", q.name, s)
		}
		read = append(read, s)
		for _, missing := range []string{"no_such_slot", "x' OR true --"} {
			_, err := ReadSlot(ctx, q.q, missing)
			if !errors.Is(err, ErrSlotMissing) || !errors.Is(err, ErrMissing) || !strings.HasPrefix(err.Error(), missing+": ") {
				t.Errorf("%s connection, slot %q: %v, want %q wrapping ErrSlotMissing", q.name, missing, err, missing+": ")
			}
		}
	}
	if read[0].ConfirmedFlushLSN != read[1].ConfirmedFlushLSN || read[0].RestartLSN != read[1].RestartLSN {
		t.Errorf("the two connections read %+v and %+v", read[0], read[1])
	}

	// A message with quotes in it arrives as written, whichever querier sent it.
	content := `it's "quoted" \ and $1`
	for _, q := range []Querier{NewQuerier(conn), simpleQuerier{rconn}} {
		lsn, err := EmitMessage(ctx, q, "walrelay.test", content)
		if err != nil {
			t.Fatal(err)
		}
		if lsn <= read[0].ConfirmedFlushLSN {
			t.Errorf("EmitMessage returned %s, not past the slot's %s", lsn, read[0].ConfirmedFlushLSN)
		}
	}
	rows := exec("SELECT encode(data, 'escape') FROM pg_logical_slot_peek_binary_changes('" + name + "', NULL, NULL, " +
		"'proto_version', '1', 'publication_names', '" + name + "', 'messages', 'true') WHERE get_byte(data, 0) = 77") // 'M'
	if len(rows) != 2 {
		t.Fatalf("%d messages in the slot, want 2", len(rows))
	}
	for _, r := range rows {
		if !strings.Contains(string(r[0]), "walrelay.test") || !strings.HasSuffix(strings.ReplaceAll(string(r[0]), `\\`, `\`), content) {
			t.Errorf("message %q does not end with %q", r[0], content)
		}
	}
}
