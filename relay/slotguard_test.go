package relay

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/walrelay/walrelay/internal/testwait"
)

// TestExactlyOnceRefusesLostSlot: in exactly-once mode a slot missing at
// start whose checkpoint exists was lost, and Run does not create it again
// (which would hide the events committed meanwhile) unless the loss is
// accepted; the checkpoint of another slot name does not count.
func TestExactlyOnceRefusesLostSlot(t *testing.T) {
	eos := func(o *Options) {
		o.ExactlyOnce = &ExactlyOnce{TransactionalID: "walrelay-slotguard", CheckpointTopic: "slotguard.checkpoints",
			CommitInterval: 50 * time.Millisecond, MaxRecords: 100}
	}
	f := newReplayFixture(t, "slotguard", eos) // a first start creates the slot
	f.txn(t, [4]string{"a", "e", `'{}'`, `'{}'`})
	consumeAll(t, f.cluster.ListenAddrs(), f.topic(), 1)
	f.cancel()
	f.done <- <-f.done
	f.pg.Exec("SELECT pg_drop_replication_slot($1)", f.name)
	f.txn(t, [4]string{"b", "e", `'{}'`, `'{}'`}) // committed while no slot exists
	slots := func() int {
		return f.pg.Count("SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", f.name)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := Run(ctx, f.opts)
	var lost *SlotLostError
	if !errors.As(err, &lost) || !lost.Checkpoint || lost.LastLSN == 0 {
		t.Fatalf("exactly-once start without the slot: %v, want a SlotLostError from the checkpoint", err)
	}
	for _, s := range []string{`"slotguard" does not exist`, "checkpoint", "Recover with a replay since the last delivered event"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%q does not say %q", err, s)
		}
	}
	if keys := lost.SettingKeys(); len(keys) != 2 || keys[1] != "accept-slot-loss" {
		t.Errorf("setting keys %v, want slot and accept-slot-loss", keys)
	}
	if n := slots(); n != 0 {
		t.Fatalf("%d slots after the refusal, want none", n)
	}

	// Another slot name has no checkpoint: a first start.
	other := f.opts
	other.Replication.Slot = "slotguard_other"
	other.MetricsAddr = ""
	t.Cleanup(func() {
		f.pg.Exec("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = 'slotguard_other' AND NOT active")
	})
	startsAndCreates(t, other, f)

	// Accepted: the slot is created.
	accepted := f.opts
	accepted.AcceptSlotLoss = true
	startsAndCreates(t, accepted, f)
	if n := slots(); n != 1 {
		t.Fatalf("%d slots after the accepted start, want 1", n)
	}
}

// startsAndCreates runs the relay with opts until its slot is streamed,
// then stops it.
func startsAndCreates(t *testing.T, opts Options, f *replayFixture) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, opts) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run on slot %s: %v", opts.Replication.Slot, err)
		}
	}()
	testwait.Eventually(t, 20*time.Second, "slot "+opts.Replication.Slot+" to be streamed", func() bool {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("run on slot %s stopped: %v", opts.Replication.Slot, err)
		default:
		}
		return f.pg.Count("SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active", opts.Replication.Slot) == 1
	})
}
