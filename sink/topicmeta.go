package sink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ErrKafkaUnavailable reports that Kafka could not answer while a topic was
// looked up, created or re-read: brokers unreachable, a timeout, or a
// transient broker error (NOT_CONTROLLER, LEADER_NOT_AVAILABLE, ...). The
// same call may succeed later; see IsRetryable.
var ErrKafkaUnavailable = errors.New("kafka unavailable")

// ErrTopicRefused reports a topic Kafka refuses for good: an invalid or
// colliding name (INVALID_TOPIC_EXCEPTION), a create-topic policy
// (POLICY_VIOLATION), or another non-transient error of the topic's look-up
// or creation. The error text carries the broker's message.
var ErrTopicRefused = errors.New("kafka refused the topic")

// ErrTopicNotAuthorized reports that walrelay's principal may not describe or
// create the topic. It is a deployment problem, not a bad event: the relay
// stops on it rather than dead-lettering every event of the topic.
var ErrTopicNotAuthorized = errors.New("not authorized for the topic")

// IsRetryable reports whether err, from Prepare or PrepareDeadLetter, means
// Kafka or the schema registry was unavailable: calling again later with the
// same event may succeed. Every other error is final for the event.
func IsRetryable(err error) bool {
	return errors.Is(err, ErrKafkaUnavailable) || errors.Is(err, ErrRegistryUnavailable)
}

// missRefreshEvery bounds how often records that a topic's cached partition
// count or max.message.bytes refuse re-read them before they are refused:
// at most ten metadata look-ups a second per topic under a flood of such
// records, and a change older than this is always seen.
const missRefreshEvery = 100 * time.Millisecond

// topicMeta is what the sink knows of a topic it produces to.
type topicMeta struct {
	partitions int       // partition count; 0 unknown
	maxBytes   int32     // max.message.bytes; 0 unknown
	read       time.Time // when partitions and maxBytes were read
	validated  bool      // not created: as Kafka would create it (Config.ValidateOnlyTopics)
}

// kind of a Kafka error for a topic's look-up or creation.
type errKind int

const (
	errFatal     errKind = iota // stop: neither the event's fault nor passing
	errTransient                // retry with backoff
	errRefused                  // the topic is refused for good: poison
	errAuth                     // not authorized: stop
)

// transientCodes is the allow-list of Kafka error codes that say the broker
// or the cluster cannot answer now but will: elections, controller moves,
// timeouts, throttling, a broker down (INVALID_REPLICATION_FACTOR is what a
// cluster with too few live brokers answers to a create), a topic just
// created and not yet known to the broker asked (UNKNOWN_TOPIC_OR_PARTITION;
// a look-up of a missing topic is answered before classifying) and Kafka's
// catch-all for a broker-side exception.
var transientCodes = map[int16]bool{
	kerr.UnknownTopicOrPartition.Code:      true,
	kerr.UnknownServerError.Code:           true,
	kerr.LeaderNotAvailable.Code:           true,
	kerr.NotLeaderForPartition.Code:        true,
	kerr.RequestTimedOut.Code:              true,
	kerr.BrokerNotAvailable.Code:           true,
	kerr.ReplicaNotAvailable.Code:          true,
	kerr.NetworkException.Code:             true,
	kerr.CoordinatorNotAvailable.Code:      true,
	kerr.NotEnoughReplicas.Code:            true,
	kerr.NotEnoughReplicasAfterAppend.Code: true,
	kerr.InvalidReplicationFactor.Code:     true,
	kerr.NotController.Code:                true,
	kerr.KafkaStorageError.Code:            true,
	kerr.ThrottlingQuotaExceeded.Code:      true,
}

// classify sorts an error of a topic's look-up or creation. Kafka error
// codes outside the transient allow-list refuse the topic; errors without a
// code are transient when they are network failures or timeouts, and fatal
// otherwise (closed client, TLS or SASL failure).
func classify(err error) errKind {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		switch {
		case transientCodes[ke.Code]:
			return errTransient
		case ke == kerr.TopicAuthorizationFailed || ke == kerr.ClusterAuthorizationFailed:
			return errAuth
		}
		return errRefused
	}
	if errors.Is(err, context.DeadlineExceeded) || kgo.IsRetryableBrokerErr(err) {
		return errTransient
	}
	// A connection closed under a request. franz-go does not retry it on a
	// fresh connection (a broker expecting SASL does that), but this client
	// has talked to Kafka before: a broker going down does it too.
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errTransient
	}
	var oe *net.OpError
	if errors.As(err, &oe) { // a broker that refuses connections is down
		return errTransient
	}
	return errFatal
}

// topicError wraps err from operation op on topic by its kind. parent is the
// caller's context: when it ended, the error is its own (not retryable).
func topicError(parent context.Context, op, topic string, err error, brokerMsg string) error {
	if parent.Err() != nil {
		return fmt.Errorf("%s topic %q: %w", op, topic, parent.Err())
	}
	if brokerMsg != "" {
		err = fmt.Errorf("%w: %s", err, brokerMsg)
	}
	switch classify(err) {
	case errTransient:
		return fmt.Errorf("%w: %s topic %q: %w", ErrKafkaUnavailable, op, topic, err)
	case errRefused:
		return fmt.Errorf("%w: %s topic %q: %w", ErrTopicRefused, op, topic, err)
	case errAuth:
		return fmt.Errorf("%w: %s topic %q: %w (grant walrelay's principal DESCRIBE and CREATE on the topic, or create it beforehand)",
			ErrTopicNotAuthorized, op, topic, err)
	}
	return fmt.Errorf("%s topic %q: %w", op, topic, err)
}

