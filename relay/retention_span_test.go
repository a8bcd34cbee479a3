package relay

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/internal/testwait"
	"github.com/walrelay/walrelay/replication"
	"github.com/walrelay/walrelay/test/relaytest"
)

// TestOutboxSpan reads the oldest row and the row estimate, and exports
// them.
func TestOutboxSpan(t *testing.T) {
	dsn, pg := relaytest.Database(t)
	relaytest.CreateOutbox(t, dsn, "public.span_outbox")
	ctx := context.Background()
	sp, err := replication.ReadOutboxSpan(ctx, pg.Conn.PgConn(), "public", "span_outbox", "created_at")
	if err != nil || !sp.Empty {
		t.Fatalf("empty table: %+v, %v", sp, err)
	}
	pg.Exec("INSERT INTO public.span_outbox (aggregate_type, aggregate_id, event_type, payload, created_at) VALUES ('o', 'a', 'e', '{}', '2026-01-02 03:04:05.123456+00'), ('o', 'a', 'e', '{}', now())")
	pg.Exec("ANALYZE public.span_outbox")
	if sp, err = replication.ReadOutboxSpan(ctx, pg.Conn.PgConn(), "public", "span_outbox", "created_at"); err != nil {
		t.Fatal(err)
	}
	want := time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)
	if sp.Empty || !sp.Oldest.Equal(want) || sp.Rows != 2 || !sp.RowsKnown {
		t.Fatalf("span %+v, want oldest %v and 2 rows", sp, want)
	}

	reg := prometheus.NewRegistry()
	opts := Options{Replication: testOptions(dsn, nil, "span").Replication, Logger: slog.New(slog.DiscardHandler),
		Decoder:    decoder.Config{Tables: []decoder.Table{{Schema: "public", Name: "span_outbox"}}},
		OutboxSpan: &OutboxSpanOptions{Interval: 50 * time.Millisecond, MinRetained: 24 * time.Hour}}
	opts.Observer = newMetrics(reg, "span")
	stop := startSpanPoll(ctx, opts, opts.Observer)
	defer stop()
	testwait.Eventually(t, 10*time.Second, "the span metrics", func() bool {
		m := gather(t, reg)
		return m["walrelay_outbox_oldest_row_timestamp_seconds{table=public.span_outbox}"] == float64(want.UnixNano())/1e9 &&
			m["walrelay_outbox_rows_estimate{table=public.span_outbox}"] == 2 && m["walrelay_outbox_retention_target_seconds"] == 86400
	})
}
