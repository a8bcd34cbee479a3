package sink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/klauspost/compress/zstd"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walrelay/walrelay/decoder"
)

// Header names walrelay sets on every record.
const (
	HeaderID            = "id"
	HeaderEventType     = "event_type"
	HeaderAggregateType = "aggregate_type"
	HeaderLSN           = "walrelay.lsn"
	HeaderXID           = "walrelay.xid"
)

// ErrTopicMissing reports a topic that does not exist while topic creation
// is off.
var ErrTopicMissing = errors.New("topic does not exist")

// Config configures a Sink. Zero values take the documented defaults.
type Config struct {
	// Brokers are the seed brokers, host:port. Required.
	Brokers []string
	// Topic is the topic template (see ParseTemplate). Default
	// "outbox.event.{aggregate_type}".
	Topic string
	// Compression is one of none, gzip, snappy, lz4, zstd. Default zstd, at
	// its fastest level (see codec).
	Compression string
	// Linger is how long a partition waits for more records before sending a
	// batch; 0 sends as soon as a request can go. Taken as given: walrelay's
	// configuration supplies its 5ms default (Kafka 4's linger.ms).
	Linger time.Duration
	// BatchMaxBytes caps one record batch. Default 1 MiB (Kafka's default
	// max.message.bytes).
	BatchMaxBytes int32
	// MaxBufferedBytes caps the bytes of records produced and not yet
	// acknowledged; Produce blocks above it. Default 64 MiB.
	MaxBufferedBytes int
	// MaxBufferedRecords caps the records produced and not yet acknowledged.
	// Default 10000.
	MaxBufferedRecords int
	// CreateTopics creates a missing topic before the first record to it.
	// When false, a missing topic is an error naming it. Default true
	// (set DisableCreateTopics to turn it off).
	DisableCreateTopics bool
	// TopicPartitions and TopicReplicationFactor are used for created topics;
	// -1 (the default) takes the broker's defaults.
	TopicPartitions        int32
	TopicReplicationFactor int16
	// ClientID is the Kafka client id. Default "walrelay".
	ClientID string
	// DLQTopic is the dead-letter topic. Default "walrelay.dlq".
	DLQTopic string
	// TableTopics gives tables ("schema.table", as Event.Table) their own
	// topic template; other events use Topic.
	TableTopics map[string]string
	// CloudEvents adds CloudEvents binary-mode headers: ce_id, ce_type,
	// ce_source (CloudEventsSource with {table} replaced by the event's
	// schema.table, or "message"), ce_time, ce_specversion "1.0", and
	// content-type (ContentType, default application/json).
	CloudEvents       bool
	CloudEventsSource string
	ContentType       string
	// TLS and SASL secure the broker connections (see security.go); the
	// zero values are plaintext without authentication.
	TLS  TLSConfig
	SASL SASLConfig
}

// Validate reports a configuration that cannot work, naming the key.
func (c Config) Validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("kafka brokers: none given (set --kafka-brokers host:port)")
	}
	for _, b := range c.Brokers {
		host, port, err := net.SplitHostPort(b)
		if err != nil || host == "" {
			return fmt.Errorf("kafka brokers: %q is not host:port", b)
		}
		if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
			return fmt.Errorf("kafka brokers: %q has no valid port", b)
		}
	}
	if _, err := codec(c.Compression); err != nil {
		return err
	}
	if c.Topic != "" {
		if _, err := ParseTemplate(c.Topic); err != nil {
			return err
		}
	}
	for table, t := range c.TableTopics {
		if _, err := ParseTemplate(t); err != nil {
			return fmt.Errorf("topic template for %s: %w", table, err)
		}
	}
	if c.DLQTopic != "" {
		if err := ValidateTopic(c.DLQTopic); err != nil {
			return fmt.Errorf("dead-letter topic: %w", err)
		}
	}
	if c.Linger < 0 || c.Linger > time.Minute {
		return fmt.Errorf("kafka linger: %v is not between 0 and 1m", c.Linger)
	}
	if c.BatchMaxBytes != 0 && (c.BatchMaxBytes < 512 || c.BatchMaxBytes > 1<<30) {
		return fmt.Errorf("kafka batch max bytes: %d is not between 512 and 1 GiB", c.BatchMaxBytes)
	}
	if c.MaxBufferedBytes < 0 || c.MaxBufferedRecords < 0 {
		return errors.New("kafka: buffer sizes must not be negative")
	}
	if c.TopicPartitions < -1 || c.TopicReplicationFactor < -1 {
		return errors.New("kafka: topic partitions and replication factor must be -1 (broker default) or positive")
	}
	return c.validateSecurity()
}

