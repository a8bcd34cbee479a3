package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/walrelay/walrelay/checkpoint"
	"github.com/walrelay/walrelay/relay"
	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/replication"
	"github.com/walrelay/walrelay/sink"
)

// Config is everything `walrelay run` needs. Load fills it from defaults, a
// YAML file, WALRELAY_* environment variables and flags, in rising priority.
type Config struct {
	PostgresDSN  string
	KafkaBrokers []string
	Slot         string
	Publication  string
	Tables       []string
	Topic        string
	Columns      string // column preset: default or debezium
	// ColumnMap overrides single columns of the preset for every table given
	// with --table: role (id, aggregate_type, aggregate_id, event_type,
	// payload, headers, timestamp) → column name; "none" unmaps an optional one.
	ColumnMap map[string]string
	// HeaderColumns are table columns copied into record headers (for every
	// table given with --table).
	HeaderColumns []string
	// TableSpecs, from the YAML key tables, gives each outbox table its own
	// preset, columns and topic; it replaces --table, --columns and the
	// column flags.
	TableSpecs []TableSpec
	// MessagePrefix is the logical message prefix of tableless outbox events.
	// Default "": off. The tableless outbox is opt-in because any role may
	// call pg_logical_emit_message unless EXECUTE on it is revoked from
	// PUBLIC (walrelay doctor warns while it is not).
	MessagePrefix string

	CloudEvents       bool
	CloudEventsSource string
	ContentType       string

	MetricsAddr string

	CreateSlot             bool
	CreatePublication      bool
	CreateTopics           bool
	TopicPartitions        int
	TopicReplicationFactor int

	HeartbeatInterval time.Duration
	StatusInterval    time.Duration
	MaxInFlight       int
	ShutdownTimeout   time.Duration
	KafkaTimeout      time.Duration

	OnPoison string
	DLQTopic string

	Compression      string
	Batching         string
	Linger           time.Duration
	BatchMaxBytes    int
	MaxBufferedBytes int

	LogLevel  string
	LogFormat string
	PProf     bool

	// Kafka connection security (sink.TLSConfig, sink.SASLConfig) and the
	// files secrets may be read from instead (see readSecretFiles).
	KafkaClientID    string
	KafkaTLS         sink.TLSConfig
	KafkaSASL        sink.SASLConfig
	PostgresDSNFile  string
	SASLPasswordFile string
	// SlotMetricsInterval is how often pg_replication_slots is read for the
	// walrelay_slot_* metrics (0 disables). StandbyRetryInterval is the fixed
	// wait between tries of a slot held by another process. SlotFailover
	// creates the slot with failover = true (Postgres 17+).
	SlotMetricsInterval  time.Duration
	StandbyRetryInterval time.Duration
	SlotFailover         bool
	// Procs is GOMAXPROCS for `walrelay run`: 1 by default, 0 leaves Go's
	// own (the GOMAXPROCS variable, else the CPUs available). The default
	// is 0 when the GOMAXPROCS variable is set.
	Procs int

	// Delivery is at-least-once (default) or exactly-once (see eos.go and
	// docs/exactly-once.md); the other keys apply to exactly-once only.
	Delivery                    string
	TransactionalID             string
	CheckpointTopic             string
	CheckpointReplicationFactor int
	TxnCommitInterval           time.Duration
	TxnMaxRecords               int
}

