package sink

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walrelay/walrelay/decoder"
)

// ErrTooLarge reports a record larger than its topic accepts.
var ErrTooLarge = errors.New("record larger than the topic's max.message.bytes")

// Dead-letter header names.
const (
	HeaderDLQReason         = "walrelay.dlq.reason"
	HeaderDLQError          = "walrelay.dlq.error"
	HeaderDLQTable          = "walrelay.dlq.table"
	HeaderDLQTopic          = "walrelay.dlq.topic"
	HeaderDLQPayloadOmitted = "walrelay.dlq.payload_omitted_bytes"
	// HeaderDLQCommitTime is the commit time of the event's transaction
	// (RFC 3339, to the microsecond Postgres keeps; the record's Kafka
	// timestamp has milliseconds only): a redrive makes the event again with
	// it.
	HeaderDLQCommitTime = "walrelay.dlq.commit_time"
)

// DefaultDLQTopic is the default dead-letter topic.
const DefaultDLQTopic = "walrelay.dlq"

// recordOverhead bounds the bytes Kafka adds around one record in a batch of
// one (batch header and record framing), so that the uncompressed size check
// never lets through a record the broker refuses.
const recordOverhead = 61 + 32

// recordSize returns the uncompressed size of r as Kafka counts it against
// max.message.bytes, rounded up.
func recordSize(r *kgo.Record) int {
	n := recordOverhead + len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value) + 10
	}
	return n
}

// checkSize refuses a record larger than its topic's max.message.bytes,
// after re-reading the limit if the cached one refuses it: it may have been
// raised since.
func (s *Sink) checkSize(ctx context.Context, m topicMeta, rec *kgo.Record) error {
	size := recordSize(rec)
	if size <= s.sizeLimit(m) {
		return nil
	}
	m, _, err := s.rereadOnMiss(ctx, rec.Topic, m)
	if err != nil {
		return err
	}
	if limit := s.sizeLimit(m); size > limit {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, size, limit)
	}
	return nil
}

func (s *Sink) sizeLimit(m topicMeta) int {
	if m.maxBytes > 0 {
		return int(m.maxBytes)
	}
	return int(s.cfg.BatchMaxBytes)
}

// PrepareDeadLetter makes ev's record for the dead-letter topic with the
// reason in headers: reason (a short code), the error text, the source
// table, the topic the event was meant for, the commit time to the
// microsecond (HeaderDLQCommitTime), and the usual id, event_type,
// aggregate_type, walrelay.lsn and walrelay.xid. The value is the payload,
// or null with walrelay.dlq.payload_omitted_bytes when the payload itself is
// too large for the dead-letter topic. Errors are as for Prepare; one that
// is not IsRetryable means the event cannot be dead-lettered either.
func (s *Sink) PrepareDeadLetter(ctx context.Context, ev *decoder.Event, intended, reason string, cause error) (Record, error) {
	topic := s.cfg.DLQTopic
	m, err := s.topic(ctx, topic)
	if err != nil {
		return Record{}, &ProduceError{Topic: topic, EventID: ev.ID, LSN: ev.LSN.String(), Err: fmt.Errorf("dead-letter topic: %w", err)}
	}
	rec, dropped := s.record(topic, ev)
	rec.Partition = noPartition // the explicit partition was for the intended topic
	if len(rec.Key) == 0 {
		rec.Key = nil
	}
	rec.Headers = append(rec.Headers,
		kgo.RecordHeader{Key: HeaderDLQReason, Value: []byte(reason)},
		kgo.RecordHeader{Key: HeaderDLQError, Value: []byte(cause.Error())},
		kgo.RecordHeader{Key: HeaderDLQTable, Value: []byte(ev.Table)},
		kgo.RecordHeader{Key: HeaderDLQTopic, Value: []byte(intended)},
	)
	if !ev.CommitTime.IsZero() {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderDLQCommitTime, Value: []byte(ev.CommitTime.UTC().Format(time.RFC3339Nano))})
	}
	spanReason(rec, reason)
	if recordSize(rec) > s.sizeLimit(m) {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderDLQPayloadOmitted, Value: []byte(strconv.Itoa(len(rec.Value)))})
		rec.Value = nil
		if err := s.checkSize(ctx, m, rec); err != nil {
			return Record{}, &ProduceError{Topic: topic, EventID: ev.ID, LSN: ev.LSN.String(), Err: fmt.Errorf("dead-letter record: %w", err)}
		}
	}
	if dropped > 0 {
		s.reportReserved(ev)
	}
	return Record{rec: rec, id: ev.ID, lsn: ev.LSN}, nil
}
