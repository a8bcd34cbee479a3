package sink

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walrelay/walrelay/decoder"
)

// What the tests of package sink_test use beyond the sink's API: shortcuts the
// relay does not need (it calls Prepare and Send itself, between which it
// tracks and retries) and the bare record an event becomes.

// Produce is Prepare followed by Send with the same context: it sends ev
// asynchronously, and returns an error (without calling done) when the
// record was not handed to the client.
func (s *Sink) Produce(ctx context.Context, ev *decoder.Event, done func(error)) error {
	r, err := s.Prepare(ctx, ev)
	if err != nil {
		return err
	}
	s.Send(ctx, r, done)
	return nil
}

// ProduceDeadLetter is PrepareDeadLetter followed by Send with the same
// context.
func (s *Sink) ProduceDeadLetter(ctx context.Context, ev *decoder.Event, intended, reason string, cause error, done func(error)) error {
	r, err := s.PrepareDeadLetter(ctx, ev, intended, reason, cause)
	if err != nil {
		return err
	}
	s.Send(ctx, r, done)
	return nil
}

// BuildRecord is the record of docs/outbox-contract.md for ev, without
// CloudEvents, tracing or a schema.
func BuildRecord(topic string, ev *decoder.Event) *kgo.Record {
	rec, _ := buildRecord(topic, ev, false)
	return rec
}
