package sink

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DefaultCheckpointTopic is the compacted topic holding the checkpoints.
const DefaultCheckpointTopic = "walrelay.checkpoints"

// Checkpoint is a slot's committed position in one WAL history, as the
// checkpoint topic holds it: every Postgres transaction ending at or before
// LSN on Timeline is in Kafka.
type Checkpoint struct {
	LSN pglogrepl.LSN
	// Timeline is the timeline LSN belongs to; 0 when unknown (a checkpoint
	// written by a release that did not store it: an 8-byte value).
	Timeline int32
}

func (c Checkpoint) String() string {
	if c.Timeline == 0 {
		return c.LSN.String() + " (timeline unknown)"
	}
	return fmt.Sprintf("%s on timeline %d", c.LSN, c.Timeline)
}

// checkpointValue is the JSON value of a checkpoint record. The older value
// was the LSN alone, 8 bytes big-endian; readers of that format ignore this
// one (they find no checkpoint and send again what it covered: duplicates
// for read_committed consumers after a downgrade, never a loss).
type checkpointValue struct {
	LSN      string `json:"lsn"`
	Timeline int32  `json:"timeline"`
}

// CheckpointRecord is the checkpoint record of key (the slot identity, see
// CheckpointKey) for the checkpoint topic.
func CheckpointRecord(topic, key string, cp Checkpoint) Record {
	v, _ := json.Marshal(checkpointValue{LSN: cp.LSN.String(), Timeline: cp.Timeline}) // cannot fail
	return Record{rec: &kgo.Record{Topic: topic, Key: []byte(key), Value: v}, id: "checkpoint", lsn: cp.LSN}
}

// CheckpointFormatError is a record of the slot's key in the checkpoint
// topic that is not a checkpoint walrelay can read.
type CheckpointFormatError struct {
	Topic     string
	Key       string
	Partition int32
	Offset    int64
	Err       error
}

func (e *CheckpointFormatError) Error() string {
	return fmt.Sprintf("checkpoint topic %q: the record of key %q at partition %d offset %d is not a walrelay checkpoint: %v",
		e.Topic, e.Key, e.Partition, e.Offset, e.Err)
}
func (e *CheckpointFormatError) Unwrap() error { return e.Err }

// parseCheckpoint reads a checkpoint record's value in either format.
func parseCheckpoint(v []byte) (Checkpoint, error) {
	if len(v) == 8 {
		return Checkpoint{LSN: pglogrepl.LSN(binary.BigEndian.Uint64(v))}, nil
	}
	var cv checkpointValue
	if err := json.Unmarshal(v, &cv); err != nil {
		return Checkpoint{}, err
	}
	lsn, err := pglogrepl.ParseLSN(cv.LSN)
	if err != nil {
		return Checkpoint{}, err
	}
	if cv.Timeline <= 0 {
		return Checkpoint{}, fmt.Errorf("timeline %d", cv.Timeline)
	}
	return Checkpoint{LSN: lsn, Timeline: cv.Timeline}, nil
}

// CheckpointKey is the key of a slot's checkpoint: "<system id>/<slot>".
func CheckpointKey(systemID, slot string) string { return systemID + "/" + slot }

// EnsureCheckpointTopic creates the compacted checkpoint topic (one
// partition) when it is missing; rf -1 takes the broker's default.
func (s *Sink) EnsureCheckpointTopic(ctx context.Context, topic string, rf int16) error {
	compact := "compact"
	resp, err := s.admin.CreateTopic(ctx, 1, rf, map[string]*string{"cleanup.policy": &compact}, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("kafka: create checkpoint topic %q: %w", topic, err)
	}
	return nil
}

// Retry wait of the checkpoint read while a broker cannot serve a fetch.
const (
	checkpointRetryMin = 50 * time.Millisecond
	checkpointRetryMax = time.Second
)