func (c *Config) setDefaults() {
	if c.Topic == "" {
		c.Topic = "outbox.event.{aggregate_type}"
	}
	if c.Compression == "" {
		c.Compression = "zstd"
	}
	if c.BatchMaxBytes == 0 {
		c.BatchMaxBytes = 1 << 20
	}
	if c.MaxBufferedBytes == 0 {
		c.MaxBufferedBytes = 64 << 20
	}
	if c.MaxBufferedRecords == 0 {
		c.MaxBufferedRecords = 10000
	}
	if c.TopicPartitions == 0 {
		c.TopicPartitions = -1
	}
	if c.TopicReplicationFactor == 0 {
		c.TopicReplicationFactor = -1
	}
	if c.ClientID == "" {
		c.ClientID = "walrelay"
	}
	if c.DLQTopic == "" {
		c.DLQTopic = DefaultDLQTopic
	}
	if c.CloudEventsSource == "" {
		c.CloudEventsSource = "/walrelay/{table}"
	}
	if c.ContentType == "" {
		c.ContentType = "application/json"
	}
}

// codec maps a compression name to franz-go's codec. zstd runs at its fastest
// level: on JSON outbox payloads it compresses both faster and two to three
// times smaller than lz4, and it stores incompressible batches raw instead of
// spending CPU on them (figures in the README, "Compression"). franz-go's own
// zstd default is level 3, several times slower on such data.
func codec(name string) (kgo.CompressionCodec, error) {
	switch name {
	case "", "zstd":
		return kgo.ZstdCompression().WithLevel(int(zstd.SpeedFastest)), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "none":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("kafka compression: %q is not one of none, gzip, snappy, lz4, zstd", name)
}

// Option sets an optional collaborator.
type Option func(*Sink)

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(s *Sink) { s.log = l } }

// WithClientOpts appends raw franz-go options (tests, TLS, SASL).
func WithClientOpts(opts ...kgo.Opt) Option {
	return func(s *Sink) { s.extra = append(s.extra, opts...) }
}

// ProduceError is a record that Kafka did not accept. It carries what an
// operator needs to find the event.
type ProduceError struct {
	Topic   string
	EventID string
	LSN     string
	Err     error
}

func (e *ProduceError) Error() string {
	return fmt.Sprintf("produce event id=%s lsn=%s to topic %q: %v", e.EventID, e.LSN, e.Topic, e.Err)
}

func (e *ProduceError) Unwrap() error { return e.Err }

// Sink produces events to Kafka. Produce is called from one goroutine; the
// done callbacks run on franz-go's goroutines. Close must be called once.
type Sink struct {
	cfg   Config
	tmpl  Template
	tmpls map[string]Template // by Event.Table
	log   *slog.Logger
	extra []kgo.Opt

	client *kgo.Client
	admin  *kadm.Client

	mu         sync.Mutex
	partitions map[string]int   // partition count of topics with explicit partitions
	topics     map[string]int32 // topics known to exist → max.message.bytes (0 unknown)
}

// New validates cfg and builds the Kafka client. franz-go connects lazily:
// nothing is dialed until Ping or the first Produce.
func New(cfg Config, opts ...Option) (*Sink, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	tmpl, err := ParseTemplate(cfg.Topic)
	if err != nil {
		return nil, err
	}
	s := &Sink{cfg: cfg, tmpl: tmpl, tmpls: map[string]Template{}, log: slog.Default(),
		topics: map[string]int32{}, partitions: map[string]int{}}
	for table, src := range cfg.TableTopics {
		t, err := ParseTemplate(src)
		if err != nil {
			return nil, err
		}
		s.tmpls[table] = t
	}
	for _, o := range opts {
		o(s)
	}
	comp, _ := codec(cfg.Compression)
	kopts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(cfg.ClientID),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(comp),
		kgo.ProducerLinger(cfg.Linger),
		kgo.ProducerBatchMaxBytesFn(s.batchMaxBytes),
		kgo.MaxBufferedRecords(cfg.MaxBufferedRecords),
		kgo.RecordPartitioner(newPartitioner()),
		kgo.MaxBufferedBytes(cfg.MaxBufferedBytes),
		// Retryable errors are retried without limit (franz-go's default): a
		// record either reaches Kafka or fails with a permanent error, and the
		// watermark waits meanwhile. A topic that keeps being unknown (deleted
		// while running) fails after a while instead of retrying silently.
		kgo.UnknownTopicRetries(30),
	}
	sec, err := securityOpts(cfg, os.Getenv, s.log)
	if err != nil {
		return nil, err
	}
	kopts = append(kopts, sec...)
	kopts = append(kopts, s.extra...)
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	s.client = cl
	s.admin = kadm.NewClient(cl)
	return s, nil
}

