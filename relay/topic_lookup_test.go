package relay

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walrelay/walrelay/internal/testwait"
	"github.com/walrelay/walrelay/sink"
	"github.com/walrelay/walrelay/test/relaytest"
)

func newKfake(t *testing.T) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// notConfirmed fails t if the slot confirmed the end of a transaction that
// committed before end (the WAL insert position read after its COMMIT).
// Other databases of the cluster may write WAL meanwhile, and the relay may
// confirm positions of theirs before the transaction; comparing with the
// position before the transaction would then fail although nothing was
// acknowledged early.
func (f *relayFixture) notConfirmed(t *testing.T, end pglogrepl.LSN, what string) {
	t.Helper()
	if c := f.PG.Confirmed(f.Name); c >= end {
		t.Fatalf("confirmed_flush_lsn reached %v, the end of %s (committed before %v)", c, what, end)
	}
}

// relayRunning fails t if the relay has returned.
func (f *relayFixture) relayRunning(t *testing.T, when string) {
	t.Helper()
	select {
	case err := <-f.Done:
		f.Done <- err // for the cleanup's stop
		t.Fatalf("%s: the relay returned %v, want it to keep running", when, err)
	default:
	}
}

// TestTopicLookupOutageRetried: Kafka failing the creation
// of the topic of a transaction's first event (NOT_CONTROLLER, then
// REQUEST_TIMED_OUT without creating it) does not stop the relay: it retries
// with backoff, confirms nothing past the transaction meanwhile, and produces
// every event exactly once when Kafka answers again.
func TestTopicLookupOutageRetried(t *testing.T) {
	cluster := newKfake(t)
	var mu sync.Mutex
	var code *kerr.Error = kerr.NotController
	var refused int
	cluster.ControlKey(int16(kmsg.CreateTopics), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		mu.Lock()
		defer mu.Unlock()
		req := kreq.(*kmsg.CreateTopicsRequest)
		if code == nil || len(req.Topics) != 1 || req.Topics[0].Topic != "relay_outage.order" {
			return nil, nil, false
		}
		refused++
		resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic, rt.ErrorCode = req.Topics[0].Topic, code.Code
		resp.Topics = append(resp.Topics, rt)
		if refused == 2 {
			code = kerr.RequestTimedOut
		}
		return resp, nil, true
	})
	refusals := func() int { mu.Lock(); defer mu.Unlock(); return refused }

	f := startRelay(t, "relay_outage", cluster)
	pg := f.PG
	start := pg.InsertLSN()
	testwait.Eventually(t, 15*time.Second, "the idle slot to reach the WAL end", func() bool { return pg.Confirmed(f.Name) >= start })
	f.InsertTxn(t, "agg-1", 3)
	after := pg.InsertLSN()

	testwait.Eventually(t, 20*time.Second, "four refused topic creations", func() bool {
		f.relayRunning(t, "while Kafka fails the topic's creation")
		return refusals() >= 4
	})
	f.relayRunning(t, "while Kafka fails the topic's creation")
	f.notConfirmed(t, after, "the unproduced transaction")
	mu.Lock()
	code = nil
	mu.Unlock()
	recs := relaytest.ConsumeAll(t, cluster.ListenAddrs(), f.Name+".order", 3)
	seen := map[string]int{}
	for _, r := range recs {
		seen[relaytest.HeaderValue(r, sink.HeaderID)]++
	}
	if len(recs) != 3 || len(seen) != 3 {
		t.Fatalf("got %d records with %d distinct ids, want 3 events exactly once", len(recs), len(seen))
	}
	testwait.Eventually(t, 15*time.Second, "confirmed_flush_lsn to pass the transaction", func() bool { return pg.Confirmed(f.Name) >= after })
	f.relayRunning(t, "after Kafka answered again")
	t.Logf("%d refused creations retried; confirmed %v after (transaction ended before %v)", refusals(), pg.Confirmed(f.Name), after)
	f.Cancel()
	err := <-f.Done
	f.Done <- err
	if n := strings.Count(f.Logs.String(), "kafka unavailable while preparing"); err != nil || n < 2 {
		// franz-go itself retries a NOT_CONTROLLER answer once.
		t.Errorf("relay returned %v with %d WARN lines saying Kafka is unavailable, want nil and at least 2", err, n)
	}
}

