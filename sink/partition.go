package sink

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrNoSuchPartition reports an explicit partition the topic does not have.
var ErrNoSuchPartition = errors.New("explicit partition out of range")

// noPartition marks a record partitioned by its key.
const noPartition = -1

// partitioner sends a record with an explicit partition (Record.Partition
// >= 0, from the outbox's partition column) there, and every other record by
// the murmur2 hash of its key, as Kafka's Java client does, so that one
// aggregate maps to one partition.
type partitioner struct{ byKey kgo.Partitioner }

func newPartitioner() kgo.Partitioner {
	return partitioner{byKey: kgo.StickyKeyPartitioner(nil)}
}

func (p partitioner) ForTopic(topic string) kgo.TopicPartitioner {
	return topicPartitioner{byKey: p.byKey.ForTopic(topic)}
}

type topicPartitioner struct{ byKey kgo.TopicPartitioner }

func (tp topicPartitioner) RequiresConsistency(r *kgo.Record) bool {
	return r.Partition >= 0 || tp.byKey.RequiresConsistency(r)
}

func (tp topicPartitioner) Partition(r *kgo.Record, n int) int {
	if r.Partition >= 0 && int(r.Partition) < n {
		return int(r.Partition)
	}
	return tp.byKey.Partition(r, n)
}

// checkPartition refuses an explicit partition the topic does not have. The
// partition count is looked up once per topic.
func (s *Sink) checkPartition(ctx context.Context, rec *kgo.Record) error {
	if rec.Partition < 0 {
		return nil
	}
	s.mu.Lock()
	n, ok := s.partitions[rec.Topic]
	s.mu.Unlock()
	if !ok {
		details, err := s.admin.ListTopics(ctx, rec.Topic)
		if err != nil {
			return fmt.Errorf("look up partitions: %w", err)
		}
		d, found := details[rec.Topic]
		if !found || d.Err != nil {
			return fmt.Errorf("look up partitions of %s: %v", rec.Topic, d.Err)
		}
		n = len(d.Partitions)
		s.mu.Lock()
		s.partitions[rec.Topic] = n
		s.mu.Unlock()
	}
	if int(rec.Partition) >= n {
		return fmt.Errorf("%w: partition %d, topic %s has %d", ErrNoSuchPartition, rec.Partition, rec.Topic, n)
	}
	return nil
}
