package operator

import (
	"context"
	"errors"
	"log/slog"

	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/sink"
)

// producer is the sink as prepareEvent uses it.
type producer interface {
	Prepare(ctx context.Context, ev *decoder.Event) (sink.Record, error)
	PrepareDeadLetter(ctx context.Context, ev *decoder.Event, intended, reason string, cause error) (sink.Record, error)
	Topic(ev *decoder.Event) (string, error)
}

// prepared is an event's record made by prepareEvent: for its topic, or for
// the dead-letter topic (Reason set; Intended is the topic it was meant for).
type prepared struct {
	Record   sink.Record
	Reason   sink.DeadLetterReason
	Intended string
	Cause    error
}

// prepareEvent makes ev's record by the pipeline's rules (pipeline.produce),
// for the runs beside it (replay, redrive): a poisoned event, or one the
// sink refuses for a dead-letter reason, gets its dead-letter record, or
// with stop a *sink.PoisonError; while Kafka cannot answer a topic's
// look-up the preparation is retried with backoff until ctx ends (each
// retry logged on log).
func prepareEvent(ctx context.Context, p producer, ev *decoder.Event, stop bool, log *slog.Logger) (prepared, error) {
	retry := func(prepare func() (sink.Record, error)) (sink.Record, error) {
		return retryPrepare(ctx, log, ev.ID, prepare)
	}
	deadLetter := func(intended string, reason sink.DeadLetterReason, cause error) (prepared, error) {
		if stop {
			return prepared{}, &sink.PoisonError{EventID: ev.ID, Table: ev.Table, LSN: ev.LSN, Reason: string(reason), Err: cause}
		}
		rec, err := retry(func() (sink.Record, error) { return p.PrepareDeadLetter(ctx, ev, intended, string(reason), cause) })
		if err != nil {
			return prepared{}, err
		}
		return prepared{Record: rec, Reason: reason, Intended: intended, Cause: cause}, nil
	}
	if reason, cause := sink.PoisonOf(ev); cause != nil {
		intended, _ := p.Topic(ev) // best effort: for the dead-letter header
		return deadLetter(intended, reason, cause)
	}
	rec, err := retry(func() (sink.Record, error) { return p.Prepare(ctx, ev) })
	if err == nil {
		return prepared{Record: rec}, nil
	}
	var pe *sink.ProduceError
	if errors.As(err, &pe) {
		if reason, ok := sink.RefusalReason(err); ok {
			return deadLetter(pe.Topic, reason, err)
		}
	}
	return prepared{}, err
}
