package sink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/jackc/pglogrepl"
	"github.com/klauspost/compress/zstd"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/sink/schema"
)

// Header names walrelay sets on every record.
const (
	HeaderID            = "id"
	HeaderEventType     = "event_type"
	HeaderAggregateType = "aggregate_type"
	HeaderLSN           = "walrelay.lsn"
	HeaderXID           = "walrelay.xid"
	// HeaderCommitTime is the transaction's commit time (RFC 3339, UTC),
	// set when the record's timestamp is not it (a mapped timestamp column):
	// what a recovery and prune read back as the time of the last
	// delivered event, whatever clock the column came from.
	HeaderCommitTime = "walrelay.commit_time"
)

// ErrTopicMissing reports a topic that does not exist while topic creation
// is off.
var ErrTopicMissing = errors.New("topic does not exist")

// Batching modes (Config.Batching).
const (
	BatchingAdaptive = "adaptive"
	BatchingFixed    = "fixed"
)

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
	// Batching is BatchingAdaptive (the default) or BatchingFixed.
	// Adaptive: records go to Kafka in rounds, at most one in flight and two
	// starting at least Linger apart; a record that finds neither a round in
	// flight nor one started within Linger goes out at once (see gate.go).
	// Fixed: Kafka's linger, each partition's batch waits Linger from its
	// first record. A transactional sink (WithTransactionalID) always
	// batches fixed.
	Batching string
	// Linger is, with adaptive batching, the least time between two produce
	// rounds; with fixed batching, how long a partition waits for more
	// records before sending a batch. 0: no wait (adaptive: the next round
	// goes as soon as the last one finished).
	Linger time.Duration
	// BatchMaxBytes caps one record batch. Default 1 MiB (Kafka's default
	// max.message.bytes).
	BatchMaxBytes int32
	// MaxBufferedBytes caps the bytes of records produced and not yet
	// acknowledged; Send blocks above it. Default 64 MiB.
	MaxBufferedBytes int
	// MaxBufferedRecords caps the records produced and not yet acknowledged.
	// Default 10000.
	MaxBufferedRecords int
	// CreateTopics creates a missing topic before the first record to it.
	// When false, a missing topic is an error naming it. Default true
	// (set DisableCreateTopics to turn it off).
	DisableCreateTopics bool
	// ValidateOnlyTopics, for a dry run, asks Kafka only to validate the
	// creation of a missing topic (CreateTopics with validate_only): a
	// record for it is then prepared for the topic Kafka says it would
	// create (its partitions and max.message.bytes), and nothing is
	// created. Such a record must not be sent.
	ValidateOnlyTopics bool
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
	// TopicLookupTimeout bounds one look-up, creation or re-read of a topic;
	// past it the attempt counts as Kafka being unavailable (IsRetryable).
	// Default 10s.
	TopicLookupTimeout time.Duration
	// TopicRefreshInterval is how often the partition count and
	// max.message.bytes of a topic in use are re-read (on its next record),
	// so that partitions added or a limit raised are seen without a
	// restart. A record refused by the cached values re-reads them first
	// (at most every 100ms per topic). Default 1m.
	TopicRefreshInterval time.Duration
	// Schema encodes the values (and optionally keys) of the tables it has
	// rules for in the Confluent wire format with a schema registry (see
	// package schema and docs/schema-registry.md). The zero value encodes
	// nothing.
	Schema schema.Config
	// JSONValues gives tables ("schema.table", as Event.Table) the record
	// values Debezium's outbox router writes through Kafka Connect's
	// JsonConverter: the envelope of decoder.Columns.Envelope and the
	// expanded JSON payload (see JSONValue). A schema rule then encodes that
	// value (the envelope first). Other tables' values are the payload as
	// stored.
	JSONValues map[string]JSONValue
}

