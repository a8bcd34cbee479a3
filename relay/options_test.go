package relay

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/migrations"
	"github.com/walrelay/walrelay/replication"
	"github.com/walrelay/walrelay/sink"
)

// testOptions are the Options of one relay over public.<name>_outbox with
// the default columns, slot and publication <name>, topics
// <name>.{aggregate_type}: what walrelay's defaults map to, without HTTP
// and heartbeats (serial WAL: only the test's own transactions).
func testOptions(dsn string, brokers []string, name string) Options {
	table := "public." + name + "_outbox"
	cols := decoder.DefaultColumns()
	return Options{
		Replication: replication.Config{DSN: dsn, Slot: name, Publication: name, Tables: []string{table},
			Columns: map[string][]string{table: cols.Mapped()}, StatusInterval: 100 * time.Millisecond, ShutdownTimeout: 5 * time.Second},
		Sink: sink.Config{Brokers: brokers, Topic: name + ".{aggregate_type}", Compression: "zstd", Linger: 5 * time.Millisecond,
			BatchMaxBytes: 1 << 20, MaxBufferedBytes: 64 << 20, MaxBufferedRecords: 10000, TopicPartitions: -1, TopicReplicationFactor: -1,
			DLQTopic: sink.DefaultDLQTopic},
		Decoder:              decoder.Config{Tables: []decoder.Table{{Schema: "public", Name: name + "_outbox", Columns: cols}}},
		MaxInFlight:          10000,
		OnPoison:             OnPoisonDLQ,
		StandbyRetryInterval: time.Second,
		ShutdownTimeout:      5 * time.Second,
		KafkaTimeout:         15 * time.Second,
	}
}

// createOutbox creates the outbox table (schema.name) with walrelay's
// migrations, as `walrelay migrate` does.
func createOutbox(t *testing.T, dsn, table string) {
	t.Helper()
	applyMigrations(t, dsn, table, migrations.All)
}

// createPartitionedOutbox creates the outbox table (schema.name)
// partitioned by day, as `walrelay migrate --partitioned` does.
func createPartitionedOutbox(t *testing.T, dsn, table string) {
	t.Helper()
	applyMigrations(t, dsn, table, migrations.Partitioned)
	applyMigrations(t, dsn, table, migrations.All)
}

func applyMigrations(t *testing.T, dsn, table string, set func() ([]migrations.Migration, error)) {
	t.Helper()
	tn, err := replication.ParseTable(table)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := set()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, migrations.CreateSchema(pgx.Identifier{tn.Schema}.Sanitize())); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if _, err := conn.Exec(ctx, m.Render(tn.Quoted())); err != nil {
			t.Fatalf("apply %s: %v", m.Name, err)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mod    func(*Options)
		option string // "" valid
	}{
		{"test defaults", func(*Options) {}, ""},
		{"in flight", func(o *Options) { o.MaxInFlight = 1 }, "MaxInFlight"},
		{"poison", func(o *Options) { o.OnPoison = "skip" }, "OnPoison"},
		{"shutdown", func(o *Options) { o.ShutdownTimeout = 0 }, "StandbyRetryInterval, ShutdownTimeout, KafkaTimeout"},
		{"heartbeat", func(o *Options) { o.HeartbeatInterval = -1 }, "HeartbeatInterval, SlotMetricsInterval"},
		{"eos ok", func(o *Options) {
			o.ExactlyOnce = &ExactlyOnce{TransactionalID: "t", CheckpointTopic: "c", CommitInterval: time.Second, MaxRecords: 10}
		}, ""},
		{"eos records", func(o *Options) {
			o.ExactlyOnce = &ExactlyOnce{TransactionalID: "t", CheckpointTopic: "c", CommitInterval: time.Second, MaxRecords: 0}
		}, "ExactlyOnce.MaxRecords"},
		{"eos id", func(o *Options) {
			o.ExactlyOnce = &ExactlyOnce{CheckpointTopic: "c", CommitInterval: time.Second, MaxRecords: 1}
		}, "ExactlyOnce"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions("postgres://x@localhost/db", []string{"localhost:9092"}, "t")
			tc.mod(&o)
			err := o.validate()
			if tc.option == "" {
				if err != nil {
					t.Fatalf("validate() = %v; want nil", err)
				}
				return
			}
			oe, ok := err.(*OptionError)
			if !ok || oe.Option != tc.option {
				t.Fatalf("validate() = %v; want an *OptionError for %s", err, tc.option)
			}
		})
	}
}

// TestTrackerCap: in exactly-once mode the tracker holds room for two
// transactions' worth of records waiting for the commit beyond MaxInFlight;
// at-least-once it is MaxInFlight.
func TestTrackerCap(t *testing.T) {
	o := testOptions("postgres://x@localhost/db", []string{"localhost:9092"}, "t")
	if got := o.trackerCap(); got != o.MaxInFlight {
		t.Fatalf("at-least-once tracker cap %d, want MaxInFlight %d", got, o.MaxInFlight)
	}
	o.ExactlyOnce = &ExactlyOnce{TransactionalID: "t", CheckpointTopic: "c", CommitInterval: time.Second, MaxRecords: 20000}
	if got := o.trackerCap(); got != o.MaxInFlight+40000 {
		t.Fatalf("exactly-once tracker cap %d, want %d", got, o.MaxInFlight+40000)
	}
	tp := newTxnProducer(o, &fakeTxnSink{}, context.Background(), newMetrics(prometheus.NewRegistry(), "t"), slog.New(slog.DiscardHandler))
	if tp.maxInFlight != o.trackerCap() {
		t.Fatalf("txn producer cap %d, want the tracker's %d", tp.maxInFlight, o.trackerCap())
	}
}
