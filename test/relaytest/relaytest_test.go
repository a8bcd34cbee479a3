package relaytest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walrelay/walrelay/internal/testwait"
	"github.com/walrelay/walrelay/replication"
	"github.com/walrelay/walrelay/test/pgtest"
)

// TestSlotStreamedAfterCreation: while a slot's creation waits for a
// transaction running on the server, the slot is active but a row committed
// then is before its consistent point and never in its stream, so Start must
// not take it for streamed yet; once created and streaming, it is.
func TestSlotStreamedAfterCreation(t *testing.T) {
	const name = "created_slot"
	dsn, pg := Database(t)
	CreateOutbox(t, dsn, "public."+name+"_outbox")
	pg.Exec("CREATE PUBLICATION " + name + " FOR TABLE public." + name + "_outbox")
	read := func() (replication.Slot, error) {
		return replication.ReadSlot(context.Background(), replication.NewQuerier(pg.Conn.PgConn()), name)
	}

	// A transaction with an xid, running on the server (in another
	// database): a logical slot's creation waits for it to end.
	blocker := pgtest.Connect(t, pgtest.DSN(t))
	blocker.Exec("BEGIN")
	blocker.Exec("SELECT txid_current()")

	// Create the slot and stream from it, as a run does.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- createAndStream(ctx, dsn, name) }()
	t.Cleanup(func() {
		blocker.Exec("ROLLBACK") // when the test ends before the COMMIT
		cancel()
		<-done
		testwait.Eventually(t, 20*time.Second, "the slot's walsender to end", func() bool {
			s, err := read()
			return errors.Is(err, replication.ErrSlotMissing) || err == nil && !s.Active
		})
	})

	testwait.Eventually(t, 60*time.Second, "the slot's creation to begin", func() bool {
		_, err := read()
		return err == nil
	})
	pg.Exec("INSERT INTO public." + name + "_outbox (aggregate_type, aggregate_id, event_type) VALUES ('order', 'a', 'created')")
	rowAt := pg.LSN("SELECT pg_current_wal_lsn()::text")
	s, err := read()
	if err != nil {
		t.Fatal(err)
	}
	if slotStreamed(s) {
		t.Fatalf("slot %s (active %v, confirmed_flush_lsn %s) taken for streamed while its creation waits for a running transaction", name, s.Active, s.ConfirmedFlushLSN)
	}

	blocker.Exec("COMMIT")
	lastCheckpoint := time.Now()
	testwait.Eventually(t, 60*time.Second, "the slot to be created and streamed", func() bool {
		if s, err = read(); err == nil && slotStreamed(s) {
			return true
		}
		// Slot creation moves on at a record of the running
		// transactions: a checkpoint writes one (else every 15 s).
		if time.Since(lastCheckpoint) > time.Second {
			pg.Exec("CHECKPOINT")
			lastCheckpoint = time.Now()
		}
		return false
	})
	if s.ConfirmedFlushLSN <= rowAt {
		t.Fatalf("slot %s starts at %s, not after the row committed during its creation (%s): the case is not the one tested", name, s.ConfirmedFlushLSN, rowAt)
	}
}

// createAndStream creates logical slot name (pgoutput, publication name)
// over a replication connection to dsn and streams from it until ctx ends.
func createAndStream(ctx context.Context, dsn, name string) error {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return err
	}
	cfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	res, err := pglogrepl.CreateReplicationSlot(ctx, conn, name, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{SnapshotAction: "NOEXPORT_SNAPSHOT", Mode: pglogrepl.LogicalReplication})
	if err != nil {
		return err
	}
	start, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return err
	}
	if err := pglogrepl.StartReplication(ctx, conn, name, start, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + name + "'"}}); err != nil {
		return err
	}
	for {
		if _, err := conn.ReceiveMessage(ctx); err != nil {
			return err
		}
	}
}