// Defaults returns the configuration used when nothing is set.
func Defaults() Config {
	return Config{
		Slot:                   "walrelay",
		Publication:            "walrelay",
		Tables:                 []string{"public.outbox"},
		Topic:                  "outbox.event.{aggregate_type}",
		Columns:                "default",
		ColumnMap:              map[string]string{},
		CloudEventsSource:      "/walrelay/{table}",
		ContentType:            "application/json",
		MetricsAddr:            ":9187",
		CreateSlot:             true,
		CreatePublication:      true,
		CreateTopics:           true,
		TopicPartitions:        -1,
		TopicReplicationFactor: -1,
		HeartbeatInterval:      10 * time.Second,
		StatusInterval:         time.Second,
		MaxInFlight:            checkpoint.DefaultMaxInFlight,
		ShutdownTimeout:        30 * time.Second,
		KafkaTimeout:           15 * time.Second,
		OnPoison:               relay.OnPoisonDLQ,
		DLQTopic:               sink.DefaultDLQTopic,
		Compression:            "zstd",
		Batching:               sink.BatchingAdaptive,
		Linger:                 5 * time.Millisecond,
		BatchMaxBytes:          1 << 20,
		MaxBufferedBytes:       64 << 20,
		KafkaClientID:          "walrelay",
		LogLevel:               "info",
		LogFormat:              "json",
		SlotMetricsInterval:    5 * time.Second,
		StandbyRetryInterval:   time.Second,
		Procs:                  1,

		Delivery:                    DeliveryAtLeastOnce,
		CheckpointTopic:             sink.DefaultCheckpointTopic,
		CheckpointReplicationFactor: -1,
		TxnCommitInterval:           100 * time.Millisecond,
	}
}

