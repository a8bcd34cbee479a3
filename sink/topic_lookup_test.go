package sink_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walrelay/walrelay/internal/testwait"
	"github.com/walrelay/walrelay/sink"
)

// lookupTimeout keeps a hanging topic look-up short in these tests.
const lookupTimeout = 300 * time.Millisecond

// TestTopicLookupOutageRetried: while Kafka cannot answer
// the look-up or creation of a topic's first record — an error code of the
// transient allow-list, a dropped connection, no answer at all — Prepare
// fails with an IsRetryable error and produces nothing; once Kafka answers,
// the same event is prepared and produced exactly once.
func TestTopicLookupOutageRetried(t *testing.T) {
	t.Parallel()
	const topic = "outbox.event.order"
	for _, tc := range []struct {
		name   string
		outage func(c *kfake.Cluster) (end func())
	}{
		// A real broker may create the topic and still time out:
		// retrying finds it.
		{"create answers REQUEST_TIMED_OUT", codeFault(kmsg.CreateTopics, topic, kerr.RequestTimedOut)},
		{"metadata answers REQUEST_TIMED_OUT", codeFault(kmsg.Metadata, topic, kerr.RequestTimedOut)},
		{"create answers NOT_CONTROLLER", codeFault(kmsg.CreateTopics, topic, kerr.NotController)},
		{"create answers THROTTLING_QUOTA_EXCEEDED", codeFault(kmsg.CreateTopics, topic, kerr.ThrottlingQuotaExceeded)},
		{"create answers INVALID_REPLICATION_FACTOR (brokers down)", codeFault(kmsg.CreateTopics, topic, kerr.InvalidReplicationFactor)},
		{"metadata answers LEADER_NOT_AVAILABLE", codeFault(kmsg.Metadata, topic, kerr.LeaderNotAvailable)},
		{"metadata answers UNKNOWN_SERVER_ERROR", codeFault(kmsg.Metadata, topic, kerr.UnknownServerError)},
		{"create connection dropped", func(c *kfake.Cluster) func() {
			var mu sync.Mutex
			down := true
			c.ControlKey(int16(kmsg.CreateTopics), func(kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				mu.Lock()
				defer mu.Unlock()
				if down {
					return nil, errors.New("outage"), true // kfake closes the connection
				}
				return nil, nil, false
			})
			return func() { mu.Lock(); down = false; mu.Unlock() }
		}},
		{"create not answered", func(c *kfake.Cluster) func() {
			gate := make(chan struct{})
			c.ControlKey(int16(kmsg.CreateTopics), func(kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				select {
				case <-gate:
				default:
					c.SleepControl(func() { <-gate })
				}
				return nil, nil, false
			})
			var once sync.Once
			return func() { once.Do(func() { close(gate) }) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t)
			end := tc.outage(c)
			t.Cleanup(end)
			s := newSink(t, sink.Config{Brokers: c.ListenAddrs(), TopicLookupTimeout: lookupTimeout}, fastRetries)
			ctx := testCtx(t)
			ev := event(1, "order", "o-1")
			for i := range 2 {
				_, err := s.Prepare(ctx, ev)
				if i == 1 && err == nil && strings.Contains(tc.name, "create answers REQUEST_TIMED_OUT") {
					break // created after all
				}
				if !sink.IsRetryable(err) || !errors.Is(err, sink.ErrKafkaUnavailable) {
					t.Fatalf("Prepare #%d during the outage = %v, want an IsRetryable error", i+1, err)
				}
				var pe *sink.ProduceError
				if !errors.As(err, &pe) || pe.Topic != topic || pe.EventID != ev.ID {
					t.Errorf("error %#v, want a *ProduceError naming topic %s and event %s", err, topic, ev.ID)
				}
				t.Logf("during the outage: %v", err)
			}
			end()
			var r sink.Record
			var err error
			_ = testwait.Until(ctx, waitTimeout, func() bool {
				r, err = s.Prepare(ctx, ev)
				return err == nil || !sink.IsRetryable(err)
			})
			if err != nil {
				t.Fatalf("Prepare after the outage: %v", err)
			}
			a := newAcks(1)
			s.Send(ctx, r, a.done(ev.ID))
			allOK(t, a.wait(t, 1), []string{ev.ID})
			consume(t, c, topic, 1)
		})
	}
}

// codeFault answers requests of key for topic with code until end is called.
func codeFault(key kmsg.Key, topic string, code *kerr.Error) func(c *kfake.Cluster) func() {
	return func(c *kfake.Cluster) func() {
		h := c.Fault(kfake.Fault{Keys: []kmsg.Key{key}, Topic: topic, Err: code, Count: -1})
		return h.Remove
	}
}

// TestTopicLookupOutageCancel: a look-up hanging on Kafka
// ends when the caller's context does (a shutdown), with an error that is
// not retryable.
func TestTopicLookupOutageCancel(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	gate := make(chan struct{})
	t.Cleanup(func() { close(gate) })
	c.ControlKey(int16(kmsg.CreateTopics), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		c.SleepControl(func() { <-gate })
		return nil, nil, false
	})
	s := newSink(t, sink.Config{Brokers: c.ListenAddrs()}) // default 10s look-up timeout
	ctx, cancel := context.WithCancel(testCtx(t))
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	_, err := s.Prepare(ctx, event(1, "order", "o-1"))
	took := time.Since(start)
	if err == nil || sink.IsRetryable(err) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Prepare with a cancelled context = %v, want context.Canceled, not retryable", err)
	}
	if took > 2*time.Second {
		t.Fatalf("Prepare returned %v after its context was cancelled", took-200*time.Millisecond)
	}
}

