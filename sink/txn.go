package sink

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Exactly-once delivery: the records of whole Postgres transactions and a
// checkpoint record (slot -> end LSN) are produced in one Kafka transaction.
// These are the Kafka-side pieces; the relay drives them.

// DefaultCheckpointTopic is the compacted topic holding the checkpoints.
const DefaultCheckpointTopic = "walrelay.checkpoints"

// ErrFenced reports that another producer with the same transactional id
// took over: this process must stop producing.
var ErrFenced = errors.New("fenced by another walrelay with the same transactional id (another instance took over the slot)")

// IsFenced reports whether err means this producer was fenced.
func IsFenced(err error) bool {
	return errors.Is(err, ErrFenced) || errors.Is(err, kerr.ProducerFenced) ||
		errors.Is(err, kerr.InvalidProducerEpoch) || errors.Is(err, kerr.TransactionalIDAuthorizationFailed)
}

// IsTxnAbortable reports whether err, failing a record or a commit of a
// Kafka transaction, is cured by aborting and producing the records again in
// a new transaction (transaction state, producer id, timeouts, retriable
// broker errors). Other record errors are permanent (authorization, corrupt
// or invalid records) and are not retried.
func IsTxnAbortable(err error) bool {
	if kerr.IsRetriable(err) {
		return true
	}
	for _, e := range []error{kerr.TransactionAbortable, kerr.UnknownProducerID, kerr.InvalidProducerIDMapping,
		kerr.InvalidTxnState, kerr.ConcurrentTransactions, kerr.OutOfOrderSequenceNumber, kerr.OperationNotAttempted,
		kerr.InvalidTransactionTimeout, kerr.UnknownServerError,
		kgo.ErrAborting, kgo.ErrRecordTimeout, kgo.ErrRecordRetries, context.DeadlineExceeded} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// WithTransactionalID makes the sink's client transactional: every Send
// must then happen between BeginTxn and EndTxn.
func WithTransactionalID(id string) Option {
	return func(s *Sink) {
		s.transactional = true
		WithClientOpts(kgo.TransactionalID(id), kgo.TransactionTimeout(time.Minute))(s)
	}
}

// InitProducer loads the producer id and epoch of the transactional id. With
// a transactional id, this fences any older producer of the same id and
// finishes (commits or aborts) its pending transaction first, so that a
// checkpoint read afterwards is final.
func (s *Sink) InitProducer(ctx context.Context) error {
	_, _, err := s.client.ProducerID(ctx)
	if err != nil {
		return fmt.Errorf("kafka: init transactional producer: %w", err)
	}
	return nil
}

// ResetProducer replaces the client by a new one with the same options: a
// client whose producer epoch went stale (an end of transaction whose answer
// was lost) is refused with PRODUCER_FENCED forever, while a new client
// gets a new epoch. Call it only when no record is buffered and no other
// goroutine uses the sink.
func (s *Sink) ResetProducer() error {
	// Closed first: client hooks (metrics) register again for the new one.
	s.client.Close()
	cl, err := kgo.NewClient(append(append(s.pingOpts, kgo.AlwaysRetryEOF()), s.extra...)...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	s.client = cl
	s.admin = kadm.NewClient(cl)
	return nil
}

// BeginTxn starts a Kafka transaction.
func (s *Sink) BeginTxn() error { return s.client.BeginTransaction() }

// EndTxn flushes nothing; the caller flushes first. commit false aborts,
// after failing the records still buffered.
func (s *Sink) EndTxn(ctx context.Context, commit bool) error {
	if !commit {
		if err := s.client.AbortBufferedRecords(ctx); err != nil {
			return fmt.Errorf("kafka: abort buffered records: %w", err)
		}
		return s.client.EndTransaction(ctx, kgo.TryAbort)
	}
	return s.client.EndTransaction(ctx, kgo.TryCommit)
}

// CheckpointRecord is the checkpoint record of key (the slot identity) at
// lsn, for the checkpoint topic.
func CheckpointRecord(topic, key string, lsn pglogrepl.LSN) Record {
	v := make([]byte, 8)
	binary.BigEndian.PutUint64(v, uint64(lsn))
	return Record{rec: &kgo.Record{Topic: topic, Key: []byte(key), Value: v}, id: "checkpoint", lsn: lsn}
}

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

// ReadCheckpoint reads the last committed checkpoint of key from topic
// (isolation read_committed, every partition to its last stable offset). ok
// is false when there is none.
func (s *Sink) ReadCheckpoint(ctx context.Context, topic, key string) (lsn pglogrepl.LSN, ok bool, err error) {
	adm := kadm.NewClient(s.client)
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return 0, false, fmt.Errorf("kafka: list offsets of checkpoint topic %q: %w", topic, err)
	}
	want := map[int32]int64{}
	offsets := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
			offsets[o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	if len(want) == 0 {
		return 0, false, nil
	}
	sec, err := securityOpts(s.cfg, os.Getenv, s.log)
	if err != nil {
		return 0, false, err
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(s.cfg.Brokers...),
		kgo.ClientID(s.cfg.ClientID),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}),
	}, sec...)...)
	if err != nil {
		return 0, false, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	idle := 0
	for len(want) > 0 {
		pctx, cancel := context.WithTimeout(ctx, checkpointPoll)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return 0, false, fmt.Errorf("kafka: read checkpoint topic %q: %w", topic, ctx.Err())
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, e error) {
			if !errors.Is(e, context.DeadlineExceeded) {
				ferr = e
			}
		})
		if ferr != nil {
			return 0, false, fmt.Errorf("kafka: read checkpoint topic %q: %w", topic, ferr)
		}
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			n++
			if end, in := want[r.Partition]; in && r.Offset >= end-1 {
				delete(want, r.Partition)
			}
			if r.Attrs.IsControl() || string(r.Key) != key {
				return
			}
			if len(r.Value) == 8 {
				lsn, ok = pglogrepl.LSN(binary.BigEndian.Uint64(r.Value)), true
			}
		})
		if n > 0 {
			idle = 0
			continue
		}
		// Nothing more to fetch below the end: the last offsets were
		// removed by compaction (old transaction markers). The newest
		// record of every key survives compaction, so what was read is the
		// last checkpoint.
		if idle++; idle >= checkpointIdlePolls {
			return lsn, ok, nil
		}
	}
	return lsn, ok, nil
}

// Reading the checkpoint topic stops after checkpointIdlePolls polls of
// checkpointPoll that fetched nothing.
const (
	checkpointPoll      = time.Second
	checkpointIdlePolls = 3
)

// CheckpointKey is the key of a slot's checkpoint: "<system id>/<slot>".
func CheckpointKey(systemID, slot string) string { return systemID + "/" + slot }