// errNoTopic is lookupPartitions' answer for a topic that does not exist.
var errNoTopic = errors.New("unknown topic")

// lookupPartitions asks a broker (not franz-go's metadata cache) for topic's
// partition count.
func (s *Sink) lookupPartitions(ctx context.Context, topic string) (int, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	req.AllowAutoTopicCreation = false
	resp, err := req.RequestWith(ctx, s.client)
	if err != nil {
		return 0, err
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		if t.ErrorCode == kerr.UnknownTopicOrPartition.Code {
			return 0, errNoTopic
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return 0, err
		}
		return len(t.Partitions), nil
	}
	return 0, errNoTopic
}

// readMaxBytes reads topic's max.message.bytes; 0 when the broker does not
// say (a principal without DESCRIBE_CONFIGS): the batch limit applies then,
// which is logged on the first read.
func (s *Sink) readMaxBytes(ctx context.Context, topic string, first bool) (int32, error) {
	rcs, err := s.admin.DescribeTopicConfigs(ctx, topic)
	if err == nil {
		var rc kadm.ResourceConfig
		rc, err = rcs.On(topic, nil)
		if err == nil {
			err = rc.Err
		}
		if err == nil {
			for _, c := range rc.Configs {
				if c.Key == "max.message.bytes" && c.Value != nil {
					if n, perr := strconv.ParseInt(*c.Value, 10, 32); perr == nil {
						return int32(n), nil
					}
				}
			}
			return 0, nil
		}
	}
	if classify(err) == errTransient || ctx.Err() != nil {
		return 0, err
	}
	if first {
		s.log.Info("cannot read the topic's max.message.bytes; records are checked against the batch limit",
			"topic", topic, "limit", s.cfg.BatchMaxBytes, "error", err)
	}
	return 0, nil
}

// topic returns what the sink knows of topic, looking it up (and creating
// it, if allowed and missing) on first use, and re-reading it when it is
// older than Config.TopicRefreshInterval. Each call to Kafka is bounded by
// Config.TopicLookupTimeout.
func (s *Sink) topic(ctx context.Context, topic string) (topicMeta, error) {
	s.mu.Lock()
	m, ok := s.topics[topic]
	s.mu.Unlock()
	if ok {
		if time.Since(m.read) < s.cfg.TopicRefreshInterval {
			return m, nil
		}
		return s.refresh(ctx, topic, m), nil
	}
	m, err := s.load(ctx, topic)
	if err != nil {
		return m, err
	}
	s.store(topic, m)
	return m, nil
}

func (s *Sink) store(topic string, m topicMeta) {
	s.mu.Lock()
	s.topics[topic] = m
	s.mu.Unlock()
}

// load looks topic up and creates it when missing.
func (s *Sink) load(ctx context.Context, topic string) (topicMeta, error) {
	actx, cancel := context.WithTimeout(ctx, s.cfg.TopicLookupTimeout)
	defer cancel()
	// Look first: a producer may lack CREATE permission on existing topics.
	n, err := s.lookupPartitions(actx, topic)
	if errors.Is(err, errNoTopic) {
		if s.cfg.DisableCreateTopics {
			return topicMeta{}, fmt.Errorf("%w: %q (create it, or enable topic creation)", ErrTopicMissing, topic)
		}
		if s.cfg.ValidateOnlyTopics {
			return s.validateCreate(ctx, actx, topic)
		}
		var resp kadm.CreateTopicResponse
		resp, err = s.admin.CreateTopic(actx, s.cfg.TopicPartitions, s.cfg.TopicReplicationFactor, nil, topic)
		switch {
		case err == nil:
			s.log.Info("created topic", "topic", topic, "partitions", resp.NumPartitions, "replication_factor", resp.ReplicationFactor)
			n = int(resp.NumPartitions)
			if n <= 0 { // old brokers do not say
				n, err = s.awaitVisible(actx, topic)
			}
		case errors.Is(err, kerr.TopicAlreadyExists):
			// Created meanwhile by someone else (or still being deleted:
			// a topic that stays missing is retried).
			n, err = s.awaitVisible(actx, topic)
			if errors.Is(err, errNoTopic) {
				err = fmt.Errorf("%w (%s)", kerr.LeaderNotAvailable, resp.ErrMessage)
			}
		default:
			return topicMeta{}, topicError(ctx, "create", topic, err, resp.ErrMessage)
		}
	}
	if errors.Is(err, errNoTopic) { // created, not visible yet
		err = kerr.LeaderNotAvailable
	}
	if err != nil {
		return topicMeta{}, topicError(ctx, "look up", topic, err, "")
	}
	maxBytes, err := s.readMaxBytes(actx, topic, true)
	for errors.Is(err, kerr.UnknownTopicOrPartition) && sleepCtx(actx, visibleEvery) {
		// Just created: the broker asked does not know it yet.
		maxBytes, err = s.readMaxBytes(actx, topic, true)
	}
	if err != nil {
		return topicMeta{}, topicError(ctx, "describe", topic, err, "")
	}
	return topicMeta{partitions: n, maxBytes: maxBytes, read: time.Now()}, nil
}