// Validate reports a configuration that cannot work as a *SettingError
// naming the setting.
func (c Config) Validate() error {
	if len(c.Brokers) == 0 {
		return settingErr("Brokers", "none given: set the Kafka brokers (host:port)")
	}
	for _, b := range c.Brokers {
		host, port, err := net.SplitHostPort(b)
		if err != nil || host == "" {
			return settingErr("Brokers", "%q is not host:port", b)
		}
		if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
			return settingErr("Brokers", "%q has no valid port", b)
		}
	}
	if _, err := codec(c.Compression); err != nil {
		return &SettingError{Setting: "Compression", Err: err}
	}
	if c.Topic != "" {
		if _, err := ParseTemplate(c.Topic); err != nil {
			return &SettingError{Setting: "Topic", Err: err}
		}
	}
	for table, t := range c.TableTopics {
		if _, err := ParseTemplate(t); err != nil {
			return settingErr("TableTopics", "%s: %w", table, err)
		}
	}
	if c.DLQTopic != "" {
		if err := ValidateTopic(c.DLQTopic); err != nil {
			return &SettingError{Setting: "DLQTopic", Err: err}
		}
	}
	if c.Batching != "" && c.Batching != BatchingAdaptive && c.Batching != BatchingFixed {
		return settingErr("Batching", "%q is not %s or %s", c.Batching, BatchingAdaptive, BatchingFixed)
	}
	if c.Linger < 0 || c.Linger > time.Minute {
		return settingErr("Linger", "%v is not between 0 and 1m", c.Linger)
	}
	if c.BatchMaxBytes != 0 && (c.BatchMaxBytes < 512 || c.BatchMaxBytes > 1<<30) {
		return settingErr("BatchMaxBytes", "%d is not between 512 and 1 GiB", c.BatchMaxBytes)
	}
	if c.MaxBufferedBytes < 0 || c.MaxBufferedRecords < 0 {
		return settingErr("MaxBufferedBytes", "buffer sizes must not be negative")
	}
	if c.TopicLookupTimeout < 0 || c.TopicRefreshInterval < 0 {
		return settingErr("TopicLookupTimeout", "topic lookup timeout and refresh interval must not be negative")
	}
	if c.TopicPartitions < -1 || c.TopicReplicationFactor < -1 {
		return settingErr("TopicPartitions", "topic partitions and replication factor must be -1 (broker default) or positive")
	}
	if err := c.Schema.Validate(); err != nil {
		return err // a *schema.SettingError
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
	if c.Batching == "" {
		c.Batching = BatchingAdaptive
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
	if c.TopicLookupTimeout == 0 {
		c.TopicLookupTimeout = 10 * time.Second
	}
	if c.TopicRefreshInterval == 0 {
		c.TopicRefreshInterval = time.Minute
	}
}

// codec maps a compression name to franz-go's codec. zstd runs at its fastest
// level: on JSON outbox payloads it compresses both faster and two to three
// times smaller than lz4, and it stores incompressible batches raw instead of
// spending CPU on them (figures in docs/configuration.md, "Compression"). franz-go's own
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
	return kgo.CompressionCodec{}, fmt.Errorf("%q is not one of none, gzip, snappy, lz4, zstd", name)
}

// minCompressBytes is the smallest record batch (uncompressed record bytes)
// that is compressed. At live rates a batch holds one or a few records: a
// codec's per-call set-up (zstd's block and table encoding) then costs more
// CPU than the few bytes it saves are worth, on both sides of the wire.
const minCompressBytes = 1 << 10

// smallBatchesRaw is the configured codec, except that batches below
// minCompressBytes go out uncompressed (a batch's codec is per batch in
// Kafka's format; consumers read both).
type smallBatchesRaw struct{ kgo.Compressor }

func (c smallBatchesRaw) Compress(dst *bytes.Buffer, src []byte, flags ...kgo.CompressFlag) ([]byte, kgo.CompressionCodecType) {
	if c.Compressor == nil || len(src) < minCompressBytes {
		return src, kgo.CodecNone
	}
	return c.Compressor.Compress(dst, src, flags...)
}

// Option sets an optional collaborator.
type Option func(*Sink)

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(s *Sink) { s.log = l } }

// WithOnReservedHeader sets a function called once for every entry of an
// event's headers column that walrelay drops because it would shadow one of
// walrelay's own headers (id, event_type, aggregate_type, walrelay.*, ce_*,
// and content-type with CloudEvents on); the relay counts them in a
// metric. It runs on the goroutine that calls Prepare and must not block.
func WithOnReservedHeader(fn func(key string)) Option {
	return func(s *Sink) { s.onReserved = fn }
}

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

