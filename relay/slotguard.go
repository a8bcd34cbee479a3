package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/walrelay/walrelay/replication"
	"github.com/walrelay/walrelay/sink"
)

// A slot walrelay created on a fresh start streams from the moment it was
// created. After a loss (dropped, invalidated, or missing on a promoted
// standby) that start is past the events the lost slot never delivered, so
// creating the slot again silently hides the gap. walrelay therefore marks
// every slot it streams from in the checkpoint topic (sink.SlotMark: the
// server's system identifier, the database and the slot), in both delivery
// modes, and writes the mark before it creates the slot. A missing slot
// with a mark was lost; so is one whose exactly-once checkpoint exists. Run
// then refuses to create it, unless the loss is accepted
// (Options.AcceptSlotLoss). A missing slot without either is a first
// start: the mark is written, then the slot created. A slot that exists
// but has no mark (made by a release without marks, or by hand) gets one.
// A kill -9 between the mark and the slot's creation leaves a mark without
// a slot: the next start refuses, though nothing was streamed (a recovery
// then sends duplicates at most, never loses an event).

// guardSlot returns a *SlotLostError (Marked or Checkpoint set) when opts'
// slot is missing, walrelay would create it, and walrelay's mark of it or
// its exactly-once checkpoint exists; before a first start's creation it
// writes the mark. A slot it cannot read is left to replication.Open to
// report; a mark or checkpoint it cannot read while the slot is missing is
// an error (it could not tell a lost slot from a new one).
func guardSlot(ctx context.Context, opts Options, snk *sink.Sink, log *slog.Logger) error {
	if opts.Replication.NoCreateSlot {
		return nil // walrelay never creates the slot: replication.Open reports it missing
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
	_, err = replication.ReadSlot(ctx, q, slot)
	missing := errors.Is(err, replication.ErrSlotMissing)
	if err != nil && !missing {
		return nil // Open reports why it cannot be read
	}
	sysID, err := replication.SystemIdentifier(ctx, q)
	if err != nil {
		return nil // without the identifier there is no key; Open reports a server it cannot use
	}
	db, err := replication.DatabaseName(ctx, q)
	if err != nil {
		return nil
	}
	topic, rf := opts.slotMarks()
	kctx, cancel := context.WithTimeout(ctx, opts.KafkaTimeout)
	defer cancel()
	mark := sink.SlotMark{SystemID: sysID, Database: db, Slot: slot, By: "run"}
	old, marked, err := snk.ReadSlotMark(kctx, topic, mark.Key())
	if !missing {
		switch {
		case err != nil:
			log.Warn("the mark of the replication slot could not be read; a later loss of the slot may not be told from a first start", "slot", slot, "topic", topic, "error", err.Error())
		case !marked:
			mark.At = time.Now().UTC()
			if err := snk.WriteSlotMark(kctx, topic, rf, mark); err != nil {
				log.Warn("the mark of the replication slot could not be written; a later loss of the slot may not be told from a first start", "slot", slot, "topic", topic, "error", err.Error())
			}
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("replication slot %q is missing; reading walrelay's mark of it (topic %q) to tell a lost slot from a first start failed: %w", slot, topic, err)
	}
	var lost *SlotLostError
	if marked {
		lost = &SlotLostError{Slot: slot, Marked: true, Database: db, MarkedAt: old.At}
	}
	if x := opts.ExactlyOnce; x != nil {
		cp, ok, err := snk.ReadCheckpoint(kctx, x.CheckpointTopic, sink.CheckpointKey(sysID, slot))
		switch {
		case errors.Is(err, kerr.UnknownTopicOrPartition):
			// no checkpoint topic: walrelay never delivered exactly-once here
		case err != nil:
			return fmt.Errorf("exactly-once: replication slot %q is missing; reading its checkpoint to tell a lost slot from a first start failed: %w", slot, err)
		case ok:
			lost = &SlotLostError{Slot: slot, Checkpoint: true, LastLSN: cp.LSN, Database: db}
		}
	}
	if lost != nil {
		if !opts.AcceptSlotLoss {
			return lost
		}
		log.Warn("replication slot was lost; creating it again as accept-slot-loss says: the events committed since the loss are never sent",
			"slot", slot, "error", lost.Error())
		return nil
	}
	mark.At = time.Now().UTC()
	if err := snk.WriteSlotMark(kctx, topic, rf, mark); err != nil {
		return &settingsError{fmt.Errorf("replication slot %q is missing and walrelay marks a slot in Kafka before it creates it (so that a later loss of the slot is not taken for a first start), but the mark could not be written: %w "+
			"(let walrelay create and write the checkpoint topic, or create the slot beforehand)", slot, err), []string{"checkpoint-topic"}}
	}
	return nil
}