// refuseCreate answers CreateTopics for topic with code and the broker
// message msg; other topics are created normally.
func refuseCreate(c *kfake.Cluster, topic string, code *kerr.Error, msg string) {
	c.ControlKey(int16(kmsg.CreateTopics), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.CreateTopicsRequest)
		if len(req.Topics) != 1 || req.Topics[0].Topic != topic {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic = topic
		rt.ErrorCode = code.Code
		rt.ErrorMessage = kmsg.StringPtr(msg)
		resp.Topics = append(resp.Topics, rt)
		return resp, nil, true
	})
}

// TestTopicCreationRefusedIsPoison: a topic Kafka refuses
// to create for good — an invalid or colliding name, a policy — makes the
// event's Prepare fail with ErrTopicRefused carrying the broker's message
// (the relay dead-letters it as topic_refused), not a retryable error;
// authorization failures are ErrTopicNotAuthorized (the relay stops). Other
// topics are unaffected.
func TestTopicCreationRefusedIsPoison(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code      *kerr.Error
		msg       string
		want      error
		notWanted error
	}{
		{kerr.InvalidTopicException, "Topic 'outbox.event.order.item' collides with existing topic: outbox.event.order_item", sink.ErrTopicRefused, sink.ErrTopicNotAuthorized},
		{kerr.PolicyViolation, "topics must be named team.*", sink.ErrTopicRefused, sink.ErrTopicNotAuthorized},
		{kerr.InvalidConfig, "bad default config", sink.ErrTopicRefused, sink.ErrTopicNotAuthorized},
		{kerr.TopicAuthorizationFailed, "", sink.ErrTopicNotAuthorized, sink.ErrTopicRefused},
		{kerr.ClusterAuthorizationFailed, "", sink.ErrTopicNotAuthorized, sink.ErrTopicRefused},
	} {
		t.Run(tc.code.Message, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t)
			const refused = "outbox.event.order.item"
			refuseCreate(c, refused, tc.code, tc.msg)
			s := newSink(t, sink.Config{Brokers: c.ListenAddrs()})
			ctx := testCtx(t)

			ev := event(1, "order.item", "o-1")
			_, err := s.Prepare(ctx, ev)
			if !errors.Is(err, tc.want) || errors.Is(err, tc.notWanted) || sink.IsRetryable(err) || !errors.Is(err, tc.code) {
				t.Fatalf("Prepare = %v, want %v wrapping %v, not retryable", err, tc.want, tc.code)
			}
			if !strings.Contains(err.Error(), tc.msg) || !strings.Contains(err.Error(), refused) {
				t.Errorf("error %q does not carry the broker's message %q and the topic", err, tc.msg)
			}
			t.Logf("%v", err)

			// The refusal is not remembered as a topic; others work.
			if _, err := s.Prepare(ctx, ev); !errors.Is(err, tc.want) {
				t.Errorf("second Prepare = %v, want %v again", err, tc.want)
			}
			good := event(2, "order", "o-1")
			a := newAcks(1)
			if err := s.Produce(ctx, good, a.done(good.ID)); err != nil {
				t.Fatalf("Produce to another topic: %v", err)
			}
			allOK(t, a.wait(t, 1), []string{good.ID})
		})
	}
}

// TestTopicLookupBrokerDownRetryable: with every broker
// gone (connections refused), a new topic's look-up is retryable, within
// the look-up timeout.
func TestTopicLookupBrokerDownRetryable(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := newSink(t, sink.Config{Brokers: c.ListenAddrs(), TopicLookupTimeout: lookupTimeout})
	ctx := testCtx(t)
	a := newAcks(1)
	ev := event(1, "order", "o-1")
	if err := s.Produce(ctx, ev, a.done(ev.ID)); err != nil {
		t.Fatal(err)
	}
	allOK(t, a.wait(t, 1), []string{ev.ID})
	c.Close()
	start := time.Now()
	_, err := s.Prepare(ctx, event(2, "invoice", "i-1"))
	if !sink.IsRetryable(err) {
		t.Fatalf("Prepare with the broker down = %v, want an IsRetryable error", err)
	}
	if took := time.Since(start); took > lookupTimeout+2*time.Second {
		t.Errorf("Prepare took %v, want about the look-up timeout %v", took, lookupTimeout)
	}
	t.Logf("%v", err)
}

// TestTopicJustCreatedNotYetVisible: a real broker may
// not know a topic for a moment after its creation (metadata and configs
// answer UNKNOWN_TOPIC_OR_PARTITION). That is waited out within one
// Prepare, not reported as Kafka being unavailable.
func TestTopicJustCreatedNotYetVisible(t *testing.T) {
	t.Parallel()
	const topic = "outbox.event.order"
	for _, existing := range []bool{false, true} {
		var opts []kfake.Opt
		if existing { // created by someone else: our create answers TOPIC_ALREADY_EXISTS
			opts = append(opts, kfake.SeedTopics(1, topic))
		}
		c := newCluster(t, opts...)
		meta := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Topic: topic, Err: kerr.UnknownTopicOrPartition, Count: 3})
		conf := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.DescribeConfigs}, Resource: topic, Err: kerr.UnknownTopicOrPartition, Count: 2})
		s := newSink(t, sink.Config{Brokers: c.ListenAddrs()})
		ev := event(1, "order", "o-1")
		a := newAcks(1)
		if err := s.Produce(testCtx(t), ev, a.done(ev.ID)); err != nil {
			t.Fatalf("existing=%v: Produce = %v, want the topic found once visible", existing, err)
		}
		allOK(t, a.wait(t, 1), []string{ev.ID})
		if meta.Hits() < 1 || conf.Hits() != 2 {
			t.Errorf("existing=%v: faults hit %d (metadata) and %d (configs) times, want >= 1 and 2", existing, meta.Hits(), conf.Hits())
		}
	}
}