// Ping checks that at least one broker answers. A connection refused for a
// TLS or SASL reason is a *SecurityError that names the setting to fix.
func (s *Sink) Ping(ctx context.Context) error {
	if err := s.client.Ping(ctx); err != nil {
		if serr := s.cfg.securityError(err); serr != nil {
			return serr
		}
		return fmt.Errorf("kafka: no broker reachable at %s: %w", strings.Join(s.cfg.Brokers, ","), err)
	}
	return nil
}

// Topic returns the topic ev routes to.
func (s *Sink) Topic(ev *decoder.Event) (string, error) {
	if t, ok := s.tmpls[ev.Table]; ok {
		return t.Render(ev)
	}
	return s.tmpl.Render(ev)
}

// Produce sends ev asynchronously. done is called exactly once: with nil
// after Kafka acknowledged the record (acks=all), or with a *ProduceError.
// Produce returns an error (and does not call done) only when the record was
// not handed to the client: the topic is invalid (ErrInvalidTopic) or
// missing (ErrTopicMissing), the record is larger than the topic accepts
// (ErrTooLarge, checked on the uncompressed size), or its explicit partition
// does not exist (ErrNoSuchPartition).
//
// ctx bounds the record's whole life, as in franz-go: Produce blocks while
// the client's buffer is full until ctx ends, and a record still buffered
// when ctx ends fails. Pass a context that outlives a graceful drain.
//
// Ownership: the record takes ev's byte slices (AggregateID, Payload, header
// values) without copying them; the caller must not modify them afterwards.
// ev itself is not retained.
func (s *Sink) Produce(ctx context.Context, ev *decoder.Event, done func(error)) error {
	topic, err := s.Topic(ev)
	if err != nil {
		return &ProduceError{Topic: topic, EventID: ev.ID, LSN: ev.LSN.String(), Err: err}
	}
	if err := s.ensureTopic(ctx, topic); err != nil {
		return &ProduceError{Topic: topic, EventID: ev.ID, LSN: ev.LSN.String(), Err: err}
	}
	rec := s.record(topic, ev)
	if err := s.checkSize(rec); err != nil {
		return &ProduceError{Topic: topic, EventID: ev.ID, LSN: ev.LSN.String(), Err: err}
	}
	if err := s.checkPartition(ctx, rec); err != nil {
		return &ProduceError{Topic: topic, EventID: ev.ID, LSN: ev.LSN.String(), Err: err}
	}
	s.produce(ctx, rec, ev, done)
	return nil
}

func (s *Sink) produce(ctx context.Context, rec *kgo.Record, ev *decoder.Event, done func(error)) {
	id, lsn := ev.ID, ev.LSN
	s.client.Produce(ctx, rec, func(r *kgo.Record, err error) {
		if err != nil {
			done(&ProduceError{Topic: r.Topic, EventID: id, LSN: lsn.String(), Err: err})
			return
		}
		done(nil)
	})
}

// record builds ev's record with the configured extras.
func (s *Sink) record(topic string, ev *decoder.Event) *kgo.Record {
	rec := BuildRecord(topic, ev)
	if s.cfg.CloudEvents {
		rec.Headers = append(rec.Headers, CloudEventsHeaders(ev, rec.Timestamp, s.cfg.CloudEventsSource, s.cfg.ContentType)...)
	}
	return rec
}

// CloudEvents header names (Kafka protocol binding, binary content mode).
const (
	HeaderCEID          = "ce_id"
	HeaderCEType        = "ce_type"
	HeaderCESource      = "ce_source"
	HeaderCETime        = "ce_time"
	HeaderCESpecVersion = "ce_specversion"
	HeaderContentType   = "content-type"
)

// CloudEventsHeaders returns the CloudEvents binary-mode headers for ev.
// source may contain {table}, replaced by ev.Table ("message" for tableless
// events).
func CloudEventsHeaders(ev *decoder.Event, ts time.Time, source, contentType string) []kgo.RecordHeader {
	table := ev.Table
	if table == "" {
		table = "message"
	}
	return []kgo.RecordHeader{
		{Key: HeaderCESpecVersion, Value: []byte("1.0")},
		{Key: HeaderCEID, Value: []byte(ev.ID)},
		{Key: HeaderCEType, Value: []byte(ev.EventType)},
		{Key: HeaderCESource, Value: []byte(strings.ReplaceAll(source, "{table}", table))},
		{Key: HeaderCETime, Value: []byte(ts.UTC().Format(time.RFC3339Nano))},
		{Key: HeaderContentType, Value: []byte(contentType)},
	}
}

