package sink_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walrelay/walrelay/sink"
)

// missWait outlasts the sink's rate limit on re-reading a topic whose cached
// facts refuse a record (missRefreshEvery).
const missWait = 300 * time.Millisecond

func adminFor(t *testing.T, c *kfake.Cluster) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// TestPartitionsAddedSeenWithoutRestart: a topic that
// gained partitions while the sink runs takes records for the new
// partitions, without a restart; before the partitions exist such a record
// is refused (the relay dead-letters it as bad_partition).
func TestPartitionsAddedSeenWithoutRestart(t *testing.T) {
	t.Parallel()
	const topic = "outbox.event.order"
	c := newCluster(t, kfake.SeedTopics(1, topic))
	s := newSink(t, sink.Config{Brokers: c.ListenAddrs()})
	ctx := testCtx(t)
	a := newAcks(8)

	// The producer knows the topic with one partition.
	first := event(1, "order", "o-1")
	if err := s.Produce(ctx, first, a.done(first.ID)); err != nil {
		t.Fatal(err)
	}
	allOK(t, a.wait(t, 1), []string{first.ID})

	early := event(2, "order", "o-2")
	early.Partition, early.HasPartition = 2, true
	if err := s.Produce(ctx, early, a.done(early.ID)); !errors.Is(err, sink.ErrNoSuchPartition) {
		t.Fatalf("partition 2 of a 1-partition topic: Produce = %v, want ErrNoSuchPartition", err)
	}

	adm := adminFor(t, c)
	if _, err := adm.UpdatePartitions(ctx, 3, topic); err != nil {
		t.Fatalf("add partitions: %v", err)
	}
	time.Sleep(missWait)

	var ids []string
	for i := 3; i < 6; i++ {
		ev := event(i, "order", "o-3")
		ev.Partition, ev.HasPartition = 2, true
		ids = append(ids, ev.ID)
		if err := s.Produce(ctx, ev, a.done(ev.ID)); err != nil {
			t.Fatalf("partition 2 after the topic grew to 3: Produce %s = %v, want it produced", ev.ID, err)
		}
	}
	allOK(t, a.wait(t, len(ids)), ids)
	a.none(t)
	recs := consume(t, c, topic, 1+len(ids))
	for _, r := range recs {
		if id := headerMap(r.Headers)[sink.HeaderID]; id != first.ID && r.Partition != 2 {
			t.Errorf("%s landed in partition %d, want its explicit partition 2", id, r.Partition)
		}
	}
}

// TestMaxMessageBytesRaisedSeenWithoutRestart: a topic's
// max.message.bytes raised while the sink runs is honoured: a record above
// the old limit is refused before the change and produced after it.
func TestMaxMessageBytesRaisedSeenWithoutRestart(t *testing.T) {
	t.Parallel()
	const topic = "outbox.event.order"
	c := newCluster(t)
	adm := adminFor(t, c)
	ctx := testCtx(t)
	small := "2000"
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": &small}, topic); err != nil {
		t.Fatal(err)
	}
	s := newSink(t, sink.Config{Brokers: c.ListenAddrs()})
	a := newAcks(4)

	big := event(1, "order", "o-1")
	big.Payload = bytes.Repeat([]byte("x"), 5000)
	if err := s.Produce(ctx, big, a.done(big.ID)); !errors.Is(err, sink.ErrTooLarge) {
		t.Fatalf("5000 bytes under max.message.bytes=2000: Produce = %v, want ErrTooLarge", err)
	}
	larger := "100000"
	rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &larger}}, topic)
	if err == nil {
		_, err = rs.On(topic, nil)
	}
	if err != nil {
		t.Fatalf("raise max.message.bytes: %v", err)
	}
	time.Sleep(missWait)

	if err := s.Produce(ctx, big, a.done(big.ID)); err != nil {
		t.Fatalf("5000 bytes after max.message.bytes was raised to %s: Produce = %v, want it produced", larger, err)
	}
	allOK(t, a.wait(t, 1), []string{big.ID})
	if got := s.MaxMessageBytes(topic); got != 100000 {
		t.Errorf("MaxMessageBytes = %d, want 100000", got)
	}
	consume(t, c, topic, 1)
}