func (c *Config) settings() []setting {
	return []setting{
		{"postgres-dsn", "Postgres connection (libpq URL or key=value DSN); required", stringVal{&c.PostgresDSN}},
		{"kafka-brokers", "Kafka seed brokers, comma-separated host:port; required", listVal{&c.KafkaBrokers}},
		{"slot", "replication slot name", stringVal{&c.Slot}},
		{"publication", "publication name", stringVal{&c.Publication}},
		{"table", "outbox table(s), schema.name, comma-separated", listVal{&c.Tables}},
		{"topic", "topic template; placeholders {aggregate_type}, {event_type}, {table}", stringVal{&c.Topic}},
		{"columns", "outbox column preset: default or debezium", stringVal{&c.Columns}},
		{"column-id", "column holding the event id (overrides the preset)", mapVal{c.ColumnMap, "id"}},
		{"column-aggregate-type", "column holding the aggregate type", mapVal{c.ColumnMap, "aggregate_type"}},
		{"column-aggregate-id", "column holding the aggregate id (the record key)", mapVal{c.ColumnMap, "aggregate_id"}},
		{"column-event-type", "column holding the event type", mapVal{c.ColumnMap, "event_type"}},
		{"column-payload", "column holding the payload (jsonb, json, text or bytea)", mapVal{c.ColumnMap, "payload"}},
		{"column-headers", "jsonb column whose top-level string entries become headers (none: no such column)", mapVal{c.ColumnMap, "headers"}},
		{"column-timestamp", "timestamp column used as the record timestamp (none: commit time)", mapVal{c.ColumnMap, "timestamp"}},
		{"column-partition", "integer column holding an explicit Kafka partition (NULL: by key)", mapVal{c.ColumnMap, "partition"}},
		{"header-columns", "more columns copied into record headers, comma-separated (may be added to the table later)", listVal{&c.HeaderColumns}},
		{"message-prefix", "logical message prefix of tableless outbox events, e.g. walrelay.outbox (opt-in; empty, the default, disables)", stringVal{&c.MessagePrefix}},
		{"cloudevents", "add CloudEvents binary-mode headers (ce_id, ce_type, ce_source, ce_time, ce_specversion, content-type)", boolVal{&c.CloudEvents}},
		{"cloudevents-source", "ce_source; {table} is replaced by schema.table (or message)", stringVal{&c.CloudEventsSource}},
		{"content-type", "content-type header in CloudEvents mode", stringVal{&c.ContentType}},
		{"metrics-addr", "listen address for /metrics, /healthz, /readyz (port 0 picks one and logs it); empty disables", stringVal{&c.MetricsAddr}},
		{"create-slot", "create the replication slot when missing", boolVal{&c.CreateSlot}},
		{"create-publication", "create the publication when missing", boolVal{&c.CreatePublication}},
		{"create-topics", "create missing topics (otherwise stop with an error naming the topic)", boolVal{&c.CreateTopics}},
		{"topic-partitions", "partitions of created topics (-1: broker default)", intVal{&c.TopicPartitions}},
		{"topic-replication-factor", "replication factor of created topics (-1: broker default)", intVal{&c.TopicReplicationFactor}},
		{"heartbeat-interval", "interval of transactional heartbeat messages (0 disables)", durVal{&c.HeartbeatInterval}},
		{"status-interval", "how often a moved confirmed position is reported to Postgres", durVal{&c.StatusInterval}},
		{"max-in-flight", "cap on records and transactions awaiting Kafka acks (backpressure)", intVal{&c.MaxInFlight}},
		{"shutdown-timeout", "how long SIGTERM waits for in-flight records", durVal{&c.ShutdownTimeout}},
		{"kafka-timeout", "how long startup waits for a Kafka broker to answer", durVal{&c.KafkaTimeout}},
		{"on-poison", "what to do with an event Kafka can never accept: dlq (dead-letter topic) or stop", stringVal{&c.OnPoison}},
		{"dlq-topic", "dead-letter topic", stringVal{&c.DLQTopic}},
		{"compression", "Kafka batch compression: none, gzip, snappy, lz4, zstd (fastest level)", stringVal{&c.Compression}},
		{"batching", "adaptive: produce rounds at least --linger apart, one in flight, a record going out at once when neither is under way; fixed: Kafka's linger, every batch waits --linger (exactly-once always batches fixed)", stringVal{&c.Batching}},
		{"linger", "adaptive batching: least time between two produce rounds; fixed: how long a partition waits to fill a batch; 0: no wait", durVal{&c.Linger}},
		{"batch-max-bytes", "largest record batch (bytes, or with a unit: 1MiB, 512KiB, 1MB)", sizeVal{&c.BatchMaxBytes}},
		{"max-buffered-bytes", "cap on bytes of records awaiting Kafka acks (e.g. 64MiB)", sizeVal{&c.MaxBufferedBytes}},
		{"log-level", "debug, info, warn or error", stringVal{&c.LogLevel}},
		{"log-format", "json or text", stringVal{&c.LogFormat}},
		{"pprof", "serve Go profiles under /debug/pprof/ on the metrics address", boolVal{&c.PProf}},
		{"postgres-dsn-file", "file holding the Postgres DSN (instead of --postgres-dsn)", stringVal{&c.PostgresDSNFile}},
		{"kafka-client-id", "Kafka client id (broker logs, quotas, ACL audit)", stringVal{&c.KafkaClientID}},
		{"kafka-tls", "connect to the brokers with TLS (system roots unless --kafka-tls-ca-file)", boolVal{&c.KafkaTLS.Enabled}},
		{"kafka-tls-ca-file", "PEM file of the CA(s) that sign the brokers' certificates; implies TLS", stringVal{&c.KafkaTLS.CAFile}},
		{"kafka-tls-cert-file", "PEM client certificate for mTLS (with --kafka-tls-key-file); implies TLS", stringVal{&c.KafkaTLS.CertFile}},
		{"kafka-tls-key-file", "PEM private key of --kafka-tls-cert-file", stringVal{&c.KafkaTLS.KeyFile}},
		{"kafka-tls-server-name", "name checked against the brokers' certificates instead of the broker host; implies TLS", stringVal{&c.KafkaTLS.ServerName}},
		{"kafka-tls-insecure-skip-verify", "accept any broker certificate (tests only; logs a warning); implies TLS", boolVal{&c.KafkaTLS.InsecureSkipVerify}},
		{"sasl-mechanism", "Kafka SASL mechanism: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM (empty: none)", stringVal{&c.KafkaSASL.Mechanism}},
		{"sasl-username", "SASL username (PLAIN, SCRAM)", stringVal{&c.KafkaSASL.Username}},
		{"sasl-password", "SASL password (PLAIN, SCRAM); prefer --sasl-password-file or the env var", stringVal{&c.KafkaSASL.Password}},
		{"sasl-password-file", "file holding the SASL password", stringVal{&c.SASLPasswordFile}},
		{"sasl-oauth-token-file", "file holding the OAUTHBEARER token, read again on every authentication", stringVal{&c.KafkaSASL.OAuthTokenFile}},
		{"slot-metrics-interval", "how often pg_replication_slots is read for the walrelay_slot_* metrics (0 disables)", durVal{&c.SlotMetricsInterval}},
		{"standby-retry-interval", "fixed wait between tries of a slot another process holds (standby)", durVal{&c.StandbyRetryInterval}},
		{"procs", "threads running walrelay's code at once (GOMAXPROCS); 1 suits its one stream best, see docs/configuration.md; 0: Go's default (the CPUs available); 0 when the GOMAXPROCS variable is set", intVal{&c.Procs}},
		{"slot-failover", "create the slot with failover = true, synchronized to physical standbys (Postgres 17+)", boolVal{&c.SlotFailover}},
		{"delivery", "at-least-once or exactly-once (Kafka transactions; consumers must read with isolation.level=read_committed)", stringVal{&c.Delivery}},
		{"transactional-id", "exactly-once: Kafka transactional.id (default walrelay-<slot>; every instance of a slot must use the same)", stringVal{&c.TransactionalID}},
		{"checkpoint-topic", "exactly-once: compacted topic of the committed checkpoints (created if missing)", stringVal{&c.CheckpointTopic}},
		{"checkpoint-replication-factor", "exactly-once: replication factor of a created checkpoint topic (-1: broker default)", intVal{&c.CheckpointReplicationFactor}},
		{"txn-commit-interval", "exactly-once: how long a Kafka transaction stays open before it is committed at the next Postgres transaction end", durVal{&c.TxnCommitInterval}},
		{"txn-max-records", "exactly-once: records after which a Kafka transaction is committed at the next Postgres transaction end (0: twice --max-in-flight)", intVal{&c.TxnMaxRecords}},
	}
}

