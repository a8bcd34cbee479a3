package sink

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// TxnStatus is what CheckTransactions found out about exactly-once delivery.
type TxnStatus struct {
	Coordinator     int32  // broker coordinating the transactional id
	State           string // the id's transaction state; "" when never used
	CheckpointTopic bool   // the checkpoint topic exists
}

// CheckTransactions checks, without producing and without fencing a
// running producer of txnID, that the cluster can run its transactions: a
// transaction coordinator answers for txnID (the transaction state log
// exists or can be created) and walrelay may describe the id. It also says
// whether checkpointTopic exists (walrelay creates it otherwise). Errors
// name the fix.
func (s *Sink) CheckTransactions(ctx context.Context, txnID, checkpointTopic string) (TxnStatus, error) {
	adm := kadm.NewClient(s.client)
	var st TxnStatus
	described, err := adm.DescribeTransactions(ctx, txnID)
	switch {
	case errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		return st, fmt.Errorf("kafka: not authorized for transactional id %q: %w; fix: allow walrelay's principal WRITE and DESCRIBE on TransactionalId %s", txnID, err, txnID)
	case errors.Is(err, kerr.CoordinatorNotAvailable) || errors.Is(err, context.DeadlineExceeded):
		return st, fmt.Errorf("kafka: no transaction coordinator answers for %q: %w; fix: the brokers must be able to create __transaction_state: "+
			"transaction.state.log.replication.factor and transaction.state.log.min.isr must not exceed the number of brokers (both default to 3 and 2)", txnID, err)
	case err != nil:
		return st, fmt.Errorf("kafka: describe transactional id %q: %w", txnID, err)
	}
	if d, err := described.On(txnID, nil); err == nil {
		st.Coordinator = d.Coordinator
		switch {
		case d.Err == nil:
			st.State = d.State
		case errors.Is(d.Err, kerr.TransactionalIDNotFound):
		case errors.Is(d.Err, kerr.TransactionalIDAuthorizationFailed):
			return st, fmt.Errorf("kafka: not authorized for transactional id %q: %w; fix: allow walrelay's principal WRITE and DESCRIBE on TransactionalId %s", txnID, d.Err, txnID)
		default:
			return st, fmt.Errorf("kafka: describe transactional id %q: %w", txnID, d.Err)
		}
	}
	topics, err := adm.ListTopics(ctx, checkpointTopic)
	if err != nil {
		return st, fmt.Errorf("kafka: describe checkpoint topic %q: %w", checkpointTopic, err)
	}
	st.CheckpointTopic = topics.Has(checkpointTopic) && topics[checkpointTopic].Err == nil
	return st, nil
}