// stringBytes returns s's bytes without copying. The record's header values
// are only ever read (by franz-go, when it encodes the batch), never written,
// so sharing the immutable string's memory is safe and saves an allocation
// per header on the hot path.
func stringBytes(s string) []byte {
	if s == "" {
		return nil
	}
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// BuildRecord turns ev into the Kafka record of DESIGN.md §4.
func BuildRecord(topic string, ev *decoder.Event) *kgo.Record {
	hs := make([]kgo.RecordHeader, 0, 5+len(ev.Headers))
	hs = append(hs,
		kgo.RecordHeader{Key: HeaderID, Value: stringBytes(ev.ID)},
		kgo.RecordHeader{Key: HeaderEventType, Value: stringBytes(ev.EventType)},
		kgo.RecordHeader{Key: HeaderAggregateType, Value: stringBytes(ev.AggregateType)},
	)
	for _, h := range ev.Headers {
		hs = append(hs, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	// One buffer for the position headers: "X/Y" LSN, then the xid.
	pos := make([]byte, 0, 32)
	pos = strconv.AppendUint(pos, uint64(ev.LSN)>>32, 16)
	pos = append(pos, '/')
	pos = strconv.AppendUint(pos, uint64(ev.LSN)&0xFFFFFFFF, 16)
	lsnEnd := len(pos)
	for i, c := range pos { // upper-case hex, as pglogrepl.LSN.String()
		if c >= 'a' && c <= 'f' {
			pos[i] = c - 'a' + 'A'
		}
	}
	pos = strconv.AppendUint(pos, uint64(ev.XID), 10)
	hs = append(hs,
		kgo.RecordHeader{Key: HeaderLSN, Value: pos[:lsnEnd:lsnEnd]},
		kgo.RecordHeader{Key: HeaderXID, Value: pos[lsnEnd:]},
	)
	ts := ev.Timestamp
	if ts.IsZero() {
		ts = ev.CommitTime
	}
	partition := int32(noPartition)
	if ev.HasPartition {
		partition = ev.Partition
	}
	return &kgo.Record{
		Topic:     topic,
		Partition: partition,
		Key:       ev.AggregateID,
		Value:     ev.Payload,
		Headers:   hs,
		Timestamp: ts,
	}
}

func (s *Sink) ensureTopic(ctx context.Context, topic string) error {
	s.mu.Lock()
	_, ok := s.topics[topic]
	s.mu.Unlock()
	if ok {
		return nil
	}
	// Look first: a producer may lack CREATE permission on existing topics.
	details, err := s.admin.ListTopics(ctx, topic)
	if err != nil {
		return fmt.Errorf("look up topic: %w", err)
	}
	d, ok := details[topic]
	exists := ok && d.Err == nil
	if ok && d.Err != nil && !errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
		return fmt.Errorf("look up topic: %w", d.Err)
	}
	if !exists {
		if s.cfg.DisableCreateTopics {
			return fmt.Errorf("%w: %q (create it, or enable topic creation)", ErrTopicMissing, topic)
		}
		resp, err := s.admin.CreateTopic(ctx, s.cfg.TopicPartitions, s.cfg.TopicReplicationFactor, nil, topic)
		switch {
		case err == nil:
			s.log.Info("created topic", "topic", topic, "partitions", resp.NumPartitions, "replication_factor", resp.ReplicationFactor)
		case errors.Is(err, kerr.TopicAlreadyExists):
		default:
			return fmt.Errorf("create topic: %w", err)
		}
	}
	maxBytes := int32(0)
	if rcs, err := s.admin.DescribeTopicConfigs(ctx, topic); err == nil {
		if rc, err := rcs.On(topic, nil); err == nil && rc.Err == nil {
			for _, c := range rc.Configs {
				if c.Key == "max.message.bytes" && c.Value != nil {
					if n, err := strconv.ParseInt(*c.Value, 10, 32); err == nil {
						maxBytes = int32(n)
					}
				}
			}
		}
	}
	s.mu.Lock()
	s.topics[topic] = maxBytes
	s.mu.Unlock()
	return nil
}

// MaxMessageBytes returns the topic's max.message.bytes as read when the
// topic was first used, or 0 when unknown.
func (s *Sink) MaxMessageBytes(topic string) int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.topics[topic]
}

// batchMaxBytes lets a batch grow to the topic's limit when known.
func (s *Sink) batchMaxBytes(topic string) int32 {
	if n := s.MaxMessageBytes(topic); n > 0 {
		return n
	}
	return s.cfg.BatchMaxBytes
}

// Flush waits until every produced record is acknowledged or failed, or ctx
// ends.
func (s *Sink) Flush(ctx context.Context) error { return s.client.Flush(ctx) }

// Buffered returns the number of records produced and not yet finished.
func (s *Sink) Buffered() int64 { return s.client.BufferedProduceRecords() }

// Close closes the client. Records still buffered fail with
// kgo.ErrClientClosed; call it after the final watermark was confirmed.
func (s *Sink) Close() { s.client.Close() }