// readSecretFiles replaces each secret with the contents of its -file
// setting, when set. Trailing newlines are not part of the secret. Setting

// Load builds the configuration of `walrelay run` or `walrelay doctor` (name,
// e.g. "walrelay run") from args (flags, without the subcommand), the
// environment (getenv) and the YAML file named by --config or
// WALRELAY_CONFIG, in rising priority over the defaults. It validates the
// result. -h prints usage and the flags to help and returns flag.ErrHelp.
func Load(name, usage string, args []string, getenv func(string) string, help io.Writer) (Config, error) {
	cfg := Defaults()
	if getenv("GOMAXPROCS") != "" {
		cfg.Procs = 0 // Go's own variable, when set, wins over the default
	}
	fs := newFlagSet(name, usage)
	// No flag default comes from the environment: -h prints the defaults,
	// and an environment value may be a secret.
	configFile := fs.String("config", "", "YAML config file (keys as the flags, with _ for -) (env WALRELAY_CONFIG)")
	// Flags are parsed into a scratch Config first, then applied last.
	scratch := Defaults()
	for _, s := range scratch.settings() {
		fs.Var(s.value, s.name, s.usage+" (env "+s.env()+")")
	}
	if err := ParseFlags(fs, args, help); err != nil {
		return Config{}, err
	}
	if !setFlags(fs)["config"] {
		*configFile = getenv("WALRELAY_CONFIG")
	}
	byName := map[string]setting{}
	for _, s := range cfg.settings() {
		byName[s.name] = s
	}
	if *configFile != "" {
		if err := applyYAML(*configFile, byName, &cfg); err != nil {
			return Config{}, err
		}
	}
	for _, s := range cfg.settings() {
		if v := getenv(s.env()); v != "" {
			if err := s.value.Set(v); err != nil {
				return Config{}, &Error{Key: s.name, Source: "env " + s.env(), Err: err}
			}
		}
	}
	var ferr error
	fs.Visit(func(f *flag.Flag) {
		if s, ok := byName[f.Name]; ok && ferr == nil {
			if err := s.value.Set(f.Value.String()); err != nil {
				ferr = &Error{Key: s.name, Source: "flag", Err: err}
			}
		}
	})
	if ferr != nil {
		return Config{}, ferr
	}
	if err := cfg.readSecretFiles(); err != nil {
		return Config{}, err
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// readSecretFiles replaces each secret with the contents of its -file
// setting, when set (see ReadSecretFile).
func (c *Config) readSecretFiles() error {
	if err := ReadSecretFile("postgres-dsn", c.PostgresDSNFile, &c.PostgresDSN); err != nil {
		return err
	}
	return ReadSecretFile("sasl-password", c.SASLPasswordFile, &c.KafkaSASL.Password)
}

func applyYAML(path string, byName map[string]setting, cfg *Config) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return &Error{Key: "config", Source: "flag", Err: err}
	}
	var raw map[string]any
	if err := yaml.Unmarshal(b, &raw); err != nil {
		return &Error{Key: "config", Source: path, Err: fmt.Errorf("not valid YAML: %w", err)}
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k == "tables" {
			if err := tableSpecsFromYAML(raw[k], cfg); err != nil {
				return &Error{Key: "tables", Source: path, Err: err}
			}
			continue
		}
		s, ok := byName[strings.ReplaceAll(k, "_", "-")]
		if !ok {
			return &Error{Key: "config", Source: path, Err: fmt.Errorf("unknown key %q", k)}
		}
		var v string
		switch x := raw[k].(type) {
		case []any:
			parts := make([]string, len(x))
			for i, p := range x {
				parts[i] = fmt.Sprint(p)
			}
			v = strings.Join(parts, ",")
		case nil:
			v = ""
		default:
			v = fmt.Sprint(x)
		}
		if err := s.value.Set(v); err != nil {
			return &Error{Key: s.name, Source: path, Err: err}
		}
	}
	return nil
}

