package operator

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/walrelay/walrelay/relay"
	"github.com/walrelay/walrelay/test/relaytest"
)

// relayFixture is an outbox table and relay.Run streaming it into kfake:
// the records a replay or a recovery is compared with.
type relayFixture struct{ *relaytest.Fixture }

// startRelayWith runs relay.Run over public.<name>_outbox, made by create
// (dsn, schema.name), with testOptions changed by mods.
func startRelayWith(t *testing.T, name string, cluster *kfake.Cluster, create func(t *testing.T, dsn, table string), mods ...func(*relay.Options)) *relayFixture {
	t.Helper()
	return &relayFixture{relaytest.Start(t, name, cluster, create, func(dsn string, log *slog.Logger) func(context.Context) error {
		opts := testOptions(dsn, cluster.ListenAddrs(), name)
		for _, mod := range mods {
			mod(&opts)
		}
		opts.Logger = log
		return func(ctx context.Context) error { return relay.Run(ctx, opts) }
	})}
}

// testOptions are the relay.Options of one relay over public.<name>_outbox
// (relaytest.Configs), without HTTP and heartbeats.
func testOptions(dsn string, brokers []string, name string) relay.Options {
	rc, sc, dc := relaytest.Configs(dsn, brokers, name)
	return relay.Options{Replication: rc, Sink: sc, Decoder: dc, MaxInFlight: 10000, OnPoison: relay.OnPoisonDLQ,
		StandbyRetryInterval: time.Second, ShutdownTimeout: 5 * time.Second, KafkaTimeout: 15 * time.Second}
}

// The tests give the tools the relay's own options, mapped as the command
// maps walrelay run's settings.

func replay(ctx context.Context, o relay.Options, ro ReplayOptions) (ReplayResult, error) {
	ro.DSN, ro.Decoder, ro.Sink = o.Replication.DSN, o.Decoder, o.Sink
	ro.MaxInFlight, ro.StopOnPoison = o.MaxInFlight, o.OnPoison == relay.OnPoisonStop
	ro.ShutdownTimeout, ro.KafkaTimeout, ro.Logger = o.ShutdownTimeout, o.KafkaTimeout, o.Logger
	if x := o.ExactlyOnce; x != nil {
		ro.ExactlyOnce = &ExactlyOnce{TransactionalID: x.TransactionalID, CommitInterval: x.CommitInterval, MaxRecords: x.MaxRecords}
	}
	return Replay(ctx, ro)
}

func redrive(ctx context.Context, o relay.Options, ro RedriveOptions) (RedriveResult, error) {
	ro.DSN, ro.Decoder, ro.Sink, ro.KafkaTimeout, ro.Logger = o.Replication.DSN, o.Decoder, o.Sink, o.KafkaTimeout, o.Logger
	return Redrive(ctx, ro)
}

func delivered(o relay.Options) DeliveredOptions {
	d := DeliveredOptions{Sink: o.Sink, DSN: o.Replication.DSN, Slot: o.Replication.Slot, Logger: o.Logger}
	if o.ExactlyOnce != nil {
		d.CheckpointTopic = o.ExactlyOnce.CheckpointTopic
	}
	return d
}

func recovery(o relay.Options, margin time.Duration) RecoveryOptions {
	return RecoveryOptions{Replication: o.Replication, Delivered: delivered(o), Margin: margin}
}
