package sink_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/walrelay/walrelay/sink"
	"github.com/walrelay/walrelay/sink/schema"
)

// TestExplicitPartition: an event with a partition from the outbox's
// partition column lands there; one the topic lacks is refused (the relay
// dead-letters it); events without one go by key hash, consistently.
func TestExplicitPartition(t *testing.T) {
	t.Parallel()
	const topic = "outbox.event.order"
	c := newCluster(t, kfake.SeedTopics(3, topic))
	s := newSink(t, sink.Config{Brokers: c.ListenAddrs()})
	ctx := testCtx(t)

	a := newAcks(8)
	var ids []string
	for i := 0; i < 4; i++ {
		ev := event(i, "order", "same-key")
		if i < 2 {
			ev.Partition, ev.HasPartition = 2, true
		}
		ids = append(ids, ev.ID)
		if err := s.Produce(ctx, ev, a.done(ev.ID)); err != nil {
			t.Fatal(err)
		}
	}
	allOK(t, a.wait(t, 4), ids)
	recs := consume(t, c, topic, 4)
	byID := map[string]int32{}
	for _, r := range recs {
		for _, h := range r.Headers {
			if h.Key == sink.HeaderID {
				byID[string(h.Value)] = r.Partition
			}
		}
	}
	if byID[ids[0]] != 2 || byID[ids[1]] != 2 {
		t.Fatalf("explicit partition not honoured: %v", byID)
	}
	if byID[ids[2]] != byID[ids[3]] {
		t.Fatalf("same key went to different partitions: %v", byID)
	}

	bad := event(9, "order", "k")
	bad.Partition, bad.HasPartition = 7, true
	err := s.Produce(ctx, bad, a.done(bad.ID))
	var pe *sink.ProduceError
	if !errors.Is(err, sink.ErrNoSuchPartition) || !errors.As(err, &pe) || pe.EventID != bad.ID {
		t.Fatalf("partition 7 of 3: got %v", err)
	}
	a.none(t)
}

// TestEncodedKeyPartitionedByAggregateID: with a key schema the record's
// key holds the Confluent frame (magic byte, schema id, body), but the
// record still goes to the partition of the aggregate id, by Kafka's default
// partitioner formula (murmur2 of the id's bytes, positive, modulo the
// partition count): the same as without a key schema, and unchanged when a
// new version of the key schema (a new id) comes into use.
func TestEncodedKeyPartitionedByAggregateID(t *testing.T) {
	t.Parallel()
	const topic, partitions = "orders", 6
	c := newCluster(t, kfake.SeedTopics(partitions, topic))
	reg := srfake.New()
	t.Cleanup(reg.Close)
	dir := t.TempDir()
	write := func(name, text string) string {
		file := filepath.Join(dir, name)
		if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return file
	}
	value := write("happened.avsc", seqAvsc)
	keyV1 := write("key1.avsc", `"string"`)
	keyV2 := write("key2.avsc", `{"type":"string","doc":"the order's id"}`)
	sinkWith := func(key string, opts ...sink.Option) *sink.Sink {
		var rule schema.Rule
		rule.Table, rule.Value.File, rule.Key.File = "public.outbox", value, key
		cfg := sink.Config{Brokers: c.ListenAddrs(), Topic: topic}
		if key != "" {
			cfg.Schema = schema.Config{URLs: []string{reg.URL()}, Rules: []schema.Rule{rule}}
		}
		return newSink(t, cfg, append(opts, fastRetries)...)
	}
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx := testCtx(t)
	const aggregates = 12
	runs := []struct {
		name string
		s    *sink.Sink
	}{{"no key schema", newSink(t, sink.Config{Brokers: c.ListenAddrs(), Topic: topic}, fastRetries)},
		{"key schema v1", sinkWith(keyV1)}, {"key schema v2", sinkWith(keyV2)},
		{"key schema v2, traced", sinkWith(keyV2, sink.WithTracerProvider(tp))}}
	for r, run := range runs {
		a := newAcks(aggregates)
		var ids []string
		for i := range aggregates {
			ev := event(r*aggregates+i, "order", fmt.Sprintf("order-%d", i))
			ids = append(ids, ev.ID)
			if err := run.s.Produce(ctx, ev, a.done(ev.ID)); err != nil {
				t.Fatalf("%s: %v", run.name, err)
			}
		}
		allOK(t, a.wait(t, aggregates), ids)
	}

	keyIDs := map[int]bool{}
	moved := 0
	for _, rec := range consume(t, c, topic, len(runs)*aggregates) {
		var seq int
		if _, err := fmt.Sscanf(headerMap(rec.Headers)[sink.HeaderID], "ev-%d", &seq); err != nil {
			t.Fatalf("record id %q: %v", headerMap(rec.Headers)[sink.HeaderID], err)
		}
		run, agg := runs[seq/aggregates].name, fmt.Sprintf("order-%d", seq%aggregates)
		if run != "no key schema" {
			id, _, err := (&sr.ConfluentHeader{}).DecodeID(rec.Key)
			if err != nil || bytes.Equal(rec.Key, []byte(agg)) {
				t.Fatalf("%s: key % x of %s is not Confluent-framed (%v)", run, rec.Key, agg, err)
			}
			keyIDs[id] = true
		}
		if want := kafkaPartition([]byte(agg), partitions); rec.Partition != want {
			moved++
			t.Errorf("%s: aggregate %s on partition %d, want %d (murmur2 of the aggregate id)", run, agg, rec.Partition, want)
		}
	}
	if n := len(spans.GetSpans()); n != aggregates {
		t.Errorf("%d spans ended, want %d (one per traced record)", n, aggregates)
	}
	if len(keyIDs) != 2 {
		t.Fatalf("key schema ids %v: want two versions", keyIDs)
	}
	if moved > 0 {
		t.Fatalf("%d of %d records not on their aggregate's partition", moved, len(runs)*aggregates)
	}
}

// kafkaPartition is the partition Kafka's default partitioner (the Java
// client's BuiltInPartitioner.partitionForKey) gives key among n:
// toPositive(murmur2(key)) % n.
func kafkaPartition(key []byte, n int) int32 {
	return int32(murmur2(key)&0x7fffffff) % int32(n)
}

// murmur2 is Kafka's Utils.murmur2, written out here as the reference the
// partitioner is checked against (TestMurmur2Reference).
func murmur2(data []byte) int32 {
	const seed, m, r = uint32(0x9747b28c), uint32(0x5bd1e995), 24
	n := len(data)
	h := seed ^ uint32(n)
	for i := 0; i+4 <= n; i += 4 {
		k := uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16 | uint32(data[i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	tail := data[n&^3:]
	switch len(tail) {
	case 3:
		h ^= uint32(tail[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(tail[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(tail[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// TestMurmur2Reference: the test's murmur2 gives the values of Kafka's own
// UtilsTest.testMurmur2.
func TestMurmur2Reference(t *testing.T) {
	for key, want := range map[string]int32{
		"21": -973932308, "foobar": -790332482, "a-little-bit-long-string": -985981536,
		"a-little-bit-longer-string": -1486304829, "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971, "abc": 479470107,
	} {
		if got := murmur2([]byte(key)); got != want {
			t.Errorf("murmur2(%q) = %d, want %d", key, got, want)
		}
	}
}
