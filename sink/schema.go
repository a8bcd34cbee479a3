package sink

import (
	"bytes"
	"context"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/sink/schema"
)

// ErrSchemaMismatch reports an event whose payload (or key) does not fit its
// schema (Config.Schema): the error text carries the validator's message.
// The record is not sent, encoded or not: the relay dead-letters the event
// (reason schema_mismatch) or stops.
var ErrSchemaMismatch = schema.ErrMismatch

// ErrRegistryUnavailable reports a schema registry that could not answer
// while an event's schema was registered or looked up (its first event per
// subject). IsRetryable reports it: the relay waits and prepares the event
// again, as when Kafka is unavailable.
var ErrRegistryUnavailable = schema.ErrUnavailable

// initSchemas builds the encoder of Config.Schema, none when it has no
// rules. It reads and parses the schema files; it dials nothing.
func (s *Sink) initSchemas() error {
	if !s.cfg.Schema.Enabled() {
		return nil
	}
	enc, err := schema.New(s.cfg.Schema, s.log)
	if err != nil {
		return err
	}
	s.schemas = enc
	return nil
}

// encodeSchema encodes rec's value and key when a schema rule covers the
// event's table and event type (see package schema). An encoded key leaves
// the record on its aggregate id's partition (keepPartitionKey). Errors wrap
// ErrSchemaMismatch (the event's fault), ErrRegistryUnavailable
// (retryable), or a permanent registry or configuration error
// (schema.ErrNotAuthorized, schema.ErrSubjectMissing, schema.ErrRefused,
// schema.ErrInvalidSchema) that stops the relay.
func (s *Sink) encodeSchema(ctx context.Context, table, eventType string, rec *kgo.Record) error {
	if s.schemas == nil {
		return nil
	}
	v, k, err := s.schemas.Encode(ctx, schema.Target{Topic: rec.Topic, Table: table, EventType: eventType}, rec.Value, rec.Key)
	if err != nil {
		return err
	}
	if !bytes.Equal(k, rec.Key) { // a key schema encoded it: partition by the aggregate id still
		keepPartitionKey(rec, rec.Key)
	}
	rec.Value, rec.Key = v, k
	return nil
}

// RegisterSchemas registers the schema files of Config.Schema and looks up
// its subjects, each that is known before the first event (a subject of the
// topic strategy whose topic depends on the event waits for its first
// event). It returns one error naming every subject that is missing,
// refused by the registry (with the registry's message) or unusable; or an
// error that IsRetryable reports (the registry is unavailable) or that
// wraps schema.ErrNotAuthorized. Call it at start, after New; a no-op
// without schema rules. Safe for concurrent use with Prepare.
func (s *Sink) RegisterSchemas(ctx context.Context) error {
	if s.schemas == nil {
		return nil
	}
	return s.schemas.Register(ctx, s.knownTopic)
}

// CheckRegistry is doctor's read-only look at the schema registry: one
// finding for the registry (reachable, credentials accepted, global
// compatibility) and one per configured subject known before any event
// (exists, or would be accepted, and its compatibility level). The error is
// for a registry that cannot be reached or refuses the credentials. No
// findings without schema rules.
func (s *Sink) CheckRegistry(ctx context.Context) ([]schema.Finding, error) {
	if s.schemas == nil {
		return nil, nil
	}
	return s.schemas.Check(ctx, s.knownTopic)
}

// knownTopic is the topic of every event of table ("" for tableless events)
// and eventType ("" for any), when the topic template gives the same topic
// for all of them.
func (s *Sink) knownTopic(table, eventType string) (string, bool) {
	t, ok := s.tmpls[table]
	if !ok {
		t = s.tmpl
	}
	for _, seg := range t.segs {
		if seg.kind == segAggregateType || seg.kind == segEventType && eventType == "" || seg.kind == segTable && table == "" {
			return "", false
		}
	}
	_, name, _ := strings.Cut(table, ".")
	topic, err := t.Render(&decoder.Event{Table: table, TableName: name, EventType: eventType})
	return topic, err == nil
}
