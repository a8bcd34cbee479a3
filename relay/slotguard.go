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
// modes, and writes the mark right before it creates the slot (through
// replication.Config.Marker, once Open's other checks passed; a creation
// that fails deletes the mark again). A missing slot
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
// its exactly-once checkpoint exists. On a first start it returns the
// marker that writes the mark right before replication.Open creates the
// slot (after every other check of Open passed: a start refused for a
// missing table leaves no mark). A slot it cannot read is left to
// replication.Open to report; a mark or checkpoint it cannot read while the
// slot is missing is an error (it could not tell a lost slot from a new
// one).
func guardSlot(ctx context.Context, opts Options, snk *sink.Sink, log *slog.Logger) (replication.SlotMarker, error) {
	if opts.Replication.NoCreateSlot {
		return nil, nil // walrelay never creates the slot: replication.Open reports it missing
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	conn, err := replication.Connect(cctx, opts.Replication.DSN, opts.Replication.PasswordSource)
	cancel()
	if err != nil {
		return nil, nil // replication.Open reports an unreachable server with its fix
	}
	defer conn.Close(context.Background())
	slot := opts.Replication.Slot
	q := replication.NewQuerier(conn)
	_, err = replication.ReadSlot(ctx, q, slot)
	missing := errors.Is(err, replication.ErrSlotMissing)
	if err != nil && !missing {
		return nil, nil // Open reports why it cannot be read
	}
	sysID, err := replication.SystemIdentifier(ctx, q)
	if err != nil {
		return nil, nil // without the identifier there is no key; Open reports a server it cannot use
	}
	db, err := replication.DatabaseName(ctx, q)
	if err != nil {
		return nil, nil
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
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("replication slot %q is missing; reading walrelay's mark of it (topic %q) to tell a lost slot from a first start failed: %w", slot, topic, err)
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
			return nil, fmt.Errorf("exactly-once: replication slot %q is missing; reading its checkpoint to tell a lost slot from a first start failed: %w", slot, err)
		case ok:
			lost = &SlotLostError{Slot: slot, Checkpoint: true, LastLSN: cp.LSN, Database: db}
		}
	}
	if lost != nil {
		if !opts.AcceptSlotLoss {
			return nil, lost
		}
		log.Warn("replication slot was lost; creating it again, its loss accepted: the events committed since the loss are never sent",
			"slot", slot, "error", lost.Error())
		return nil, nil
	}
	return &slotMarker{snk: snk, topic: topic, rf: rf, mark: mark, timeout: opts.KafkaTimeout, log: log}, nil
}

// slotMarker writes walrelay's mark of a slot right before
// replication.Open creates it, and deletes it when the creation failed.
type slotMarker struct {
	snk     *sink.Sink
	topic   string
	rf      int16
	mark    sink.SlotMark
	timeout time.Duration
	log     *slog.Logger
}

func (m *slotMarker) Mark(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	m.mark.At = time.Now().UTC()
	if err := m.snk.WriteSlotMark(ctx, m.topic, m.rf, m.mark); err != nil {
		return &fieldsError{fmt.Errorf("replication slot %q is missing and walrelay marks a slot in Kafka before it creates it (so that a later loss of the slot is not taken for a first start), but the mark could not be written: %w "+
			"(let walrelay create and write the checkpoint topic, or create the slot beforehand)", m.mark.Slot, err), []string{"relay.Options.SlotMarkTopic"}}
	}
	return nil
}

func (m *slotMarker) Unmark(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	if err := m.snk.DeleteSlotMark(ctx, m.topic, m.mark.Key()); err != nil {
		m.log.Warn("the replication slot was not created, and its mark could not be deleted: the next start takes the slot for lost (recover, or start once accepting the loss)",
			"slot", m.mark.Slot, "topic", m.topic, "error", err.Error())
	}
}
