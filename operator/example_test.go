package operator_test

import (
	"context"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/walrelay/walrelay/operator"
	"github.com/walrelay/walrelay/sink"
)

// A Go program prunes the outbox table as `walrelay prune` does: the rows
// older than OlderThan go, a batch per transaction, but only those whose
// events the replication slot confirmed (in Kafka). With the slot gone,
// Delivered finds the last event delivered to Kafka instead, and rows older
// than it less RecoveryMargin go.
func ExamplePrune() {
	res, err := operator.Prune(context.Background(), operator.PruneOptions{
		DSN:            os.Getenv("OUTBOX_POSTGRES_DSN"),
		Table:          "public.outbox",
		OlderThan:      72 * time.Hour,
		BatchSize:      10000,
		TimeColumn:     operator.DefaultReplayTimeColumn,
		Slot:           "walrelay",
		RecoveryMargin: operator.DefaultRecoveryMargin,
		Delivered: &operator.DeliveredOptions{
			Sink: sink.Config{Brokers: []string{"kafka1:9092"}, Topic: "outbox.event.{aggregate_type}"},
			DSN:  os.Getenv("OUTBOX_POSTGRES_DSN"),
			Slot: "walrelay",
		},
	}, slog.Default())
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("pruned %d rows of %s older than %s; kept %d the slot has not confirmed", res.Rows, res.Table, res.Cutoff, res.Kept)
}

// A Go program takes over from Debezium's outbox connector as `walrelay
// cutover` does: Cutover creates walrelay's slot and returns once
// Debezium's slot (FromSlot) confirmed its start, writing progress to the
// writer; then stop Debezium, start the relay on the slot, and drop
// Debezium's slot with DropFromSlot.
func ExampleCutover() {
	opts := operator.CutoverOptions{
		DSN:               os.Getenv("OUTBOX_POSTGRES_DSN"),
		Slot:              "walrelay",
		Publication:       "walrelay",
		Tables:            []string{"public.outbox"},
		CreatePublication: true,
		FromSlot:          "debezium",
		Timeout:           10 * time.Minute,
		PollInterval:      time.Second,
		StallWarning:      time.Minute,
		Nudge:             true,
	}
	if err := operator.Cutover(context.Background(), opts, os.Stdout); err != nil {
		log.Fatal(err)
	}
	// ... Debezium stopped, relay.Run streams from the slot ...
	if err := operator.DropFromSlot(context.Background(), opts, os.Stdout); err != nil {
		log.Fatal(err)
	}
}
