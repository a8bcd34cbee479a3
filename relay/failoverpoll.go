package relay

import (
	"context"
	"log/slog"
	"time"

	"github.com/walrelay/walrelay/replication"
)

// pollFailover reads the failover slot's protection on every host of the
// Postgres DSN every interval (at once first) until ctx is done, hands
// each reading to obs (the walrelay_failover_* gauges) and logs a warning when a standby stops
// protecting the slot (and once it does again). Unreadable hosts are
// findings, not failures; it never stops the relay.
func pollFailover(ctx context.Context, opts Options, obs Observer) {
	rc, log := opts.Replication, opts.Logger
	fl := &failoverLog{slot: rc.Slot, log: log, state: map[string]string{}}
	t := time.NewTicker(opts.SlotMetricsInterval)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, max(opts.SlotMetricsInterval, 10*time.Second))
		h, err := replication.ReadFailoverHealth(cctx, rc.DSN, rc.Slot, rc.PasswordSource)
		cancel()
		if err == nil && ctx.Err() == nil {
			obs.FailoverPolled(h)
			fl.observe(h)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// failoverLog says when a standby stops (or starts again) protecting the
// slot. Used by one goroutine.
type failoverLog struct {
	slot  string
	log   *slog.Logger
	state map[string]string // standby → its problem ("" protected)
	none  bool              // warned that no standby protects the slot
}

func (l *failoverLog) observe(h replication.FailoverHealth) {
	protected := 0
	for _, s := range h.Standbys {
		problem := s.Problem()
		if problem == "" {
			protected++
		}
		prev, seen := l.state[s.Server]
		switch {
		case problem != "" && problem != prev:
			l.log.Warn("a standby no longer protects the failover slot: a promotion of it now loses the slot", "slot", l.slot, "standby", s.Server, "problem", problem)
		case problem == "" && seen && prev != "":
			l.log.Info("the standby protects the failover slot again", "slot", l.slot, "standby", s.Server)
		}
		l.state[s.Server] = problem
	}
	if protected == 0 && !l.none {
		l.none = true
		l.log.Warn("no standby protects the failover slot: a failover now loses it (walrelay doctor says what each lacks)", "slot", l.slot, "standbys", len(h.Standbys))
	} else if protected > 0 {
		l.none = false
	}
}

// startFailoverPoll starts pollFailover when the slot is a failover slot
// and slot metrics are on, and returns the function that stops it.
func startFailoverPoll(ctx context.Context, opts Options, obs Observer) (stop func()) {
	if !opts.Replication.SlotFailover || opts.SlotMetricsInterval <= 0 {
		return func() {}
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		pollFailover(pctx, opts, obs)
	}()
	return func() {
		cancel()
		<-done
	}
}
