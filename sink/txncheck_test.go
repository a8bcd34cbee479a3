package sink_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walrelay/walrelay/sink"
)

// TestCheckTransactions: the doctor's exactly-once check reports the
// coordinator and state of the transactional id without fencing its
// producer, whether the checkpoint topic exists, and names the fix when no
// coordinator answers or the id is not authorized.
func TestCheckTransactions(t *testing.T) {
	const topic = "walrelay.checkpoints"
	t.Run("usable", func(t *testing.T) {
		c := newCluster(t)
		ctx := testCtx(t)
		s := newSink(t, sink.Config{Brokers: c.ListenAddrs()}, fastRetries)
		st, err := s.CheckTransactions(ctx, "walrelay-s", topic)
		if err != nil || st.State != "" || st.CheckpointTopic {
			t.Fatalf("unused id: %+v, %v; want no state and no checkpoint topic", st, err)
		}
		p := txnSink(t, c.ListenAddrs(), "walrelay-s")
		if err := p.InitProducer(ctx); err != nil {
			t.Fatal(err)
		}
		if err := p.EnsureCheckpointTopic(ctx, topic, -1); err != nil {
			t.Fatal(err)
		}
		if err := sendCheckpoint(t, ctx, p, topic, "1/s", 0x100, true); err != nil {
			t.Fatal(err)
		}
		// A new client, as each doctor run has: the first one may answer
		// from its cached metadata, where the topic is still missing.
		s2 := newSink(t, sink.Config{Brokers: c.ListenAddrs()}, fastRetries)
		st, err = s2.CheckTransactions(ctx, "walrelay-s", topic)
		if err != nil || st.State == "" || !st.CheckpointTopic {
			t.Fatalf("used id: %+v, %v; want a state and the checkpoint topic", st, err)
		}
		// The check fenced nothing: the producer still commits.
		if err := sendCheckpoint(t, ctx, p, topic, "1/s", 0x200, true); err != nil {
			t.Fatalf("commit after the check: %v", err)
		}
	})
	t.Run("new coordinator", func(t *testing.T) {
		// A brand-new cluster answers COORDINATOR_NOT_AVAILABLE until it
		// created __transaction_state: the check asks again.
		c := newCluster(t)
		left := 3
		c.ControlKey(int16(kmsg.FindCoordinator), func(req kmsg.Request) (kmsg.Response, error, bool) {
			if left == 0 {
				return nil, nil, false
			}
			left--
			c.KeepControl()
			r := req.(*kmsg.FindCoordinatorRequest)
			resp := r.ResponseKind().(*kmsg.FindCoordinatorResponse)
			for _, k := range r.CoordinatorKeys {
				resp.Coordinators = append(resp.Coordinators, kmsg.FindCoordinatorResponseCoordinator{Key: k, ErrorCode: kerr.CoordinatorNotAvailable.Code, NodeID: -1})
			}
			if len(r.CoordinatorKeys) == 0 {
				resp.ErrorCode, resp.NodeID = kerr.CoordinatorNotAvailable.Code, -1
			}
			return resp, nil, true
		})
		s := newSink(t, sink.Config{Brokers: c.ListenAddrs()}, fastRetries)
		if _, err := s.CheckTransactions(testCtx(t), "walrelay-s", topic); err != nil {
			t.Fatalf("CheckTransactions on a coordinator that comes up: %v", err)
		}
	})
	for _, tc := range []struct {
		name string
		code int16
		want string
	}{
		{"no coordinator", kerr.CoordinatorNotAvailable.Code, "transaction.state.log.replication.factor"},
		{"not authorized", kerr.TransactionalIDAuthorizationFailed.Code, "WRITE and DESCRIBE on TransactionalId walrelay-s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			c.ControlKey(int16(kmsg.FindCoordinator), func(req kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				r := req.(*kmsg.FindCoordinatorRequest)
				resp := r.ResponseKind().(*kmsg.FindCoordinatorResponse)
				for _, k := range r.CoordinatorKeys {
					resp.Coordinators = append(resp.Coordinators, kmsg.FindCoordinatorResponseCoordinator{Key: k, ErrorCode: tc.code, NodeID: -1})
				}
				if len(r.CoordinatorKeys) == 0 {
					resp.ErrorCode, resp.NodeID = tc.code, -1
				}
				return resp, nil, true
			})
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			s := newSink(t, sink.Config{Brokers: c.ListenAddrs()}, fastRetries)
			_, err := s.CheckTransactions(ctx, "walrelay-s", topic)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CheckTransactions: %v; want an error naming %q", err, tc.want)
			}
		})
	}
}
