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
// the murmur2 hash of its aggregate id, as Kafka's default partitioner
// hashes a key, so that one aggregate maps to one partition. The aggregate
// id is the record's key, or, when a key schema encoded the key, the id
// keepPartitionKey put in the record's Context: the encoded key carries the
// schema's id, and hashing it would move every aggregate when a new version
// of the key schema comes into use (docs/schema-registry.md).
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
	if r.Context != nil {
		if key, ok := r.Context.Value(partitionKey{}).([]byte); ok {
			return tp.byKey.Partition(&kgo.Record{Key: key}, n)
		}
	}
	return tp.byKey.Partition(r, n)
}

// partitionKey is the context key of a record's aggregate id when its Key
// holds something else (keepPartitionKey).
type partitionKey struct{}

// keepPartitionKey makes rec go to the partition of key, its aggregate id,
// whatever rec.Key becomes. It keeps rec's span (tracing.go) in place.
func keepPartitionKey(rec *kgo.Record, key []byte) {
	if rs, ok := rec.Context.(recordSpan); ok {
		rec.Context = recordSpan{context.WithValue(rs.Context, partitionKey{}, key)}
		return
	}
	parent := rec.Context
	if parent == nil {
		parent = context.Background()
	}
	rec.Context = context.WithValue(parent, partitionKey{}, key)
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
