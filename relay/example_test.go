package relay_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/relay"
	"github.com/walrelay/walrelay/replication"
	"github.com/walrelay/walrelay/sink"
)

// A Go program runs walrelay in its own process with relay.Run: the same
// runtime as `walrelay run`, configured in code. Run blocks until the
// context ends (it then drains, confirms the final position and returns
// nil) or a failure it must not retry.
func ExampleRun() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	const table = "public.outbox"
	cols := decoder.DefaultColumns()
	opts := relay.Options{
		Replication: replication.Config{
			DSN:         os.Getenv("OUTBOX_POSTGRES_DSN"),
			Slot:        "walrelay",
			Publication: "walrelay",
			Tables:      []string{table},
			Columns:     map[string][]string{table: cols.Mapped()},
		},
		Sink: sink.Config{
			Brokers: []string{"kafka1:9092", "kafka2:9092"},
			Topic:   "outbox.event.{aggregate_type}",
		},
		Decoder:              decoder.Config{Tables: []decoder.Table{{Schema: "public", Name: "outbox", Columns: cols}}},
		MaxInFlight:          10000,
		OnPoison:             relay.OnPoisonDLQ,
		HeartbeatInterval:    10 * time.Second,
		StandbyRetryInterval: 5 * time.Second,
		ShutdownTimeout:      30 * time.Second,
		KafkaTimeout:         30 * time.Second,
	}
	if err := relay.Run(ctx, opts); err != nil {
		log.Fatal(err)
	}
}