// Sink produces events to Kafka. Prepare and its dead-letter counterparts
// are called from one goroutine; Send, MaxMessageBytes,
// Buffered and Flush are safe for concurrent use; the done callbacks run on
// franz-go's goroutines. Close must be called once.
type Sink struct {
	cfg   Config
	tmpl  Template
	tmpls map[string]Template // by Event.Table
	log   *slog.Logger
	extra []kgo.Opt
	// pingOpts are the client options without the extras and without
	// AlwaysRetryEOF, for the client of Ping.
	pingOpts []kgo.Opt

	client *kgo.Client
	admin  *kadm.Client

	onReserved   func(key string)
	reservedSeen map[string]bool // reserved header keys already logged

	mu     sync.Mutex
	topics map[string]topicMeta // topics known to exist

	gate          *gate // adaptive batching; nil when fixed or transactional
	transactional bool  // WithTransactionalID

	schemas *schema.Encoder // Config.Schema; nil when it has no rules
	tracer  trace.Tracer    // WithTracerProvider; nil: no spans (tracing.go)
}

// New validates cfg and builds the Kafka client. franz-go connects lazily:
// nothing is dialed until Ping or the first Prepare.
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
		topics: map[string]topicMeta{}, reservedSeen: map[string]bool{}}
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
	// franz-go's warnings reach the log (not Ping's: its failure says it all).
	s.extra = append([]kgo.Opt{kgo.WithLogger(kafkaLogger(s.log))}, s.extra...)
	// Adaptive batching paces the rounds itself (the gate); the client sends
	// what the gate hands it at once.
	adaptive := cfg.Batching == BatchingAdaptive && !s.transactional
	linger := cfg.Linger
	if adaptive {
		linger = 0
	}
	comp, _ := codec(cfg.Compression)
	inner, err := kgo.DefaultCompressor(comp)
	if err != nil {
		return nil, fmt.Errorf("kafka compression: %w", err)
	}
	kopts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(cfg.ClientID),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.WithCompressor(smallBatchesRaw{inner}),
		kgo.ProducerLinger(linger),
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
	sec, err := securityOpts(cfg, s.log)
	if err != nil {
		return nil, err
	}
	kopts = append(kopts, sec...)
	if err := s.initSchemas(); err != nil {
		return nil, err
	}
	s.pingOpts = kopts
	// An EOF on a connection's first read is taken by franz-go for a
	// configuration error (SASL or TLS missing) and fails the records at
	// once. Ping checks the configuration at start with franz-go's default;
	// after it, such an EOF is a network cut or a restarting broker, retried
	// like any other (the watermark waits).
	cl, err := kgo.NewClient(append(append(kopts, kgo.AlwaysRetryEOF()), s.extra...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	if cl.OptValue(kgo.TransactionalID) != "" && !s.transactional {
		cl.Close()
		return nil, errors.New("kafka client: a transactional id must be set with sink.WithTransactionalID")
	}
	s.client = cl
	s.admin = kadm.NewClient(cl)
	if adaptive {
		s.gate = newGate(func() *kgo.Client { return s.client }, cfg.MaxBufferedRecords, cfg.MaxBufferedBytes, cfg.Linger)
	}
	return s, nil
}

// Ping checks that at least one broker answers. A connection refused for a
// TLS or SASL reason is a *SecurityError that names the setting to fix.
func (s *Sink) Ping(ctx context.Context) error {
	// A client of its own, without AlwaysRetryEOF: a broker that closes the
	// connection at once (SASL or TLS expected) must fail the ping, not be
	// retried until the timeout.
	cl, err := kgo.NewClient(s.pingOpts...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	if err := cl.Ping(ctx); err != nil {
		if serr := s.cfg.securityError(err); serr != nil {
			return serr
		}
		return &UnreachableError{Brokers: s.cfg.Brokers, Err: err}
	}
	return nil
}

// UnreachableError is Ping's error when no broker answers: the brokers are
// wrong, down, or out of this host's reach.
type UnreachableError struct {
	Brokers []string
	Err     error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("kafka: no broker reachable at %s: %v; fix: check the broker addresses (host:port of a listener this host can reach, as the broker advertises it), that a broker runs there, and that no firewall is in between",
		strings.Join(e.Brokers, ","), e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// Fields names the field of the broker addresses.
func (e *UnreachableError) Fields() []string { return []string{"sink.Config.Brokers"} }

// Topic returns the topic ev routes to.
func (s *Sink) Topic(ev *decoder.Event) (string, error) {
	if t, ok := s.tmpls[ev.Table]; ok {
		return t.Render(ev)
	}
	return s.tmpl.Render(ev)
}

// Record is an event made ready for Kafka by Prepare or PrepareDeadLetter,
// to be handed to Send. The zero value is not usable.
type Record struct {
	rec *kgo.Record
	id  string
	lsn pglogrepl.LSN
}

// Prepare turns ev into a record Kafka will accept, or says why it cannot,
// with a *ProduceError wrapping one of: ErrInvalidTopic (the rendered topic
// is not a valid name), ErrTopicMissing (topic creation is off),
// ErrTopicRefused (Kafka refuses to create the topic: invalid or colliding
// name, policy), ErrTopicNotAuthorized, ErrTooLarge (larger than the topic's
// max.message.bytes, checked on the uncompressed size), ErrNoSuchPartition
// (its explicit partition does not exist), ErrEnvelopeValue (the event's
// JSON value, Config.JSONValues, cannot be written), ErrSchemaMismatch (the
// payload or key does not fit its schema, Config.Schema), or
// ErrKafkaUnavailable or
// ErrRegistryUnavailable (Kafka or the schema registry did not answer;
// IsRetryable: call again later).
//
// Prepare looks the topic up on its first use, creating it if missing and
// allowed, and re-reads its partition count and max.message.bytes every
// Config.TopicRefreshInterval and before refusing a record on them. ctx
// bounds these calls; each is also bounded by Config.TopicLookupTimeout.
// Call it from one goroutine.
//
// Ownership: the record takes ev's byte slices (AggregateID, Payload, header
// values) without copying them; the caller must not modify them afterwards.
// ev itself is not retained.
func (s *Sink) Prepare(ctx context.Context, ev *decoder.Event) (Record, error) {
	topic, err := s.Topic(ev)
	if err != nil {
		return Record{}, &ProduceError{Topic: topic, EventID: ev.ID, LSN: ev.LSN.String(), Err: err}
	}
	m, err := s.topic(ctx, topic)
	if err != nil {
		return Record{}, &ProduceError{Topic: topic, EventID: ev.ID, LSN: ev.LSN.String(), Err: err}
	}
	rec, dropped := s.record(topic, ev)
	if err := s.encodeJSONValue(ev, rec); err != nil {
		return Record{}, &ProduceError{Topic: topic, EventID: ev.ID, LSN: ev.LSN.String(), Err: err}
	}
	if err := s.encodeSchema(ctx, ev.Table, ev.EventType, rec); err != nil {
		return Record{}, &ProduceError{Topic: topic, EventID: ev.ID, LSN: ev.LSN.String(), Err: err}
	}
	if err := s.checkSize(ctx, m, rec); err != nil {
		return Record{}, &ProduceError{Topic: topic, EventID: ev.ID, LSN: ev.LSN.String(), Err: err}
	}
	if err := s.checkPartition(ctx, m, rec); err != nil {
		return Record{}, &ProduceError{Topic: topic, EventID: ev.ID, LSN: ev.LSN.String(), Err: err}
	}
	if dropped > 0 {
		s.reportReserved(ev)
	}
	return Record{rec: rec, id: ev.ID, lsn: ev.LSN}, nil
}

// Send hands r to the producer. done is called exactly once: with nil after
// Kafka acknowledged the record (acks=all), or with a *ProduceError.
//
// ctx bounds the record's whole life, as in franz-go: Send blocks while the
// client's buffer is full until ctx ends, and a record still buffered when
// ctx ends fails. Pass a context that outlives a graceful drain.
func (s *Sink) Send(ctx context.Context, r Record, done func(error)) {
	id, lsn := r.id, r.lsn
	promise := func(rec *kgo.Record, err error) {
		endSpan(rec, err)
		if err != nil {
			done(&ProduceError{Topic: rec.Topic, EventID: id, LSN: lsn.String(), Err: err})
			return
		}
		done(nil)
	}
	if s.gate != nil {
		s.gate.send(ctx, r.rec, promise)
		return
	}
	s.client.Produce(ctx, r.rec, promise)
}

// record builds ev's record with the configured extras, and says how many
// entries of ev's headers column it dropped as reserved.
func (s *Sink) record(topic string, ev *decoder.Event) (*kgo.Record, int) {
	rec, dropped := buildRecord(topic, ev, s.cfg.CloudEvents)
	if s.cfg.CloudEvents {
		rec.Headers = append(rec.Headers, CloudEventsHeaders(ev, rec.Timestamp, s.cfg.CloudEventsSource, s.cfg.ContentType)...)
	}
	if s.tracer != nil {
		s.startSpan(rec, ev)
	}
	return rec, dropped
}

// maxReservedLogged bounds the reserved header keys remembered for logging.
const maxReservedLogged = 64

// reportReserved counts ev's reserved header entries and logs each key the
// first time it is seen (up to maxReservedLogged keys per process).
func (s *Sink) reportReserved(ev *decoder.Event) {
	for _, h := range ev.Headers {
		if !reservedHeader(h.Key, s.cfg.CloudEvents) {
			continue
		}
		if s.onReserved != nil {
			s.onReserved(h.Key)
		}
		if s.reservedSeen[h.Key] || len(s.reservedSeen) >= maxReservedLogged {
			continue
		}
		s.reservedSeen[h.Key] = true
		s.log.Warn("dropped a headers-column entry that would shadow a walrelay header (logged once per key)",
			"key", h.Key, "id", ev.ID, "lsn", ev.LSN.String(), "table", ev.Table)
	}
}

// reservedHeader reports whether key names a header walrelay sets itself,
// which the headers column cannot supply: id, event_type, aggregate_type,
// anything under walrelay. and CloudEvents' ce_ prefix, and, with
// CloudEvents on, content-type. Names are compared as Kafka does: exactly.
func reservedHeader(key string, cloudEvents bool) bool {
	switch key {
	case HeaderID, HeaderEventType, HeaderAggregateType:
		return true
	case HeaderContentType:
		return cloudEvents
	}
	return strings.HasPrefix(key, "walrelay.") || strings.HasPrefix(key, "ce_")
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

// buildRecord turns ev into the Kafka record of docs/outbox-contract.md and
// says how many entries of ev.Headers it dropped because they would shadow
// walrelay's own headers (reservedHeader).
func buildRecord(topic string, ev *decoder.Event, cloudEvents bool) (*kgo.Record, int) {
	hs := make([]kgo.RecordHeader, 0, 5+len(ev.Headers))
	hs = append(hs,
		kgo.RecordHeader{Key: HeaderID, Value: stringBytes(ev.ID)},
		kgo.RecordHeader{Key: HeaderEventType, Value: stringBytes(ev.EventType)},
		kgo.RecordHeader{Key: HeaderAggregateType, Value: stringBytes(ev.AggregateType)},
	)
	dropped := 0
	for _, h := range ev.Headers {
		if reservedHeader(h.Key, cloudEvents) {
			dropped++
			continue
		}
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
	} else if !ts.Equal(ev.CommitTime) && !ev.CommitTime.IsZero() {
		hs = append(hs, kgo.RecordHeader{Key: HeaderCommitTime, Value: []byte(ev.CommitTime.UTC().Format(time.RFC3339Nano))})
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
	}, dropped
}

// MaxMessageBytes returns the topic's max.message.bytes as last read, or 0
// when unknown. Safe for concurrent use.
func (s *Sink) MaxMessageBytes(topic string) int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.topics[topic].maxBytes
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
func (s *Sink) Flush(ctx context.Context) error {
	for {
		if err := s.client.Flush(ctx); err != nil {
			return err
		}
		if s.gate == nil || s.gate.buffered() == 0 {
			return nil
		}
		// Records the gate hands over after the client's last one finished.
		t := time.NewTimer(time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Buffered returns the number of records produced and not yet finished.
func (s *Sink) Buffered() int64 {
	if s.gate != nil {
		return s.gate.buffered()
	}
	return s.client.BufferedProduceRecords()
}

// Close closes the client. Records still buffered fail with
// kgo.ErrClientClosed; call it after the final watermark was confirmed.
func (s *Sink) Close() {
	s.client.Close()
	if s.gate != nil {
		s.gate.fail(kgo.ErrClientClosed)
	}
}
