package sink

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kfake"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/walrelay/walrelay/decoder"
)

// discardExporter counts the spans the batch processor hands it: an
// exporter without a network.
type discardExporter struct{ n atomic.Int64 }

func (e *discardExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.n.Add(int64(len(spans)))
	return nil
}
func (e *discardExporter) Shutdown(context.Context) error { return nil }

// BenchmarkPrepareTracing is the per-event cost of tracing on the
// pipeline's goroutine: Prepare (record building, the span's start, the
// traceparent rewrite) and the span's end as Send's promise does it after
// Kafka's ack, with spans going through the batch processor (blocking, so
// none is dropped) to an exporter that discards them. "off" is today's
// Prepare; the others differ by what the row carries and what the sampler
// says.
func BenchmarkPrepareTracing(b *testing.B) {
	const topic = "outbox.event.order"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ev := &decoder.Event{
		Table: "public.outbox", TableName: "outbox", ID: "6f1c2a9e-5b1d-4f6e-9c1a-0d2b3c4d5e6f",
		AggregateType: "order", AggregateID: []byte("order-000042"), EventType: "OrderCreated",
		Payload: make([]byte, 200), CommitTime: time.Unix(1_800_000_000, 0), LSN: pglogrepl.LSN(0x16_B374_D848), XID: 123456,
	}
	parentBasedOff := sdktrace.ParentBased(sdktrace.NeverSample())
	for _, bc := range []struct {
		name        string
		sampler     sdktrace.Sampler // nil: tracing off
		traceparent string
	}{
		{name: "off"},
		{name: "off/row-traceparent", traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{name: "on/no-traceparent", sampler: parentBasedOff},
		{name: "on/unsampled-traceparent", sampler: parentBasedOff, traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"},
		{name: "on/sampled-traceparent", sampler: parentBasedOff, traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{name: "on/no-traceparent-roots-sampled", sampler: sdktrace.ParentBased(sdktrace.AlwaysSample())},
	} {
		b.Run(bc.name, func(b *testing.B) {
			opts := []Option{WithLogger(slog.New(slog.DiscardHandler))}
			exp := &discardExporter{}
			if bc.sampler != nil {
				tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(bc.sampler),
					sdktrace.WithSpanProcessor(sdktrace.NewBatchSpanProcessor(exp, sdktrace.WithBlocking())))
				defer func() { _ = tp.Shutdown(context.Background()) }()
				opts = append(opts, WithTracerProvider(tp))
			}
			s, err := New(Config{Brokers: c.ListenAddrs()}, opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			e := *ev
			if bc.traceparent != "" {
				e.Headers = []decoder.Header{{Key: HeaderTraceparent, Value: []byte(bc.traceparent)}}
			}
			ctx := context.Background()
			if _, err := s.Prepare(ctx, &e); err != nil { // the topic's look-up
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				r, err := s.Prepare(ctx, &e)
				if err != nil {
					b.Fatal(err)
				}
				r.rec.Partition, r.rec.Offset = 1, 42 // as Kafka's ack sets them
				endSpan(r.rec, nil)
			}
		})
	}
}
