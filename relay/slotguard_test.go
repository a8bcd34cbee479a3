package relay

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/walrelay/walrelay/internal/testwait"
	"github.com/walrelay/walrelay/test/relaytest"
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
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	var opts Options
	f := startRelay(t, "slotguard", cluster, eos, func(o *Options) { opts = *o }) // a first start creates the slot
	opts.Logger = slog.New(slog.DiscardHandler)
	f.InsertTxn(t, "a", 1)
	relaytest.ConsumeAll(t, f.Cluster.ListenAddrs(), "slotguard.order", 1)
	f.Cancel()
	f.Done <- <-f.Done
	f.PG.Exec("SELECT pg_drop_replication_slot($1)", f.Name)
	f.InsertTxn(t, "b", 1) // committed while no slot exists
	slots := func() int {
		return f.PG.Count("SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", f.Name)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = Run(ctx, opts)
	var lost *SlotLostError
	if !errors.As(err, &lost) || !lost.Checkpoint || lost.LastLSN == 0 {
		t.Fatalf("exactly-once start without the slot: %v, want a SlotLostError from the checkpoint", err)
	}
	for _, s := range []string{`"slotguard" does not exist`, "checkpoint", "Recover with a replay since the last delivered event"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%q does not say %q", err, s)
		}
	}
	if fields := lost.Fields(); len(fields) != 2 || fields[1] != "relay.Options.AcceptSlotLoss" {
		t.Errorf("fields %v, want the slot and relay.Options.AcceptSlotLoss", fields)
	}
	if n := slots(); n != 0 {
		t.Fatalf("%d slots after the refusal, want none", n)
	}

	// Another slot name has no checkpoint: a first start.
	other := opts
	other.Replication.Slot = "slotguard_other"
	t.Cleanup(func() {
		f.PG.Exec("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = 'slotguard_other' AND NOT active")
	})
	startsAndCreates(t, other, f)

	// Accepted: the slot is created.
	accepted := opts
	accepted.AcceptSlotLoss = true
	startsAndCreates(t, accepted, f)
	if n := slots(); n != 1 {
		t.Fatalf("%d slots after the accepted start, want 1", n)
	}
}

// TestRefusesLostSlot: in the default delivery mode (at-least-once) too, a
// slot missing at start that walrelay made before (its mark in the
// checkpoint topic) was lost, and Run does not create it again unless the
// loss is accepted; a first start on an empty history just starts, and a
// slot of another name (no mark) too.
func TestRefusesLostSlot(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	var opts Options
	marks := func(o *Options) { o.SlotMarkTopic = "slotmark.checkpoints" }
	f := startRelay(t, "slotmark", cluster, marks, func(o *Options) { opts = *o }) // a first start creates the slot
	opts.Logger = slog.New(slog.DiscardHandler)
	f.InsertTxn(t, "a", 1)
	relaytest.ConsumeAll(t, f.Cluster.ListenAddrs(), "slotmark.order", 1)
	f.Cancel()
	f.Done <- <-f.Done
	f.PG.Exec("SELECT pg_drop_replication_slot($1)", f.Name)
	f.InsertTxn(t, "b", 1) // committed while no slot exists
	slots := func() int {
		return f.PG.Count("SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", f.Name)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = Run(ctx, opts)
	var lost *SlotLostError
	if !errors.As(err, &lost) || !lost.Marked {
		t.Fatalf("at-least-once start without the slot walrelay made: %v, want a SlotLostError from walrelay's mark", err)
	}
	for _, s := range []string{`"slotmark" does not exist`, "walrelay's mark", "Recover with a replay since the last delivered event"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%q does not say %q", err, s)
		}
	}
	if fields := lost.Fields(); len(fields) != 2 || fields[1] != "relay.Options.AcceptSlotLoss" {
		t.Errorf("fields %v, want the slot and relay.Options.AcceptSlotLoss", fields)
	}
	if n := slots(); n != 0 {
		t.Fatalf("%d slots after the refusal, want none", n)
	}

	// Another slot name has no mark: a first start.
	other := opts
	other.Replication.Slot = "slotmark_other"
	t.Cleanup(func() {
		f.PG.Exec("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = 'slotmark_other' AND NOT active")
	})
	startsAndCreates(t, other, f)

	// Accepted: the slot is created.
	accepted := opts
	accepted.AcceptSlotLoss = true
	startsAndCreates(t, accepted, f)
	if n := slots(); n != 1 {
		t.Fatalf("%d slots after the accepted start, want 1", n)
	}

	// A first start refused before the slot is created (its table is
	// missing) leaves no mark: once the table exists, the next start is a
	// first start.
	later := testOptions(f.DSN, f.Cluster.ListenAddrs(), "slotmark_later")
	later.SlotMarkTopic, later.Logger = opts.SlotMarkTopic, opts.Logger
	t.Cleanup(func() {
		f.PG.Exec("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = 'slotmark_later' AND NOT active")
	})
	if err := Run(ctx, later); err == nil || !strings.Contains(err.Error(), "slotmark_later_outbox") {
		t.Fatalf("start without its table: %v, want the missing table named", err)
	}
	relaytest.CreateOutbox(t, f.DSN, "public.slotmark_later_outbox")
	startsAndCreates(t, later, f)

	// A slot made without a mark (by hand, or by a release without marks)
	// gets one when Run streams from it: its later loss is refused too.
	byHand := later
	byHand.Replication.Slot = "slotmark_byhand"
	t.Cleanup(func() {
		f.PG.Exec("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = 'slotmark_byhand' AND NOT active")
	})
	f.PG.Exec("SELECT pg_create_logical_replication_slot('slotmark_byhand', 'pgoutput')")
	startsAndCreates(t, byHand, f)
	f.PG.Exec("SELECT pg_drop_replication_slot('slotmark_byhand')")
	if err := Run(ctx, byHand); !errors.As(err, &lost) || !lost.Marked {
		t.Fatalf("start without the slot made by hand, marked by the last start: %v, want a SlotLostError from walrelay's mark", err)
	}
}

// startsAndCreates runs the relay with opts until its slot is streamed,
// then stops it.
func startsAndCreates(t *testing.T, opts Options, f *relayFixture) {
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
	testwait.Eventually(t, 60*time.Second, "slot "+opts.Replication.Slot+" to be created and streamed", func() bool {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("run on slot %s stopped: %v", opts.Replication.Slot, err)
		default:
		}
		return relaytest.SlotStreamed(f.PG, opts.Replication.Slot)
	})
}
