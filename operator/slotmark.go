package operator

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/walrelay/walrelay/replication"
	"github.com/walrelay/walrelay/sink"
)

// SlotMarkOptions are what MarkSlot needs: the slot (Replication's DSN,
// password source and slot name), walrelay run's Kafka settings and the
// topic of the marks (run's checkpoint topic, in both delivery modes).
type SlotMarkOptions struct {
	Replication replication.Config
	Sink        sink.Config
	// Topic is the compacted topic of the marks (default
	// sink.DefaultCheckpointTopic); ReplicationFactor its replication
	// factor when it is created (0 or -1: the broker's default).
	Topic             string
	ReplicationFactor int16
	Logger            *slog.Logger // nil: slog.Default()
}

// MarkSlot writes walrelay's mark of opts' slot (sink.SlotMark), as walrelay
// run does before it creates a slot: a recovery calls it before
// Recovery.CreateSlot, so that a later loss of the new slot makes run
// refuse to create it again instead of skipping the gap.
func MarkSlot(ctx context.Context, opts SlotMarkOptions) error {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	conn, err := connectPlain(ctx, opts.Replication.DSN, "walrelay recovery", opts.Replication.PasswordSource)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	q := replication.NewQuerier(conn.PgConn())
	sysID, err := replication.SystemIdentifier(ctx, q)
	if err != nil {
		return fmt.Errorf("read the system identifier: %w", err)
	}
	db, err := replication.DatabaseName(ctx, q)
	if err != nil {
		return fmt.Errorf("read the database name: %w", err)
	}
	slot, topic, rf := opts.Replication.Slot, opts.Topic, opts.ReplicationFactor
	if slot == "" {
		slot = "walrelay"
	}
	if topic == "" {
		topic = sink.DefaultCheckpointTopic
	}
	if rf == 0 {
		rf = -1
	}
	snk, err := sink.New(opts.Sink, sink.WithLogger(log))
	if err != nil {
		return err
	}
	defer snk.Close()
	return snk.WriteSlotMark(ctx, topic, rf, sink.SlotMark{SystemID: sysID, Database: db, Slot: slot, By: "recovery", At: time.Now().UTC()})
}