// validateCreate asks Kafka whether it would create topic
// (Config.ValidateOnlyTopics) and returns the topic it describes.
func (s *Sink) validateCreate(ctx, actx context.Context, topic string) (topicMeta, error) {
	resps, err := s.admin.ValidateCreateTopics(actx, s.cfg.TopicPartitions, s.cfg.TopicReplicationFactor, nil, topic)
	var resp kadm.CreateTopicResponse
	if err == nil {
		resp, err = resps.On(topic, nil)
	}
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return topicMeta{}, topicError(ctx, "create", topic, err, resp.ErrMessage)
	}
	m := topicMeta{partitions: int(resp.NumPartitions), read: time.Now(), validated: true}
	if c, ok := resp.Configs["max.message.bytes"]; ok && c.Value != nil {
		if n, err := strconv.ParseInt(*c.Value, 10, 32); err == nil {
			m.maxBytes = int32(n)
		}
	}
	return m, nil
}

// visibleEvery is how often a topic just created is looked for until the
// broker asked knows it.
const visibleEvery = 50 * time.Millisecond

// awaitVisible looks topic up until it exists or ctx ends: a topic just
// created reaches every broker's metadata a moment later.
func (s *Sink) awaitVisible(ctx context.Context, topic string) (int, error) {
	for {
		n, err := s.lookupPartitions(ctx, topic)
		if !errors.Is(err, errNoTopic) || !sleepCtx(ctx, visibleEvery) {
			return n, err
		}
	}
}

// sleepCtx sleeps for d and reports true, or reports false when ctx ends
// first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// refresh re-reads the partition count and max.message.bytes of a topic
// already in use. It never creates the topic: one deleted while in use makes
// its records fail. A failure keeps the values known, until the next
// interval.
func (s *Sink) refresh(ctx context.Context, topic string, m topicMeta) topicMeta {
	next, err := s.reread(ctx, topic, m)
	if err != nil {
		s.log.Debug("re-reading topic metadata failed; keeping what is known", "topic", topic, "error", err)
		m.read = time.Now()
		s.store(topic, m)
		return m
	}
	return next
}

// reread re-reads topic's partition count and max.message.bytes and stores
// them.
func (s *Sink) reread(ctx context.Context, topic string, m topicMeta) (topicMeta, error) {
	actx, cancel := context.WithTimeout(ctx, s.cfg.TopicLookupTimeout)
	defer cancel()
	n, err := s.lookupPartitions(actx, topic)
	if err != nil {
		return m, topicError(ctx, "look up", topic, err, "")
	}
	maxBytes, err := s.readMaxBytes(actx, topic, false)
	if err != nil {
		return m, topicError(ctx, "describe", topic, err, "")
	}
	if n != m.partitions || maxBytes != m.maxBytes {
		s.log.Info("topic changed", "topic", topic, "partitions", n, "max_message_bytes", maxBytes)
	}
	m = topicMeta{partitions: n, maxBytes: maxBytes, read: time.Now()}
	s.store(topic, m)
	return m, nil
}

// rereadOnMiss re-reads a topic whose cached facts refuse a record, at most
// once per missRefreshEvery per topic, so that partitions added or a
// max.message.bytes raised are seen before the record is refused. ok is
// false when the cached facts are recent enough to be trusted.
func (s *Sink) rereadOnMiss(ctx context.Context, topic string, m topicMeta) (topicMeta, bool, error) {
	if m.validated || time.Since(m.read) < missRefreshEvery {
		return m, false, nil // a validated topic does not exist to be re-read
	}
	m, err := s.reread(ctx, topic, m)
	return m, err == nil, err
}

// awaitClientPartition waits until franz-go's producer metadata has
// partition p of topic, which the broker just said exists: the producer
// partitions with its own view, refreshed every few minutes, and a record
// for a partition it does not know yet would fail.
func (s *Sink) awaitClientPartition(ctx context.Context, topic string, p int32) error {
	known := func() bool {
		leader, _, err := s.client.PartitionLeader(topic, p)
		if leader >= 0 || err != nil { // the partition is known, maybe leaderless
			return true
		}
		// Not loaded at all: the producer loads fresh metadata for the
		// topic's first record.
		l0, _, err0 := s.client.PartitionLeader(topic, 0)
		return l0 < 0 && err0 == nil
	}
	if known() {
		return nil
	}
	actx, cancel := context.WithTimeout(ctx, s.cfg.TopicLookupTimeout)
	defer cancel()
	s.client.ForceMetadataRefresh()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !known() {
		select {
		case <-actx.Done():
			return topicError(ctx, "load partitions of", topic, actx.Err(), "")
		case <-tick.C:
		}
	}
	return nil
}
