// Package retry holds the waits shared by the runtime (relay) and the
// operator's tools (operator): jittered, so that a fleet of walrelays does
// not retry in lockstep, and bounded by a context.
package retry

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff while Kafka cannot answer a topic's look-up or creation.
const (
	kafkaMin = 250 * time.Millisecond
	kafkaMax = 10 * time.Second
)

// KafkaWait is the wait before attempt+1 (attempt counts from 1) while
// Kafka cannot answer: from 250 ms, doubling, up to 10 s, jittered.
func KafkaWait(attempt int) time.Duration {
	return Jitter(min(kafkaMin<<min(attempt-1, 10), kafkaMax))
}

// Jitter spreads d over [0.8d, 1.2d).
func Jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return d*4/5 + rand.N(d*2/5)
}

// Sleep waits d, or until ctx ends (its error).
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
