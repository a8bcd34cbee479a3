package relay

import (
	"sync/atomic"

	"github.com/jackc/pglogrepl"

	"github.com/walrelay/walrelay/checkpoint"
	"github.com/walrelay/walrelay/replication"
)

// trackerRef is the tracker of the WAL history being streamed, for readers on
// other goroutines (the position gauges). The Run goroutine replaces it when
// a reconnect lands on another history.
type trackerRef struct {
	atomic.Pointer[checkpoint.Tracker]
}

func newTrackerRef(tr *checkpoint.Tracker) *trackerRef {
	r := &trackerRef{}
	r.Store(tr)
	return r
}

func (r *trackerRef) Watermark() pglogrepl.LSN { return r.Load().Watermark() }
func (r *trackerRef) InFlight() int            { return r.Load().InFlight() }

// adopt is called with every replication connection before it streams. When
// the connection reaches another WAL history than the previous one (another
// system identifier: another cluster; another timeline: a promoted standby),
// the tracker's positions mean nothing there: reporting its watermark would
// confirm WAL the new server never sent, and the slot would skip the events
// in it. So the tracker is replaced by a new one that starts at the new
// slot's confirmed position. Records of the old server still in flight finish
// (at-least-once) and acknowledge the old tracker only; until they do, they
// count against the old tracker's cap, not the new one's (the sink's own
// buffer limits still bound memory).
func (r *runner) adopt(conn *replication.Conn) error {
	if r.system.SameHistory(conn.System) {
		return nil
	}
	old := r.tr
	tr, err := checkpoint.New(checkpoint.Config{MaxInFlight: r.opts.trackerCap()}, conn.Start)
	if err != nil {
		return err
	}
	r.log.Warn("postgres has another WAL history (failover to another cluster or a promoted standby): "+
		"dropping the in-memory position and resuming from the slot's position on the new server",
		"slot", r.rcfg.Slot,
		"old_system_id", r.system.SystemID, "old_timeline", r.system.Timeline,
		"new_system_id", conn.System.SystemID, "new_timeline", conn.System.Timeline,
		"old_lsn", old.Watermark().String(), "old_in_flight", old.InFlight(), "lsn", conn.Start.String())
	r.system = conn.System
	r.confirmed = conn.Start // what this server's slot holds, not the old one's
	r.tr = tr
	r.cur.Store(tr)
	r.walEnd.Store(0) // the old server's WAL end means nothing here either
	return nil
}