// ReadCheckpoint returns the last committed checkpoint of key in topic; ok is
// false when the topic holds none. It reads every partition from its log
// start to the high watermark listed when it starts, uncommitted records
// included, and keeps a checkpoint only once the commit marker of its
// transaction is read: another producer's open transaction (another slot's
// walrelay on the shared topic) holds nothing back. Call it after
// InitProducer, which ends the transactional id's own pending transaction,
// so that every checkpoint of key below the high watermark has its marker.
//
// It returns only after reading to the end, or with an error: a slow or
// unavailable broker is waited for (retried until ctx ends), never taken for
// an empty topic. A record of key that is no checkpoint is a
// *CheckpointFormatError.
func (s *Sink) ReadCheckpoint(ctx context.Context, topic, key string) (cp Checkpoint, ok bool, err error) {
	rec, err := s.readLastOfKey(ctx, topic, key)
	if err != nil || rec == nil {
		return Checkpoint{}, false, err
	}
	if cp, err = parseCheckpoint(rec.Value); err != nil {
		return Checkpoint{}, false, &CheckpointFormatError{Topic: topic, Key: key, Partition: rec.Partition, Offset: rec.Offset, Err: err}
	}
	return cp, true, nil
}

// readLastOfKey returns the last committed record of key in topic (nil when
// there is none), read as ReadCheckpoint says.
func (s *Sink) readLastOfKey(ctx context.Context, topic, key string) (*kgo.Record, error) {
	fail := func(err error) (*kgo.Record, error) {
		return nil, fmt.Errorf("kafka: read checkpoint topic %q: %w", topic, err)
	}
	ends, err := s.admin.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fail(fmt.Errorf("list end offsets: %w", err))
	}
	starts, err := s.admin.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return fail(fmt.Errorf("list start offsets: %w", err))
	}
	var last *kgo.Record
	var ferr error
	ends.Each(func(o kadm.ListedOffset) {
		start, _ := starts.Lookup(topic, o.Partition)
		if ferr != nil || o.Offset <= start.Offset {
			return
		}
		pr := partitionReader{s: s, topic: topic, partition: o.Partition, start: start.Offset, end: o.Offset, key: key}
		rec, err := pr.read(ctx)
		switch {
		case err != nil:
			ferr = err
		case rec != nil && (last == nil || rec.Timestamp.After(last.Timestamp)):
			// One partition holds the key (the topic is made with one; the
			// newest across several, should an operator have added some).
			last = rec
		}
	})
	if ferr != nil {
		return fail(ferr)
	}
	return last, nil
}

// partitionReader reads one partition of the checkpoint topic up to end.
type partitionReader struct {
	s         *Sink
	topic     string
	partition int32
	start     int64 // log start offset when the read began
	end       int64 // high watermark when the read began
	key       string

	leader  int32
	topicID [16]byte
	known   bool // leader and topicID are loaded
}

// read returns the last committed record of key in the partition (nil when
// there is none).
func (r *partitionReader) read(ctx context.Context) (last *kgo.Record, err error) {
	open := map[int64]*kgo.Record{} // producer id -> its open transaction's last record of key
	wait := checkpointRetryMin
	retry := func(cause error) error {
		r.known = false
		t := time.NewTimer(wait*4/5 + rand.N(wait*2/5)) // jittered: readers of a fleet spread out
		defer t.Stop()
		wait = min(2*wait, checkpointRetryMax)
		select {
		case <-ctx.Done():
			return fmt.Errorf("partition %d: %w (last error: %w)", r.partition, ctx.Err(), cause)
		case <-t.C:
			return nil
		}
	}
	for offset := r.start; offset < r.end; {
		if !r.known {
			if err := r.locate(ctx); err != nil {
				if rerr := retry(err); rerr != nil {
					return nil, rerr
				}
				continue
			}
		}
		rp, throttled, err := r.fetch(ctx, offset)
		if err == nil && throttled > 0 && len(rp.RecordBatches) == 0 {
			err = fmt.Errorf("fetch throttled for %s", throttled)
			wait = max(wait, throttled)
		}
		if err == nil {
			err = kerr.ErrorForCode(rp.ErrorCode)
		}
		if errors.Is(err, kerr.OffsetOutOfRange) && rp.LogStartOffset > offset {
			// The log start moved past offset while reading (retention).
			offset = rp.LogStartOffset
			continue
		}
		if err == nil && len(rp.RecordBatches) == 0 && rp.HighWatermark < r.end {
			// A new leader that has not caught up with the end yet.
			err = fmt.Errorf("high watermark %d below %d", rp.HighWatermark, r.end)
		}
		if err != nil {
			if rerr := retry(err); rerr != nil {
				return nil, rerr
			}
			continue
		}
		wait = checkpointRetryMin
		if len(rp.RecordBatches) == 0 {
			// Nothing at or after offset below the high watermark: the rest
			// was removed by compaction (aborted records, old markers).
			break
		}
		fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
			KeepControlRecords: true, Offset: offset, IsolationLevel: kgo.ReadUncommitted(),
			Topic: r.topic, Partition: r.partition,
		}, rp, kgo.DefaultDecompressor(), nil)
		if fp.Err != nil {
			if rerr := retry(fp.Err); rerr != nil {
				return nil, rerr
			}
			continue
		}
		for _, rec := range fp.Records {
			switch {
			case rec.Offset >= r.end:
			case rec.Attrs.IsControl():
				txnLast := open[rec.ProducerID]
				delete(open, rec.ProducerID)
				if txnLast != nil && controlCommits(rec.Key) {
					last = txnLast
				}
			case string(rec.Key) != r.key:
			case rec.Attrs.IsTransactional():
				open[rec.ProducerID] = rec
			default: // written outside a transaction: committed as it stands
				last = rec
			}
		}
		if next <= offset {
			return nil, fmt.Errorf("partition %d: fetch at offset %d made no progress", r.partition, offset)
		}
		offset = next
	}
	return last, nil
}