// TestTopicLookupOutageShutdown: a shutdown while the
// relay waits for Kafka to create a topic returns promptly and cleanly
// (nil), without confirming the unproduced transaction.
func TestTopicLookupOutageShutdown(t *testing.T) {
	cluster := newKfake(t)
	h := cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.CreateTopics}, Topic: "relay_outstop.order", Err: kerr.NotController, Count: -1})
	t.Cleanup(h.Remove)

	f := startRelay(t, "relay_outstop", cluster)
	pg := f.PG
	start := pg.InsertLSN()
	testwait.Eventually(t, 15*time.Second, "the idle slot to reach the WAL end", func() bool { return pg.Confirmed(f.Name) >= start })
	f.InsertTxn(t, "agg-1", 2)
	after := pg.InsertLSN()
	testwait.Eventually(t, 20*time.Second, "a refused topic creation", func() bool { return h.Hits() >= 1 })
	testwait.Eventually(t, 20*time.Second, "the relay to wait before retrying the topic's creation", func() bool {
		return strings.Contains(f.Logs.String(), "kafka unavailable while preparing")
	})
	f.relayRunning(t, "while Kafka fails the topic's creation")

	f.Cancel()
	began := time.Now()
	var err error
	select {
	case err = <-f.Done:
	case <-time.After(10 * time.Second):
		t.Fatal("the relay did not return within 10s of its context's end")
	}
	took := time.Since(began)
	f.Done <- err
	if err != nil {
		t.Fatalf("relay returned %v on shutdown, want nil", err)
	}
	if took > 3*time.Second {
		t.Errorf("shutdown while retrying took %v, want it prompt", took)
	}
	f.notConfirmed(t, after, "the unproduced transaction")
	t.Logf("shutdown took %v with %d refused creations", took, h.Hits())
}

