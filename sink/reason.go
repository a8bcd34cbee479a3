package sink

import (
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"

	"github.com/walrelay/walrelay/decoder"
)

// DeadLetterReason says why an event went to the dead-letter topic: the
// walrelay.dlq.reason header of its record and the reason label of
// walrelay_dead_letters_total. deadLetterReasons is the one list of them,
// for the relay's pipeline and the operator's replays and redrives alike.
type DeadLetterReason string

// The dead-letter reasons.
const (
	ReasonNullAggregateID  DeadLetterReason = "null_aggregate_id"
	ReasonEmptyAggregateID DeadLetterReason = "empty_aggregate_id"
	ReasonNullField        DeadLetterReason = "null_field"
	ReasonBadHeaders       DeadLetterReason = "bad_headers"
	ReasonBadPayload       DeadLetterReason = "bad_payload"
	ReasonBadTimestamp     DeadLetterReason = "bad_timestamp"
	ReasonBadMessage       DeadLetterReason = "bad_message"
	ReasonUnsupportedValue DeadLetterReason = "unsupported_value"
	ReasonBadPartition     DeadLetterReason = "bad_partition"
	ReasonUndecodable      DeadLetterReason = "undecodable"
	ReasonInvalidTopic     DeadLetterReason = "invalid_topic"
	ReasonTopicRefused     DeadLetterReason = "topic_refused"
	ReasonTooLarge         DeadLetterReason = "too_large"
	ReasonSchemaMismatch   DeadLetterReason = "schema_mismatch"
)

// deadLetterRule is one reason and what leads to it: a poison the decoder
// found in the event's values, or the sink's refusal of the record.
type deadLetterRule struct {
	reason  DeadLetterReason
	poison  error // a decoder poison (decoder.Event.Poison wraps it)
	refusal error // a sink refusal (*ProduceError wraps it)
}

// deadLetterReasons is every reason, in the order the pipeline checks them.
// ReasonUndecodable (another poison) and ReasonEmptyAggregateID (a valid
// but empty key) have no error of their own.
var deadLetterReasons = []deadLetterRule{
	{reason: ReasonNullAggregateID, poison: decoder.ErrNullAggregateID},
	{reason: ReasonNullField, poison: decoder.ErrNullField},
	{reason: ReasonBadHeaders, poison: decoder.ErrBadHeaders},
	{reason: ReasonBadPayload, poison: decoder.ErrBadPayload},
	{reason: ReasonBadTimestamp, poison: decoder.ErrBadTimestamp},
	{reason: ReasonBadMessage, poison: decoder.ErrBadMessage},
	{reason: ReasonUnsupportedValue, poison: decoder.ErrUnsupportedValue, refusal: ErrEnvelopeValue},
	{reason: ReasonBadPartition, poison: decoder.ErrBadPartition, refusal: ErrNoSuchPartition},
	{reason: ReasonUndecodable},
	{reason: ReasonEmptyAggregateID},
	{reason: ReasonInvalidTopic, refusal: ErrInvalidTopic},
	{reason: ReasonTopicRefused, refusal: ErrTopicRefused},
	{reason: ReasonTooLarge, refusal: ErrTooLarge},
	{reason: ReasonSchemaMismatch, refusal: ErrSchemaMismatch},
}

// poisonReason is the reason of a decoder poison.
func poisonReason(poison error) DeadLetterReason {
	for _, r := range deadLetterReasons {
		if r.poison != nil && errors.Is(poison, r.poison) {
			return r.reason
		}
	}
	return ReasonUndecodable
}

// RefusalReason is the reason of the sink's refusal err, if it is one that
// dead-letters the event.
func RefusalReason(err error) (DeadLetterReason, bool) {
	for _, r := range deadLetterReasons {
		if r.refusal != nil && errors.Is(err, r.refusal) {
			return r.reason, true
		}
	}
	return "", false
}

// DeadLetterReasons returns every dead-letter reason, in the order the
// pipeline checks them (what RedriveOptions.Reasons may hold).
func DeadLetterReasons() []DeadLetterReason {
	out := make([]DeadLetterReason, len(deadLetterReasons))
	for i, r := range deadLetterReasons {
		out[i] = r.reason
	}
	return out
}

// IsRefusal reports whether reason is one the sink gave (the record was
// fine, Kafka would not take it) rather than a problem of its values.
func IsRefusal(reason string) bool {
	for _, d := range deadLetterReasons {
		if string(d.reason) == reason {
			return d.refusal != nil
		}
	}
	return false
}

// PoisonError is an event whose values cannot become a valid record.
type PoisonError struct {
	EventID string
	Table   string
	LSN     pglogrepl.LSN
	Reason  string
	Err     error
}

func (e *PoisonError) Error() string {
	return fmt.Sprintf("event id=%s table=%s lsn=%s cannot be produced (%s): %v; the slot stays before it (set the poison policy to dlq to dead-letter such events)",
		e.EventID, e.Table, e.LSN, e.Reason, e.Err)
}

func (e *PoisonError) Unwrap() error { return e.Err }

// Fields returns the poison policy's field: dead-lettering such events
// instead of stopping is relay.Options.OnPoison.
func (e *PoisonError) Fields() []string { return []string{"relay.Options.OnPoison"} }

// PoisonOf says why ev's values cannot become a valid record, if they cannot.
func PoisonOf(ev *decoder.Event) (DeadLetterReason, error) {
	if ev.Poison != nil {
		return poisonReason(ev.Poison), ev.Poison
	}
	if len(ev.AggregateID) == 0 {
		return ReasonEmptyAggregateID, errors.New("aggregate id is empty: records of one aggregate need a key to keep their order")
	}
	return "", nil
}