// controlCommits reports whether a control record's key is a commit marker
// (version int16, type int16: 0 abort, 1 commit).
func controlCommits(key []byte) bool {
	return len(key) >= 4 && binary.BigEndian.Uint16(key[2:4]) == 1
}

// locate loads the partition's leader and the topic's id.
func (r *partitionReader) locate(ctx context.Context) error {
	md, err := r.s.admin.Metadata(ctx, r.topic)
	if err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	td, in := md.Topics[r.topic]
	if !in {
		return fmt.Errorf("metadata: topic missing")
	}
	if td.Err != nil {
		return fmt.Errorf("metadata: %w", td.Err)
	}
	pd, in := td.Partitions[r.partition]
	if !in {
		return fmt.Errorf("metadata: partition %d missing", r.partition)
	}
	if pd.Err != nil || pd.Leader < 0 {
		return fmt.Errorf("metadata: partition %d has no leader: %w", r.partition, pd.Err)
	}
	r.leader, r.topicID, r.known = pd.Leader, td.ID, true
	return nil
}

// fetch sends one fetch at offset to the partition's leader, answered at
// once (no wait for new data), and returns the partition's part of the
// response and the throttle time the broker asked for.
func (r *partitionReader) fetch(ctx context.Context, offset int64) (*kmsg.FetchResponseTopicPartition, time.Duration, error) {
	req := kmsg.NewPtrFetchRequest()
	req.MaxWaitMillis = 0
	req.MinBytes = 0
	req.MaxBytes = 16 << 20
	req.IsolationLevel = 0 // read_uncommitted: markers are read here
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = r.topic, r.topicID
	rpart := kmsg.NewFetchRequestTopicPartition()
	rpart.Partition, rpart.FetchOffset, rpart.PartitionMaxBytes = r.partition, offset, 16<<20
	rpart.LogStartOffset = -1
	rt.Partitions = append(rt.Partitions, rpart)
	req.Topics = append(req.Topics, rt)
	kresp, err := r.s.client.Broker(int(r.leader)).Request(ctx, req)
	if err != nil {
		return nil, 0, err
	}
	resp := kresp.(*kmsg.FetchResponse)
	throttled := time.Duration(resp.ThrottleMillis) * time.Millisecond
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return nil, throttled, err
	}
	for i := range resp.Topics {
		t := &resp.Topics[i]
		if t.Topic != r.topic && t.TopicID != r.topicID {
			continue
		}
		for j := range t.Partitions {
			if t.Partitions[j].Partition == r.partition {
				return &t.Partitions[j], throttled, nil
			}
		}
	}
	return nil, throttled, fmt.Errorf("fetch response without partition %d", r.partition)
}
