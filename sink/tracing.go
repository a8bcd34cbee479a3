package sink

import (
	"context"
	"errors"
	"strconv"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/walrelay/walrelay/decoder"
)

// Tracing: with WithTracerProvider, each event's record gets an
// OpenTelemetry producer span ("send <topic>", messaging semantic
// conventions v1.43.0) that
//   - continues the W3C trace context the row carried in its headers column
//     (traceparent, tracestate), or starts a root when the row has none;
//   - starts at the transaction's commit time and ends when Kafka
//     acknowledged the record (acks=all) or failed it (status Error), so its
//     duration is the commit-to-ack latency of the event;
//   - is what the record's traceparent header points at once the span is
//     sampled: consumers continue the trace from walrelay's span. tracestate
//     is carried unchanged.
//
// A span that is not sampled (the sampler said no: an unsampled parent, or
// a root the sampler drops) changes nothing: the headers stay as the row
// had them, and nothing is recorded or exported.
//
// The span is started where the record is built (Prepare), so that the
// size check sees the final headers, and ended in Send's promise. A record
// Prepare refuses after it was built is never sent: its span is never
// ended, hence never exported; a dead-letter record made for the event gets
// a span of its own. franz-go's plugin/kotel is not used: its spans start
// when the client buffers a record (not at commit), cannot take walrelay's
// attributes, and follow semantic conventions v1.18.0.

// Trace context header names (W3C Trace Context), as carried from the
// headers column to the record.
const (
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
)

// Span attributes of walrelay's own, beside the messaging conventions.
const (
	AttrTable     = attribute.Key("walrelay.table")      // schema.table of the outbox row; absent for tableless events
	AttrLSN       = attribute.Key("walrelay.lsn")        // the event's WAL position, as in the walrelay.lsn header
	AttrXID       = attribute.Key("walrelay.xid")        // the transaction id
	AttrEventType = attribute.Key("walrelay.event_type") // the event_type header
	AttrDLQReason = attribute.Key("walrelay.dlq.reason") // a dead-letter record's reason
)

// TracerName is the instrumentation scope of walrelay's spans.
const TracerName = "github.com/walrelay/walrelay/sink"

// WithTracerProvider makes a producer span for each event record with
// tracer provider tp (see above); nil, like leaving the option out, makes
// none and costs nothing. The sink never sets OpenTelemetry's globals.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(s *Sink) {
		s.tracer = nil
		if tp != nil {
			s.tracer = tp.Tracer(TracerName, trace.WithSchemaURL(semconv.SchemaURL))
		}
	}
}

// traceContext is the W3C propagator: no baggage, which walrelay does not
// interpret and which the headers column already carries as it is.
var traceContext propagation.TraceContext

// recordSpan is a record's Context while its span is open: the context of
// that span, typed so that the promise ends only a span the sink started
// (a record without one has the context Send was given).
type recordSpan struct{ context.Context }

