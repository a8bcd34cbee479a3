package sink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Exactly-once delivery: the records of whole Postgres transactions and a
// checkpoint record (slot -> end LSN) are produced in one Kafka transaction.
// These are the Kafka-side pieces; the relay drives them.

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

// TransactionTimeout returns the transaction timeout the producer asks the
// broker for (0 without a transactional id): a transaction open longer is
// aborted by the broker. Safe for concurrent use.
func (s *Sink) TransactionTimeout() time.Duration {
	if !s.transactional {
		return 0
	}
	d, _ := s.client.OptValue(kgo.TransactionTimeout).(time.Duration)
	return d
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
