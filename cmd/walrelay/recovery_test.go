package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walrelay/walrelay/internal/testwait"
	"github.com/walrelay/walrelay/operator"
	"github.com/walrelay/walrelay/sink"
)

// TestRecoveryThatCannotReplayFails: a recovery whose gap's events were
// never kept as rows (the application deletes them in their transaction;
// a tableless outbox) hands the new slot over but says that those events
// are lost, in one line, and exits 1, never "recovery done".
func TestRecoveryThatCannotReplayFails(t *testing.T) {
	dsn, pg := testDatabase(t)
	ctx := context.Background()
	if err := operator.Migrate(ctx, operator.MigrateOptions{DSN: dsn, Table: "public.outbox"}, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "outbox.event.order"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "outbox.event.order", Key: []byte("1"), Timestamp: time.Now().Add(-time.Hour),
		Headers: []kgo.RecordHeader{{Key: sink.HeaderID, Value: []byte("e-1")}, {Key: sink.HeaderLSN, Value: []byte("0/1")}}}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// The gap: rows deleted in the transaction that wrote them.
	tx, err := pg.Conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type) SELECT 'order', g::text, 'e' FROM generate_series(1, 3) g",
		"DELETE FROM public.outbox"} {
		if _, err := tx.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 20*time.Second, "the table statistics to count the deletes", func() bool {
		return pg.Count("SELECT count(*) FROM pg_stat_user_tables WHERE relid = 'public.outbox'::regclass AND n_tup_ins > 0 AND n_tup_del >= n_tup_ins") == 1
	})
	recover := func(slot string, extra ...string) (int, string, string) {
		var out, errw bytes.Buffer
		env := map[string]string{"WALRELAY_POSTGRES_DSN": dsn}
		code := Main(ctx, append([]string{"replay", "--since-last-delivered", "--slot", slot, "--kafka-brokers", cluster.ListenAddrs()[0], "--log-format", "text"}, extra...),
			func(k string) string { return env[k] }, &out, &errw)
		return code, out.String(), errw.String()
	}
	for _, c := range []struct {
		name, slot string
		extra      []string
		want       string
	}{
		{"rows deleted in their transaction", "lost_deleted", nil, "deletes the rows it writes"},
		{"tableless outbox", "lost_tableless", []string{"--message-prefix", "walrelay.outbox"}, "tableless"},
	} {
		code, stdout, stderr := recover(c.slot, c.extra...)
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		last := lines[len(lines)-1]
		if code != ExitFailure || strings.Contains(stdout, "recovery done") || !strings.Contains(last, "are lost") || !strings.Contains(last, c.want) {
			t.Errorf("%s: exit %d, stdout %q, last line %q; want exit 1 and one line saying the events are lost", c.name, code, stdout, last)
		}
		if n := pg.Count("SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", c.slot); n != 1 {
			t.Errorf("%s: the new slot %s is not in place (%d)", c.name, c.slot, n)
		}
	}
}
