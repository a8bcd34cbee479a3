package relay

import (
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walrelay/walrelay/internal/retry"
)

// Reconnect waits.
const (
	backoffMin = 500 * time.Millisecond
	backoffMax = 30 * time.Second
	// failoverRetry is the wait between connection attempts while Postgres
	// may be failing over: for failoverWindow after the stream was lost, a
	// server that refuses connections, is starting up, or is (still) read
	// only is tried again at this short interval instead of a doubling one,
	// so that walrelay streams again within about this long of a promotion,
	// however long the promotion took.
	failoverRetry  = time.Second
	failoverWindow = 5 * time.Minute
)

// backoff is the reconnect loop's wait policy. Every wait is jittered, so
// that a fleet of walrelays (standbys of one slot, relays of one database)
// does not retry in lockstep.
type backoff struct {
	exp    time.Duration // the next exponential wait
	lostAt time.Time     // when a streaming session last ended; zero before
}

func newBackoff() *backoff { return &backoff{exp: backoffMin} }

// sessionEnded is called after each session: one that streamed starts a
// failover window, and resets the exponential wait if it streamed for
// longer than that wait (a Postgres restart every few seconds is then met
// at once each time; a connection that keeps failing right after it starts
// is retried less and less often).
func (b *backoff) sessionEnded(streamed bool, lasted time.Duration, now time.Time) {
	if !streamed {
		return
	}
	b.lostAt = now
	if lasted > b.exp {
		b.exp = backoffMin
	}
}

// next returns the wait before the next connection attempt after err (what
// ended the session, or the last attempt's failure).
func (b *backoff) next(err error, now time.Time) time.Duration {
	if !b.lostAt.IsZero() && now.Sub(b.lostAt) < failoverWindow && connectFailed(err) {
		return retry.Jitter(failoverRetry)
	}
	w := b.exp
	b.exp = min(2*b.exp, backoffMax)
	return retry.Jitter(w)
}

// connectFailed reports whether err is a failure to connect at all (refused,
// unreachable, starting up, not read-write for target_session_attrs): what a
// failover looks like from a client, as opposed to a failure after the
// connection was made.
func connectFailed(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce)
}
