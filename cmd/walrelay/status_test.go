package main

import (
	"strings"
	"testing"
	"time"
)

// TestPrettySize: status prints the retained WAL as pg_size_pretty did when
// Postgres computed it (the expected values are pg_size_pretty's, Postgres 15).
func TestPrettySize(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0 bytes"}, {1, "1 bytes"}, {10239, "10239 bytes"}, {10240, "10 kB"}, {10752, "11 kB"}, {10753, "11 kB"},
		{1048575, "1024 kB"}, {20971008, "20 MB"}, {20971520, "20 MB"}, {16777216, "16 MB"}, {5368709120, "5120 MB"},
		{1099511627776, "1024 GB"}, {1125899906842624, "1024 TB"}, {9223372036854775807, "8192 PB"},
		{-10240, "-10 kB"}, {-16777216, "-16 MB"},
	} {
		if got := prettySize(tc.n); got != tc.want {
			t.Errorf("prettySize(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

// TestStatusShowsOutboxSpan: status shows each outbox table's oldest row,
// how far back that is, and the row estimate beside the slot; with the slot
// missing (before the first run) it says run will create it and shows the span.
func TestStatusShowsOutboxSpan(t *testing.T) {
	dsn, pg := testDatabase(t)
	if code, out, errOut := runMain("migrate", "--postgres-dsn", dsn); code != ExitOK {
		t.Fatalf("migrate: %d %s %s", code, out, errOut)
	}
	pg.Exec(`INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, created_at)
		SELECT 'a', i::text, 'e', now() - make_interval(hours => i) FROM generate_series(1, 3) i`)
	pg.Exec("ANALYZE public.outbox")
	pg.Exec("SELECT pg_create_logical_replication_slot('span_slot', 'pgoutput')")
	code, out, errOut := runMain("status", "--postgres-dsn", dsn, "--slot", "span_slot", "--table", "public.outbox,public.gone")
	if code != ExitOK {
		t.Fatalf("status: exit %d\n%s%s", code, out, errOut)
	}
	fields := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(l, " ")
		if _, dup := fields[k]; !dup {
			fields[k] = strings.TrimSpace(v)
		}
	}
	span, err := time.ParseDuration(fields["retained_span"])
	if fields["slot"] != "span_slot" || fields["outbox_table"] != "public.outbox" || fields["rows_estimate"] != "3" ||
		err != nil || span < 3*time.Hour || span > 3*time.Hour+time.Minute {
		t.Errorf("status output:\n%s", out)
	}
	if oldest, err := time.Parse(time.RFC3339, fields["oldest_row"]); err != nil || time.Since(oldest) < 3*time.Hour-time.Minute {
		t.Errorf("oldest_row %q (%v), want 3h ago", fields["oldest_row"], err)
	}
	if !strings.Contains(out, "public.gone (does not exist)") {
		t.Errorf("a missing outbox table is not shown as such:\n%s", out)
	}
	// Before the first run there is no slot yet: that is no failure (doctor says the same).
	code, out, errOut = runMain("status", "--postgres-dsn", dsn, "--slot", "no_such_slot")
	if code != ExitOK || !strings.Contains(out, "retained_span") || !strings.Contains(out, "walrelay run will create it") {
		t.Errorf("status without the slot: exit %d, want 0 saying run will create it\n%s%s", code, out, errOut)
	}
}
