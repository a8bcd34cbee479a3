package sink

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walrelay/walrelay/decoder"
)

// Records produced again from the outbox table (walrelay replay) or from the
// dead-letter topic (redrive) are made here from the same pieces as every
// other record: Prepare and PrepareDeadLetter build them, these functions
// only adjust what a replay must say differently.

// HeaderReplay marks a record re-published from the outbox table by a
// replay; its value is the replay's id. Consumers still deduplicate on id.
const HeaderReplay = "walrelay.replay"

// HeaderDLQPrefix starts every dead-letter header (walrelay.dlq.reason, ...).
const HeaderDLQPrefix = "walrelay.dlq."

// MarkReplay returns r as a replay with the given id: it gains HeaderReplay
// and loses walrelay.lsn and walrelay.xid, which only a record read from the
// WAL knows (a row does not tell where its insert is in the WAL). Everything
// else (topic, key, value, the other headers, timestamp, partition) stays.
// r must come from Prepare or PrepareDeadLetter and not have been sent.
func (r Record) MarkReplay(id string) Record {
	hs := r.rec.Headers[:0]
	for _, h := range r.rec.Headers {
		if h.Key != HeaderLSN && h.Key != HeaderXID {
			hs = append(hs, h)
		}
	}
	r.rec.Headers = append(hs, kgo.RecordHeader{Key: HeaderReplay, Value: []byte(id)})
	return r
}

// Topic returns the topic r goes to.
func (r Record) Topic() string { return r.rec.Topic }

// PrepareStored makes a record Kafka will accept from a stored one (a
// dead-letter record whose outbox row is gone): rec's topic, key, value,
// headers and timestamp as they are, its partition chosen from the key.
// Headers of the dead-letter topic (HeaderDLQPrefix) are removed. The value
// and key a dead-letter record holds are the payload and aggregate id as
// stored: they are written as Prepare writes them, so the record is the one
// Prepare makes of the event. The value of a table of Config.JSONValues
// (HeaderDLQTable) is made from the payload, whose column has the type
// payloadType (an OID; 0 is JSON text), as Prepare makes it for an event
// without envelope columns (ErrEnvelopeValue when it cannot be written); a
// schema rule of the table and event type then encodes it (a payload that
// does not fit is ErrSchemaMismatch). A dead letter keeps neither the
// values of the envelope's columns nor an explicit partition: the caller
// must not make a record of a table that has them this way. The topic is
// looked up (created when missing and allowed) and the record checked
// against its limits as Prepare does, with the same errors. id names the
// event in errors. rec is not retained; its byte slices are.
func (s *Sink) PrepareStored(ctx context.Context, rec *kgo.Record, id string, payloadType uint32) (Record, error) {
	out := &kgo.Record{Topic: rec.Topic, Partition: noPartition, Key: rec.Key, Value: rec.Value, Timestamp: rec.Timestamp}
	for _, h := range rec.Headers {
		if !strings.HasPrefix(h.Key, HeaderDLQPrefix) {
			out.Headers = append(out.Headers, h)
		}
	}
	fail := func(err error) (Record, error) {
		return Record{}, &ProduceError{Topic: out.Topic, EventID: id, LSN: headerValue(out.Headers, HeaderLSN), Err: err}
	}
	if err := ValidateTopic(out.Topic); err != nil {
		return fail(err)
	}
	m, err := s.topic(ctx, out.Topic)
	if err != nil {
		return fail(err)
	}
	table := headerValue(rec.Headers, HeaderDLQTable)
	if err := s.encodeJSONValue(&decoder.Event{Table: table, Payload: rec.Value, PayloadType: payloadType}, out); err != nil {
		return fail(err)
	}
	if err := s.encodeSchema(ctx, table, headerValue(rec.Headers, HeaderEventType), out); err != nil {
		return fail(err)
	}
	if err := s.checkSize(ctx, m, out); err != nil {
		return fail(err)
	}
	return Record{rec: out, id: id}, nil
}