// startSpan starts rec's span (ev built rec) and points rec's traceparent
// header at it when it is sampled.
func (s *Sink) startSpan(rec *kgo.Record, ev *decoder.Event) {
	carrier := headerCarrier{rec}
	parent := traceContext.Extract(context.Background(), carrier)
	// A constant name and no attributes until the sampler said yes: most
	// events of a busy database may be unsampled.
	ctx, span := s.tracer.Start(parent, "send", trace.WithSpanKind(trace.SpanKindProducer), trace.WithTimestamp(ev.CommitTime))
	if !span.IsRecording() {
		return
	}
	span.SetName("send " + rec.Topic)
	attrs := make([]attribute.KeyValue, 0, 14)
	attrs = append(attrs,
		semconv.MessagingSystemKafka,
		semconv.MessagingOperationTypeSend,
		semconv.MessagingOperationName("send"),
		semconv.MessagingDestinationName(rec.Topic),
		semconv.MessagingClientID(s.cfg.ClientID),
		semconv.MessagingMessageID(ev.ID),
		semconv.MessagingMessageBodySize(len(rec.Value)),
		AttrLSN.String(ev.LSN.String()),
		AttrXID.Int64(int64(ev.XID)),
		AttrEventType.String(ev.EventType),
	)
	if len(rec.Key) > 0 && utf8.Valid(rec.Key) {
		attrs = append(attrs, semconv.MessagingKafkaMessageKey(string(rec.Key)))
	}
	if rec.Value == nil {
		attrs = append(attrs, semconv.MessagingKafkaMessageTombstone(true))
	}
	if ev.Table != "" {
		attrs = append(attrs, AttrTable.String(ev.Table))
	}
	span.SetAttributes(attrs...)
	rec.Context = recordSpan{ctx}
	if !span.SpanContext().IsSampled() {
		return // recorded for the processors, never exported: no consumer continues it
	}
	// The propagator writes tracestate only when the span has one (its
	// parent's); a row's tracestate that does not belong to the span's
	// trace (no valid traceparent beside it) is not carried further.
	carrier.del(HeaderTracestate)
	traceContext.Inject(ctx, carrier)
}

// spanReason adds a dead-letter record's reason to its span.
func spanReason(rec *kgo.Record, reason string) {
	if rs, ok := rec.Context.(recordSpan); ok {
		trace.SpanFromContext(rs).SetAttributes(AttrDLQReason.String(reason))
	}
}

// endSpan ends rec's span, if the sink started one, with Kafka's answer:
// the partition and offset, or the error.
func endSpan(rec *kgo.Record, err error) {
	rs, ok := rec.Context.(recordSpan)
	if !ok {
		return
	}
	span := trace.SpanFromContext(rs)
	if err != nil {
		span.SetAttributes(semconv.ErrorTypeKey.String(errorType(err)))
		span.SetStatus(codes.Error, err.Error())
	} else {
		span.SetAttributes(
			semconv.MessagingDestinationPartitionID(strconv.Itoa(int(rec.Partition))),
			semconv.MessagingKafkaOffset(int(rec.Offset)),
		)
	}
	span.End()
}

// errorType is a low-cardinality name of a produce failure: Kafka's error
// code name (TOPIC_AUTHORIZATION_FAILED), or the Go type otherwise.
func errorType(err error) string {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Message
	}
	return semconv.ErrorType(err).Value.AsString()
}

// headerCarrier is rec's headers as a propagation.TextMapCarrier. Names
// are compared exactly, as Kafka does.
type headerCarrier struct{ rec *kgo.Record }

// Get returns the first value of key.
func (c headerCarrier) Get(key string) string {
	for _, h := range c.rec.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// Set replaces the first header key and removes any later one (Java's
// consumers read the last), or appends it. The value is a new slice: the
// old one may be the decoder's memory.
func (c headerCarrier) Set(key, value string) {
	for i, h := range c.rec.Headers {
		if h.Key == key {
			c.rec.Headers[i].Value = []byte(value)
			c.delFrom(key, i+1)
			return
		}
	}
	c.rec.Headers = append(c.rec.Headers, kgo.RecordHeader{Key: key, Value: []byte(value)})
}

func (c headerCarrier) Keys() []string {
	keys := make([]string, len(c.rec.Headers))
	for i, h := range c.rec.Headers {
		keys[i] = h.Key
	}
	return keys
}

func (c headerCarrier) del(key string) { c.delFrom(key, 0) }

// delFrom removes the headers key at index from or after. The record's
// header slice is its own (buildRecord makes it), so it is edited in place.
func (c headerCarrier) delFrom(key string, from int) {
	hs := c.rec.Headers
	kept := hs[:from]
	for _, h := range hs[from:] {
		if h.Key != key {
			kept = append(kept, h)
		}
	}
	clear(hs[len(kept):])
	c.rec.Headers = kept
}