// Validate checks every key and the combination, with a message naming the
// key: the first rule broken, in the order of the rules below, then what the
// decoder, the replication and the sink configurations refuse.
func (c Config) Validate() error {
	rules := []struct {
		key    string
		broken bool
		why    string
	}{
		{"postgres-dsn", c.PostgresDSN == "", "required, e.g. postgres://walrelay@db:5432/app (or --postgres-dsn-file)"},
		{"kafka-brokers", len(c.KafkaBrokers) == 0, "required, e.g. kafka1:9092,kafka2:9092"},
		{"message-prefix", c.MessagePrefix == relay.HeartbeatPrefix, fmt.Sprintf("%q is reserved for heartbeats", c.MessagePrefix)},
		{"max-in-flight", c.MaxInFlight < 2, fmt.Sprintf("must be at least 2, got %d", c.MaxInFlight)},
		{"heartbeat-interval", c.HeartbeatInterval < 0, "must not be negative (0 disables)"},
		{"status-interval", c.StatusInterval <= 0, "must be positive"},
		{"shutdown-timeout", c.ShutdownTimeout <= 0, "must be positive"},
		{"kafka-timeout", c.KafkaTimeout <= 0, "must be positive"},
		{"batch-max-bytes", c.BatchMaxBytes <= 0 || c.BatchMaxBytes > 1<<30, fmt.Sprintf("must be between 1 and 1 GiB, got %d", c.BatchMaxBytes)},
		{"max-buffered-bytes", c.MaxBufferedBytes < c.BatchMaxBytes, fmt.Sprintf("must be at least batch-max-bytes (%d), got %d", c.BatchMaxBytes, c.MaxBufferedBytes)},
		{"topic-partitions", c.TopicPartitions == 0 || c.TopicPartitions < -1, fmt.Sprintf("must be -1 (broker default) or positive, got %d", c.TopicPartitions)},
		{"topic-replication-factor", c.TopicReplicationFactor == 0 || c.TopicReplicationFactor < -1 || c.TopicReplicationFactor > 32767,
			fmt.Sprintf("must be -1 (broker default) or positive, got %d", c.TopicReplicationFactor)},
		{"on-poison", c.OnPoison != relay.OnPoisonDLQ && c.OnPoison != relay.OnPoisonStop, fmt.Sprintf("must be dlq or stop, got %q", c.OnPoison)},
		{"log-level", !validLevel(c.LogLevel), fmt.Sprintf("%q is not debug, info, warn or error", c.LogLevel)},
		{"log-format", c.LogFormat != "json" && c.LogFormat != "text", fmt.Sprintf("must be json or text, got %q", c.LogFormat)},
		{"slot-metrics-interval", c.SlotMetricsInterval < 0, "must not be negative (0 disables)"},
		{"standby-retry-interval", c.StandbyRetryInterval <= 0, "must be positive"},
		{"procs", c.Procs < 0 || c.Procs > 1024, fmt.Sprintf("must be between 0 and 1024, got %d", c.Procs)},
	}
	for _, r := range rules {
		if r.broken {
			return invalid(r.key, "%s", r.why)
		}
	}
	for _, check := range []func() error{c.validateTables, c.validateDecoder, c.validateDelivery, c.validateReplication, c.validateSink} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

func validLevel(s string) bool {
	_, err := ParseLevel(s)
	return err == nil
}

// validateTables checks the column preset and map, the outbox tables and
// their topic templates.
func (c Config) validateTables() error {
	if _, err := columnPreset(c.Columns); err != nil {
		return invalid("columns", "%v", err)
	}
	if _, err := applyColumnMap(decoder.DefaultColumns(), c.ColumnMap); err != nil {
		return invalid("column-"+strings.ReplaceAll(firstRole(c.ColumnMap), "_", "-"), "%v", err)
	}
	ts, err := c.tables()
	if err != nil {
		return invalid(c.tablesKey(), "%v", err)
	}
	if len(ts) == 0 && c.MessagePrefix == "" {
		return invalid("table", "at least one outbox table is required (or a message-prefix for the tableless outbox)")
	}
	for _, t := range ts {
		if _, err := sink.ParseTemplate(t.topic); err != nil {
			if t.topic == c.Topic {
				return invalid("topic", "%v", err)
			}
			return invalid("tables", "%s: %v", t.name, err)
		}
	}
	return nil
}

// tablesKey is the key that sets the outbox tables: tables (YAML) or table.
func (c Config) tablesKey() string {
	if len(c.TableSpecs) > 0 {
		return "tables"
	}
	return "table"
}

// validateDecoder checks the whole decoder configuration (duplicate header
// columns, a required column unmapped, ...) so that it fails at startup, not
// in every replication session.
func (c Config) validateDecoder() error {
	dc, err := c.Decoder()
	if err == nil {
		err = dc.Validate()
	}
	var de *decoder.ConfigError
	if !errors.As(err, &de) {
		if err != nil {
			return invalid(c.tablesKey(), "%v", err)
		}
		return nil
	}
	key := c.tablesKey()
	switch {
	case key == "tables":
	case de.Field == "header_columns":
		key = "header-columns"
	case de.Field == "message_prefix":
		key = "message-prefix"
	}
	return &Error{Key: key, Err: de.Err}
}

// validateReplication maps what the replication configuration refuses to
// the key that sets it.
func (c Config) validateReplication() error {
	err := c.Replication().Validate()
	var se *replication.SettingError
	if errors.As(err, &se) {
		return &Error{Key: se.Setting, Err: se.Err}
	}
	return err
}

// validateSink maps what the sink configuration refuses to the key that
// sets it.
func (c Config) validateSink() error {
	if err := c.Sink().Validate(); err != nil {
		return SinkError(err)
	}
	return nil
}

// sinkKeys are the keys of the sink's settings whose names differ from
// kafka-<setting>.
var sinkKeys = map[string]string{
	"compression": "compression", "topic": "topic", "table-topics": "tables", "dlq-topic": "dlq-topic",
	"batching": "batching", "linger": "linger", "batch-max-bytes": "batch-max-bytes", "max-buffered": "max-buffered-bytes",
	"topic-partitions": "topic-partitions", "topic-lookup": "kafka-timeout",
}

// SinkError returns err, a *sink.SettingError from the sink's Validate or
// New (a TLS or secret file that cannot be read), as an *Error naming the
// key; other errors unchanged.
func SinkError(err error) error {
	var se *sink.SettingError
	if !errors.As(err, &se) {
		return err
	}
	key, ok := sinkKeys[se.Setting]
	switch {
	case ok:
	case strings.HasPrefix(se.Setting, "sasl-"):
		key = se.Setting
	default:
		key = "kafka-" + se.Setting
	}
	return &Error{Key: key, Err: se.Err}
}

func columnPreset(name string) (decoder.Columns, error) {
	switch name {
	case "", "default":
		return decoder.DefaultColumns(), nil
	case "debezium":
		return decoder.DebeziumColumns(), nil
	}
	return decoder.Columns{}, fmt.Errorf("unknown preset %q (use default or debezium)", name)
}

// Relay is the runtime's Options for this configuration; log is the logger.
func (c Config) Relay(log *slog.Logger) (relay.Options, error) {
	dc, err := c.Decoder()
	if err != nil {
		return relay.Options{}, err
	}
	o := relay.Options{
		Replication:          c.Replication(),
		Sink:                 c.Sink(),
		Decoder:              dc,
		MaxInFlight:          c.MaxInFlight,
		OnPoison:             c.OnPoison,
		HeartbeatInterval:    c.HeartbeatInterval,
		SlotMetricsInterval:  c.SlotMetricsInterval,
		StandbyRetryInterval: c.StandbyRetryInterval,
		ShutdownTimeout:      c.ShutdownTimeout,
		KafkaTimeout:         c.KafkaTimeout,
		MetricsAddr:          c.MetricsAddr,
		PProf:                c.PProf,
		Logger:               log,
	}
	if c.Delivery == DeliveryExactlyOnce {
		maxRecords := c.TxnMaxRecords
		if maxRecords <= 0 {
			maxRecords = 2 * c.MaxInFlight
		}
		o.ExactlyOnce = &relay.ExactlyOnce{TransactionalID: c.transactionalID(), CheckpointTopic: c.CheckpointTopic,
			CheckpointReplicationFactor: int16(c.CheckpointReplicationFactor), CommitInterval: c.TxnCommitInterval, MaxRecords: maxRecords}
	}
	return o, nil
}

// Replication is the replication configuration: slot, publication, tables.
func (c Config) Replication() replication.Config {
	ts, _ := c.tables()
	names := make([]string, len(ts))
	cols := make(map[string][]string, len(ts))
	for i, t := range ts {
		names[i] = t.name.String()
		cols[names[i]] = t.columns.Mapped()
	}
	return replication.Config{
		DSN:                 c.PostgresDSN,
		Slot:                c.Slot,
		Publication:         c.Publication,
		Tables:              names,
		Columns:             cols,
		NoCreateSlot:        !c.CreateSlot,
		NoCreatePublication: !c.CreatePublication,
		StatusInterval:      c.StatusInterval,
		ShutdownTimeout:     c.ShutdownTimeout,
		SlotFailover:        c.SlotFailover,
	}
}

// Sink is the Kafka producer's configuration.
func (c Config) Sink() sink.Config {
	ts, _ := c.tables()
	topics := map[string]string{}
	for _, t := range ts {
		if t.topic != c.Topic {
			topics[t.name.String()] = t.topic
		}
	}
	return sink.Config{
		TableTopics:            topics,
		CloudEvents:            c.CloudEvents,
		CloudEventsSource:      c.CloudEventsSource,
		ContentType:            c.ContentType,
		Brokers:                c.KafkaBrokers,
		Topic:                  c.Topic,
		Compression:            c.Compression,
		Batching:               c.Batching,
		Linger:                 c.Linger,
		BatchMaxBytes:          int32(c.BatchMaxBytes),
		MaxBufferedBytes:       c.MaxBufferedBytes,
		MaxBufferedRecords:     c.MaxInFlight,
		DisableCreateTopics:    !c.CreateTopics,
		TopicPartitions:        int32(c.TopicPartitions),
		TopicReplicationFactor: int16(c.TopicReplicationFactor),
		DLQTopic:               c.DLQTopic,
		ClientID:               c.KafkaClientID,
		TLS:                    c.KafkaTLS,
		SASL:                   c.KafkaSASL,
	}
}

// Decoder is the decoder's configuration: the outbox tables' column
// mappings and the tableless prefix.
func (c Config) Decoder() (decoder.Config, error) {
	ts, err := c.tables()
	if err != nil {
		return decoder.Config{}, err
	}
	dc := decoder.Config{MessagePrefix: c.MessagePrefix, HeartbeatPrefix: relay.HeartbeatPrefix}
	for _, t := range ts {
		dc.Tables = append(dc.Tables, decoder.Table{Schema: t.name.Schema, Name: t.name.Name, Columns: t.columns})
	}
	return dc, nil
}

// firstRole names the column role an error most likely concerns.
func firstRole(m map[string]string) string {
	for _, r := range columnRoles {
		if v, ok := m[r]; ok && v == "none" {
			return r
		}
	}
	return "id"
}