// headerValue returns the value of the first header named key, "" if none.
func headerValue(hs []kgo.RecordHeader, key string) string {
	i := slices.IndexFunc(hs, func(h kgo.RecordHeader) bool { return h.Key == key })
	if i < 0 {
		return ""
	}
	return string(hs[i].Value)
}

// NewClient returns a new Kafka client with the sink's brokers, client id
// and security (TLS, SASL), plus opts: for reading topics (the dead-letter
// topic, the newest records of the outbox topics) with the producer's
// credentials. It never has the sink's transactional id. The caller closes
// it.
func (s *Sink) NewClient(opts ...kgo.Opt) (*kgo.Client, error) {
	cl, err := kgo.NewClient(append(slices.Clone(s.pingOpts), opts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return cl, nil
}

// HeaderDLQAttempts counts how often a dead-letter record was redriven and
// failed again (dead-lettered anew by the redrive).
const HeaderDLQAttempts = "walrelay.dlq.attempts"

// WithHeader returns r with header key set to value (the first of that name
// replaced, else added). r must not have been sent.
func (r Record) WithHeader(key string, value []byte) Record {
	for i := range r.rec.Headers {
		if r.rec.Headers[i].Key == key {
			r.rec.Headers[i].Value = value
			return r
		}
	}
	r.rec.Headers = append(r.rec.Headers, kgo.RecordHeader{Key: key, Value: value})
	return r
}

// PrepareDeadLetterAgain makes a dead-letter record once more from a stored
// one that still cannot go to its topic: the same key, value, headers and
// timestamp, with HeaderDLQError set to cause and HeaderDLQAttempts to
// attempts. Errors are as for PrepareDeadLetter.
func (s *Sink) PrepareDeadLetterAgain(ctx context.Context, stored *kgo.Record, id string, cause error, attempts int) (Record, error) {
	return s.prepareDeadLetterFrom(ctx, stored, id, noPartition, func(r Record) Record {
		return r.WithHeader(HeaderDLQError, []byte(cause.Error())).WithHeader(HeaderDLQAttempts, []byte(strconv.Itoa(attempts)))
	})
}

// HeaderDLQMovedFrom marks a dead-letter record a redrive copied to the end
// of its partition (PrepareDeadLetterCopy): "partition/offset" of the
// original, which the redrive's progress then counts as done.
const HeaderDLQMovedFrom = "walrelay.dlq.moved_from"

// PrepareDeadLetterCopy makes a copy of the stored dead-letter record for
// the end of its partition of the dead-letter topic: the same partition,
// key, value, headers and timestamp, with HeaderDLQMovedFrom naming the
// original. Errors are as for PrepareDeadLetter.
func (s *Sink) PrepareDeadLetterCopy(ctx context.Context, stored *kgo.Record, id string) (Record, error) {
	from := []byte(strconv.Itoa(int(stored.Partition)) + "/" + strconv.FormatInt(stored.Offset, 10))
	return s.prepareDeadLetterFrom(ctx, stored, id, stored.Partition, func(r Record) Record { return r.WithHeader(HeaderDLQMovedFrom, from) })
}

// prepareDeadLetterFrom makes a dead-letter record of stored for partition
// (noPartition: chosen from the key), changed by edit.
func (s *Sink) prepareDeadLetterFrom(ctx context.Context, stored *kgo.Record, id string, partition int32, edit func(Record) Record) (Record, error) {
	topic := s.cfg.DLQTopic
	out := &kgo.Record{Topic: topic, Partition: partition, Key: stored.Key, Value: stored.Value, Timestamp: stored.Timestamp,
		Headers: slices.Clone(stored.Headers)}
	r := edit(Record{rec: out, id: id})
	fail := func(err error) (Record, error) {
		return Record{}, &ProduceError{Topic: topic, EventID: id, LSN: headerValue(out.Headers, HeaderLSN), Err: fmt.Errorf("dead-letter topic: %w", err)}
	}
	m, err := s.topic(ctx, topic)
	if err != nil {
		return fail(err)
	}
	if err := s.checkSize(ctx, m, out); err != nil {
		return fail(err)
	}
	return r, nil
}
