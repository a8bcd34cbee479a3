package relay

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/walrelay/walrelay/internal/retry"
	"github.com/walrelay/walrelay/replication"
)

// standby decides how the Run loop waits after a session ended, and keeps
// the instance's role. While another process holds the slot (a second
// walrelay for fast failover), the instance is a standby: it tries the slot
// again every interval — a short fixed wait, not the reconnect backoff, so
// that it takes over within about interval after the active instance died —
// and says so once per standby period, not on every try. The interval is
// jittered, so that standbys of one slot do not try it in lockstep. Other
// failures use the reconnect backoff.
//
// after is called from the Run goroutine; streaming may be called from the
// stream's goroutine. Both are safe to call concurrently.
type standby struct {
	interval time.Duration
	slot     string
	obs      Observer
	log      *slog.Logger

	mu     sync.Mutex
	since  time.Time // start of the current standby period; zero when not standing by
	holder string    // while standing by: why, naming the walsender that holds the slot
}

func newStandby(interval time.Duration, slot string, obs Observer, log *slog.Logger) *standby {
	return &standby{interval: interval, slot: slot, obs: obs, log: log}
}

// after is called when a session ended with the retryable err. It sets the
// role, logs and counts, and returns the wait before the next try: interval
// when the slot is in use (standingBy true), else backoff.
func (s *standby) after(err error, backoff time.Duration) (wait time.Duration, standingBy bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if errors.Is(err, replication.ErrSlotInUse) {
		s.holder = err.Error()
		if s.since.IsZero() {
			s.since = time.Now()
			s.obs.Reconnecting(ReconnectSlotInUse)
			s.log.Warn("replication slot is in use by another process; standing by (readiness false) and trying it again at a fixed interval until it is free",
				"slot", s.slot, "error", err, "retry_interval", s.interval.String())
		} else {
			s.log.Debug("replication slot still in use; standing by", "slot", s.slot, "error", err)
		}
		s.obs.Role(RoleStandby)
		return retry.Jitter(s.interval), true
	}
	s.since, s.holder = time.Time{}, ""
	s.obs.Role("")
	s.obs.Reconnecting(ReconnectConnection)
	s.log.Warn("replication stream lost; reconnecting", "slot", s.slot, "error", err, "retry_in", backoff.String())
	return backoff, false
}

// streaming is called once a session streams from the slot: the instance is
// active, and, after a standby period, has taken over.
func (s *standby) streaming() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.obs.Role(RoleActive)
	s.holder = ""
	if !s.since.IsZero() {
		s.log.Info("took over the replication slot; active", "slot", s.slot, "standby_for", time.Since(s.since).Round(time.Millisecond).String())
		s.since = time.Time{}
	}
}

// notReady says why the instance is not ready while it stands by (the
// slot's holder, from the last try), "" otherwise. Safe to call
// concurrently.
func (s *standby) notReady() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.since.IsZero() {
		return ""
	}
	return "standing by: " + s.holder
}
