package relay

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walrelay/walrelay/replication"
)

// SlotLostError stops a relay whose replication slot is gone on reconnect
// (dropped; or missing on a promoted standby that never had it: a failover
// without failover slots) or was invalidated. Events committed after the
// slot's last confirmed position may be missing from Kafka, and only the
// outbox table still holds them: it says what was delivered last, so that
// the operator re-publishes the rows committed since then before streaming
// from a new slot.
type SlotLostError struct {
	Slot string
	// Failover: the server walrelay reconnected to has another WAL history
	// (system identifier or timeline) than the one it streamed from.
	Failover          bool
	Previous, Current replication.Identity
	// LastLSN and LastCommit are the end and commit time of the last
	// transaction walrelay delivered; zero when none was.
	LastLSN    pglogrepl.LSN
	LastCommit time.Time
	// Checkpoint: the slot was missing when walrelay started, and the
	// slot's exactly-once checkpoint shows that walrelay delivered from a
	// slot of that name on this server before, up to LastLSN; walrelay did
	// not create the slot again (see Options.AcceptSlotLoss).
	Checkpoint bool
	// Marked: the slot was missing when walrelay started, and walrelay's
	// mark of it (slotguard.go), written at MarkedAt, shows that walrelay
	// made a slot of that name in Database on this server before; walrelay
	// did not create the slot again (see Options.AcceptSlotLoss).
	Marked   bool
	Database string
	MarkedAt time.Time
	// AtStart: Run found the slot unusable (invalidated, temporary) when it
	// started, before streaming.
	AtStart bool
	Err     error // the replication package's *PrereqError; nil with Checkpoint or Marked
}

func (e *SlotLostError) Error() string {
	var b strings.Builder
	var lost *replication.SlotLostError
	errors.As(e.Err, &lost)
	if e.Checkpoint {
		fmt.Fprintf(&b, "replication slot %q does not exist, but its exactly-once checkpoint shows that walrelay delivered from a slot of that name "+
			"on this server up to %s: the slot was dropped or lost, and events committed since then may be missing from Kafka. "+
			"walrelay does not create the slot again, which would hide that gap. ", e.Slot, e.LastLSN)
		b.WriteString(recoverAdvice)
		return b.String()
	}
	if e.Marked {
		fmt.Fprintf(&b, "replication slot %q does not exist, but walrelay's mark shows that walrelay made a slot of that name in database %q on this server (marked %s): "+
			"the slot was dropped or lost, and events committed since then may be missing from Kafka. walrelay does not create the slot again, which would hide that gap. ",
			e.Slot, e.Database, e.MarkedAt.UTC().Format(time.RFC3339))
		b.WriteString(recoverAdvice)
		return b.String()
	}
	var pe *replication.PrereqError
	switch {
	case e.AtStart && lost != nil && lost.Invalidated != "":
		fmt.Fprintf(&b, "replication slot %q was invalidated while walrelay was not streaming from it (%s): the WAL it needed is gone", e.Slot, lost.Invalidated)
	case e.AtStart && errors.As(e.Err, &pe):
		b.WriteString(pe.Problem)
	}
	if e.AtStart {
		b.WriteString("; events committed after its last confirmed position may be missing from Kafka, and creating the slot again would hide them. ")
		b.WriteString(recoverAdvice)
		return b.String()
	}
	switch {
	case e.Failover:
		fmt.Fprintf(&b, "postgres failed over: walrelay reconnected to a server on another WAL history (system id %s timeline %d, was %s timeline %d), which has no replication slot %q; a promoted standby has only failover slots (Postgres 17 and later, with slot failover on and the standby synchronizing slots)",
			e.Current.SystemID, e.Current.Timeline, e.Previous.SystemID, e.Previous.Timeline, e.Slot)
	case lost != nil && lost.Invalidated != "":
		fmt.Fprintf(&b, "replication slot %q was invalidated (%s): the WAL it needed is gone", e.Slot, lost.Invalidated)
	default:
		fmt.Fprintf(&b, "replication slot %q disappeared while walrelay was using it (someone dropped it)", e.Slot)
	}
	b.WriteString("; events committed after its last confirmed position may be missing from Kafka. ")
	if e.LastLSN != 0 {
		at := "at an unknown time"
		if !e.LastCommit.IsZero() {
			at = "committed at " + e.LastCommit.UTC().Format(time.RFC3339Nano)
		}
		fmt.Fprintf(&b, "The last transaction walrelay delivered ended at %s, %s. ", e.LastLSN, at)
	} else {
		b.WriteString("walrelay delivered no transaction since it started. ")
	}
	b.WriteString(recoverAdvice)
	return b.String()
}

// recoverAdvice ends a SlotLostError's message.
const recoverAdvice = "Recover with a replay since the last delivered event, which also creates the new slot; start walrelay only after it"

func (e *SlotLostError) Unwrap() error { return e.Err }

// Fields: a failover needs failover slots; a slot found missing at start
// is created only when the loss is accepted.
func (e *SlotLostError) Fields() []string {
	if e.Checkpoint || e.Marked {
		return []string{"replication.Config.Slot", "relay.Options.AcceptSlotLoss"}
	}
	if e.Failover {
		return []string{"replication.Config.SlotFailover"}
	}
	return []string{"replication.Config.Slot"}
}

// slotLostAtStart returns the SlotLostError of err, replication.Open's at
// start, when err says the slot is lost (invalidated, temporary), else err.
func slotLostAtStart(slot string, err error) error {
	var lost *replication.SlotLostError
	if !errors.As(err, &lost) {
		return err
	}
	return &SlotLostError{Slot: slot, AtStart: true, Current: lost.System, Err: err}
}

// slotLost returns the SlotLostError of err when err says the slot is gone,
// else err.
func (r *runner) slotLost(err error) error {
	var lost *replication.SlotLostError
	if !errors.As(err, &lost) {
		return err
	}
	last, at := r.tr.Delivered()
	return &SlotLostError{Slot: r.rcfg.Slot, Failover: !r.system.SameHistory(lost.System), Previous: r.system, Current: lost.System,
		LastLSN: last, LastCommit: at, Err: err}
}
