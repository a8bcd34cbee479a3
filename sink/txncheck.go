package sink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// TxnStatus is what CheckTransactions found out about exactly-once delivery.
type TxnStatus struct {
	Coordinator     int32  // broker coordinating the transactional id
	State           string // the id's transaction state; "" when never used
	CheckpointTopic bool   // the checkpoint topic exists
}

// coordinatorWait is how long CheckTransactions asks again while no
// transaction coordinator is available (a new cluster's first minutes).
const coordinatorWait = 15 * time.Second

// CheckTransactions checks, without producing and without fencing a
// running producer of txnID, that the cluster can run its transactions: a
// transaction coordinator answers for txnID (the transaction state log
// exists or can be created) and walrelay may describe the id. It also says
// whether checkpointTopic exists (walrelay creates it otherwise). While no
// coordinator is available it asks again, for up to coordinatorWait within
// ctx. Errors name the fix.
func (s *Sink) CheckTransactions(ctx context.Context, txnID, checkpointTopic string) (TxnStatus, error) {
	adm := kadm.NewClient(s.client)
	var st TxnStatus
	// A brand-new cluster creates __transaction_state on the first request
	// for a coordinator and answers COORDINATOR_NOT_AVAILABLE until then: ask
	// again for a while before blaming its settings.
	var described kadm.DescribedTransactions
	var err error
	start, wait := time.Now(), 200*time.Millisecond
	for {
		described, err = adm.DescribeTransactions(ctx, txnID)
		if !errors.Is(err, kerr.CoordinatorNotAvailable) && !errors.Is(err, kerr.CoordinatorLoadInProgress) || time.Since(start) > coordinatorWait {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
			wait = min(2*wait, 2*time.Second)
			continue
		}
		break
	}
	switch {
	case errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		return st, fmt.Errorf("kafka: not authorized for transactional id %q: %w; fix: allow walrelay's principal WRITE and DESCRIBE on TransactionalId %s", txnID, err, txnID)
	case errors.Is(err, kerr.CoordinatorNotAvailable) || errors.Is(err, context.DeadlineExceeded):
		return st, fmt.Errorf("kafka: no transaction coordinator answered for %q within %s: %w; fix: a new cluster creates __transaction_state on first use, so run doctor again; "+
			"if it still fails, the brokers cannot create it: transaction.state.log.replication.factor and transaction.state.log.min.isr must not exceed the number of brokers (they default to 3 and 2)",
			txnID, time.Since(start).Round(time.Second), err)
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
