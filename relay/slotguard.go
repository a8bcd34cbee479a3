package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/walrelay/walrelay/replication"
	"github.com/walrelay/walrelay/sink"
)

// A slot walrelay created on a fresh start streams from the moment it was
// created. After a loss (dropped, invalidated, or missing on a promoted
// standby) that start is past the events the lost slot never delivered, so
// creating the slot again silently hides the gap. In exactly-once mode the
// slot's checkpoint in Kafka proves that walrelay delivered from a slot of
// that name on this server before: then a missing slot was lost, and Run
// refuses to create it unless the loss is accepted. In at-least-once mode
// nothing walrelay writes names the slot, so a first start and a restart
// after a loss look alike and the slot is created as before.

// checkSlotHistory returns a *SlotLostError (Checkpoint set) when opts'
// slot is missing, walrelay would create it, and its exactly-once
// checkpoint exists. A slot it cannot read is left to replication.Open to
// report; a checkpoint it cannot read is an error (it could not tell a lost
// slot from a new one).
func checkSlotHistory(ctx context.Context, opts Options, snk *sink.Sink) error {
	x := opts.ExactlyOnce
	if x == nil || opts.Replication.NoCreateSlot || opts.AcceptSlotLoss {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	conn, err := replication.Connect(cctx, opts.Replication.DSN, opts.Replication.PasswordSource)
	cancel()
	if err != nil {
		return nil // replication.Open reports an unreachable server with its fix
	}
	defer conn.Close(context.Background())
	slot := opts.Replication.Slot
	q := replication.NewQuerier(conn)
	if _, err := replication.ReadSlot(ctx, q, slot); !errors.Is(err, replication.ErrSlotMissing) {
		return nil // it exists, or Open reports why it cannot be read
	}
	sysID, err := replication.SystemIdentifier(ctx, q)
	if err != nil {
		return nil // without the identifier there is no checkpoint key; Open reports a server it cannot use
	}
	kctx, cancel := context.WithTimeout(ctx, opts.KafkaTimeout)
	defer cancel()
	cp, ok, err := snk.ReadCheckpoint(kctx, x.CheckpointTopic, sink.CheckpointKey(sysID, slot))
	switch {
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		return nil // no checkpoint topic: walrelay never delivered exactly-once here
	case err != nil:
		return fmt.Errorf("exactly-once: replication slot %q is missing; reading its checkpoint to tell a lost slot from a first start failed: %w", slot, err)
	case !ok:
		return nil
	}
	return &SlotLostError{Slot: slot, Checkpoint: true, LastLSN: cp.LSN}
}
