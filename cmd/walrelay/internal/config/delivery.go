package config

import (
	"fmt"

	"github.com/walrelay/walrelay/sink"
)

// Delivery modes (--delivery).
const (
	DeliveryAtLeastOnce = "at-least-once"
	DeliveryExactlyOnce = "exactly-once"
)

// transactionalID is the transactional.id: configured, or derived from the
// slot so that every instance serving the slot fences the others.
func (c Config) transactionalID() string {
	if c.TransactionalID != "" {
		return c.TransactionalID
	}
	return "walrelay-" + c.Slot
}

// validateDelivery checks --delivery and the exactly-once settings.
func (c Config) validateDelivery() error {
	bad := func(key string, format string, a ...any) error {
		return &Error{Key: key, Err: fmt.Errorf(format, a...)}
	}
	switch c.Delivery {
	case DeliveryAtLeastOnce:
		return nil
	case DeliveryExactlyOnce:
	default:
		return bad("delivery", "must be at-least-once or exactly-once, got %q", c.Delivery)
	}
	if err := sink.ValidateTopic(c.CheckpointTopic); err != nil {
		return bad("checkpoint-topic", "%v", err)
	}
	if c.CheckpointReplicationFactor == 0 || c.CheckpointReplicationFactor < -1 || c.CheckpointReplicationFactor > 32767 {
		return bad("checkpoint-replication-factor", "must be -1 (broker default) or positive, got %d", c.CheckpointReplicationFactor)
	}
	if c.TxnCommitInterval <= 0 {
		return bad("txn-commit-interval", "must be positive")
	}
	if c.TxnMaxRecords < 0 {
		return bad("txn-max-records", "must be 0 (twice max-in-flight) or positive, got %d", c.TxnMaxRecords)
	}
	return nil
}
