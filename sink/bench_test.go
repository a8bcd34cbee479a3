package sink_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/sink"
)

func benchEvent(extraHeaders int) *decoder.Event {
	ev := &decoder.Event{
		Table:         "public.outbox",
		TableName:     "outbox",
		ID:            "6f1c2a9e-5b1d-4f6e-9c1a-0d2b3c4d5e6f",
		AggregateType: "order",
		AggregateID:   []byte("order-000042"),
		EventType:     "OrderCreated",
		Payload:       bytes.Repeat([]byte("x"), 200),
		CommitTime:    time.Unix(1_800_000_000, 0),
		LSN:           pglogrepl.LSN(0x16_B374_D848),
		XID:           123456,
	}
	for i := range extraHeaders {
		ev.Headers = append(ev.Headers, decoder.Header{
			Key:   fmt.Sprintf("h%d", i),
			Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
		})
	}
	return ev
}

var benchRecord *kgo.Record

func BenchmarkBuildRecord(b *testing.B) {
	for _, extra := range []int{0, 2} {
		b.Run(fmt.Sprintf("headers=%d", extra), func(b *testing.B) {
			ev := benchEvent(extra)
			b.ReportAllocs()
			for b.Loop() {
				benchRecord = sink.BuildRecord("outbox.event.order", ev)
			}
		})
	}
}

// BenchmarkProduceKfake produces b.N events (200 B payloads, 64 aggregates,
// 3 partitions) to an in-process kfake broker and waits for every ack.
func BenchmarkProduceKfake(b *testing.B) {
	const topic = "outbox.event.order"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	s := newSink(b, sink.Config{Brokers: c.ListenAddrs()})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := s.Ping(ctx); err != nil {
		b.Fatal(err)
	}

	evs := make([]*decoder.Event, 64)
	for i := range evs {
		evs[i] = benchEvent(0)
		evs[i].AggregateID = fmt.Appendf(nil, "order-%06d", i)
	}
	var (
		wg     sync.WaitGroup
		failed atomic.Int64
	)
	done := func(err error) {
		if err != nil {
			failed.Add(1)
		}
		wg.Done()
	}
	// Warm up: topic lookup, producer id, connections.
	wg.Add(1)
	if err := s.Produce(ctx, evs[0], done); err != nil {
		b.Fatal(err)
	}
	wg.Wait()

	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		wg.Add(1)
		if err := s.Produce(ctx, evs[i%len(evs)], done); err != nil {
			b.Fatal(err)
		}
	}
	wg.Wait()
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d records failed", n)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
}
