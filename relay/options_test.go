package relay

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/walrelay/walrelay/test/relaytest"
)

// testOptions are the Options of one relay over public.<name>_outbox
// (relaytest.Configs), without HTTP and heartbeats (serial WAL: only the
// test's own transactions).
func testOptions(dsn string, brokers []string, name string) Options {
	rc, sc, dc := relaytest.Configs(dsn, brokers, name)
	return Options{Replication: rc, Sink: sc, Decoder: dc, MaxInFlight: 10000, OnPoison: OnPoisonDLQ,
		StandbyRetryInterval: time.Second, ShutdownTimeout: 5 * time.Second, KafkaTimeout: 15 * time.Second}
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
			err := o.Validate()
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
