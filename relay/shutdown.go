package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walrelay/walrelay/replication"
)

// finalConfirmMin is the least time one attempt to confirm the final position
// gets, even when the drain used up the shutdown timeout.
const finalConfirmMin = 5 * time.Second

// finalPosition is the Position of the short connection that only confirms
// the final watermark: the drain already happened, so it is settled.
type finalPosition struct{ w pglogrepl.LSN }

func (p finalPosition) Watermark() pglogrepl.LSN { return p.w }
func (p finalPosition) Settled() bool            { return true }

// finishBetweenSessions is the graceful stop for a SIGTERM that arrives while
// no replication session runs (Postgres went away and walrelay waits to
// reconnect). Records of the previous session may still wait for Kafka: it
// waits for them, up to the shutdown timeout, then opens one short
// replication connection to confirm the final watermark (retrying until the
// deadline while Postgres is unreachable). If that fails, it says in one log
// line what was not confirmed; the slot sends it again (at-least-once).
func (r *runner) finishBetweenSessions() {
	deadline := time.Now().Add(r.opts.ShutdownTimeout)
	for r.sink.Buffered() > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := r.sink.Buffered(); n > 0 {
		r.log.Warn("shutdown timeout: records still unacknowledged; they will be sent again after restart",
			"slot", r.rcfg.Slot, "unacknowledged_records", n)
	}
	w := r.tr.Watermark()
	if w <= r.confirmed {
		r.log.Info("final position already confirmed", "slot", r.rcfg.Slot, "lsn", r.confirmed.String(),
			"unacknowledged_records", r.sink.Buffered())
		return
	}
	var err error
	for {
		if err = r.confirmFinal(deadline, w); err == nil {
			return
		}
		if !reconnectable(err) || time.Until(deadline) <= 0 {
			break
		}
		time.Sleep(min(backoffMin, time.Until(deadline)))
	}
	r.log.Warn("shutdown: final position not confirmed to the slot; Postgres will send the transactions after the slot's position again (at-least-once)",
		"slot", r.rcfg.Slot, "lsn", w.String(), "slot_lsn", r.confirmed.String(),
		"unacknowledged_records", r.sink.Buffered(), "error", err.Error())
}

// confirmFinal opens a replication connection, starts streaming and stops at
// once, reporting w as written, flushed and applied.
func (r *runner) confirmFinal(deadline time.Time, w pglogrepl.LSN) error {
	ctx, cancel := context.WithDeadline(context.Background(), maxTime(deadline, time.Now().Add(finalConfirmMin)))
	defer cancel()
	conn, err := replication.Open(ctx, r.rcfg)
	if err != nil {
		return err
	}
	if !r.system.SameHistory(conn.System) {
		// Postgres failed over while walrelay waited: w belongs to the old
		// server's WAL and would confirm positions the new one never sent.
		_ = conn.Close(context.Background())
		return &otherHistoryError{old: r.system, new: conn.System}
	}
	// Streaming must start (the walsender only takes status updates on a
	// started stream); stopping right then makes Run skip reading, report w
	// and end the stream cleanly.
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	st := conn.NewStream(finalPosition{w}, replication.WithLogger(r.log), replication.WithOnStart(stop))
	if err := st.Run(sctx); err != nil {
		return err
	}
	if st.Confirmed() < w {
		return fmt.Errorf("confirm final position %s: only %s was sent", w, st.Confirmed())
	}
	r.confirmed = st.Confirmed()
	return nil
}

// otherHistoryError: the server reached at shutdown has another WAL history
// than the one the final watermark belongs to; nothing is confirmed there.
type otherHistoryError struct{ old, new replication.Identity }

func (e *otherHistoryError) Error() string {
	return fmt.Sprintf("postgres has another WAL history (system id %s timeline %d, was %s timeline %d): the final position belongs to the old server and is not confirmed",
		e.new.SystemID, e.new.Timeline, e.old.SystemID, e.old.Timeline)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
