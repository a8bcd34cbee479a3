package relay

import (
	"errors"

	"github.com/walrelay/walrelay/replication"
)

// reconnectable reports whether the relay reconnects after err ended a
// session or a reconnect attempt. Only known transient failures qualify
// (replication.IsRetryable, an allow-list); a delivery failure never does,
// nor does anything unknown: walrelay then stops with the error instead of
// reconnecting forever.
func reconnectable(err error) bool {
	var fr *fencedRetry
	if errors.As(err, &fr) {
		return true // stops if another instance holds the slot (stopIfFenced)
	}
	var re *eosRestartError
	var fe *FencedError
	if errors.As(err, &re) && !errors.As(err, &fe) {
		return true // exactly-once: the aborted transaction is read again
	}
	var de *deliveryError
	if errors.As(err, &de) {
		return false
	}
	return replication.IsRetryable(err)
}
