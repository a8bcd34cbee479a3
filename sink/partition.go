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
	if r.Partition >= 0 {
		// Prepare checked it against the topic and waited for the
		// producer's metadata to have it; should it still be out of
		// range, the record fails instead of going elsewhere.
		return int(r.Partition)
	}
	return tp.byKey.Partition(r, n)
}

// checkPartition refuses an explicit partition the topic does not have,
// after re-reading the partition count if the cached one refuses it: a topic
// may have gained partitions since.
func (s *Sink) checkPartition(ctx context.Context, m topicMeta, rec *kgo.Record) error {
	if rec.Partition < 0 {
		return nil
	}
	if int(rec.Partition) >= m.partitions {
		var err error
		if m, _, err = s.rereadOnMiss(ctx, rec.Topic, m); err != nil {
			return err
		}
	}
	if int(rec.Partition) >= m.partitions {
		return fmt.Errorf("%w: partition %d, topic %s has %d", ErrNoSuchPartition, rec.Partition, rec.Topic, m.partitions)
	}
	return s.awaitClientPartition(ctx, rec.Topic, rec.Partition)
}