// TestTopicCreationRefusedIsPoison: a topic Kafka refuses
// to create for good (here POLICY_VIOLATION, with the broker's message) is
// poison: under --on-poison=dlq the event goes to the dead-letter topic with
// reason topic_refused and the broker's message, and the events after it
// flow; under --on-poison=stop the relay stops with a *sink.PoisonError saying so.
func TestTopicCreationRefusedIsPoison(t *testing.T) {
	const msg = "topics must be named team.*"
	for _, policy := range []string{OnPoisonDLQ, OnPoisonStop} {
		t.Run(policy, func(t *testing.T) {
			cluster := newKfake(t)
			name := "relay_refused_" + policy
			refused := name + ".refused"
			cluster.ControlKey(int16(kmsg.CreateTopics), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
				cluster.KeepControl()
				req := kreq.(*kmsg.CreateTopicsRequest)
				if len(req.Topics) != 1 || req.Topics[0].Topic != refused {
					return nil, nil, false
				}
				resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
				rt := kmsg.NewCreateTopicsResponseTopic()
				rt.Topic, rt.ErrorCode, rt.ErrorMessage = refused, kerr.PolicyViolation.Code, kmsg.StringPtr(msg)
				resp.Topics = append(resp.Topics, rt)
				return resp, nil, true
			})
			f := startRelay(t, name, cluster, func(o *Options) { o.OnPoison = policy })
			pg := f.PG
			start := pg.InsertLSN()
			testwait.Eventually(t, 15*time.Second, "the idle slot to reach the WAL end", func() bool { return pg.Confirmed(f.Name) >= start })
			pg.Exec("INSERT INTO public." + name + "_outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('refused', 'r-1', 'created', '{}')")
			afterRefused := pg.InsertLSN()
			f.InsertTxn(t, "agg-1", 2) // aggregate type order
			after := pg.InsertLSN()

			if policy == OnPoisonStop {
				var err error
				select {
				case err = <-f.Done:
				case <-time.After(30 * time.Second):
					t.Fatal("relay kept running after Kafka refused to create a topic, under --on-poison=stop")
				}
				f.Done <- err
				var pe *sink.PoisonError
				if !errors.As(err, &pe) || pe.Reason != "topic_refused" || !errors.Is(err, sink.ErrTopicRefused) ||
					!strings.Contains(err.Error(), msg) || !strings.Contains(err.Error(), refused) {
					t.Fatalf("relay returned %v, want a *sink.PoisonError (topic_refused) naming the topic and the broker's message", err)
				}
				f.notConfirmed(t, afterRefused, "the refused event's transaction")
				return
			}
			dl := relaytest.ConsumeAll(t, cluster.ListenAddrs(), sink.DefaultDLQTopic, 1)
			r := dl[0]
			for k, want := range map[string]string{sink.HeaderDLQReason: "topic_refused", sink.HeaderDLQTopic: refused, sink.HeaderAggregateType: "refused"} {
				if got := relaytest.HeaderValue(r, k); got != want {
					t.Errorf("dead letter header %s = %q, want %q", k, got, want)
				}
			}
			if e := relaytest.HeaderValue(r, sink.HeaderDLQError); !strings.Contains(e, msg) || !strings.Contains(e, "POLICY_VIOLATION") {
				t.Errorf("dead letter %s = %q, want the broker's code and message %q", sink.HeaderDLQError, e, msg)
			}
			relaytest.ConsumeAll(t, cluster.ListenAddrs(), name+".order", 2)
			testwait.Eventually(t, 15*time.Second, "confirmed_flush_lsn to pass both transactions", func() bool { return pg.Confirmed(f.Name) >= after })
			f.relayRunning(t, "after dead-lettering")
		})
	}
}

// TestTopicLookupOutageRetriedDeadLetter: the same holds
// for the dead-letter topic: Kafka failing its creation delays a poison
// event's dead letter, it does not stop the relay.
func TestTopicLookupOutageRetriedDeadLetter(t *testing.T) {
	cluster := newKfake(t)
	// franz-go does not retry THROTTLING_QUOTA_EXCEEDED itself (it does NOT_CONTROLLER).
	h := cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.CreateTopics}, Topic: sink.DefaultDLQTopic, Err: kerr.ThrottlingQuotaExceeded, Count: -1})
	f := startRelay(t, "relay_dlqout", cluster)
	pg := f.PG
	start := pg.InsertLSN()
	testwait.Eventually(t, 15*time.Second, "the idle slot to reach the WAL end", func() bool { return pg.Confirmed(f.Name) >= start })
	pg.Exec("INSERT INTO public." + f.Name + "_outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', '', 'created', '{}')")
	after := pg.InsertLSN()
	testwait.Eventually(t, 20*time.Second, "three refused creations of the dead-letter topic", func() bool {
		f.relayRunning(t, "while Kafka fails the dead-letter topic's creation")
		return h.Hits() >= 3
	})
	f.notConfirmed(t, after, "the transaction not yet dead-lettered")
	h.Remove()
	dl := relaytest.ConsumeAll(t, cluster.ListenAddrs(), sink.DefaultDLQTopic, 1)
	if got := relaytest.HeaderValue(dl[0], sink.HeaderDLQReason); got != "empty_aggregate_id" {
		t.Errorf("dead letter reason %q, want empty_aggregate_id", got)
	}
	testwait.Eventually(t, 15*time.Second, "confirmed_flush_lsn to pass the transaction", func() bool { return pg.Confirmed(f.Name) >= after })
	f.relayRunning(t, "after the dead letter")
}
