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
