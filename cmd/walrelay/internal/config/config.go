package config

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/walrelay/walrelay/checkpoint"
	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/operator"
	"github.com/walrelay/walrelay/relay"
	"github.com/walrelay/walrelay/replication"
	"github.com/walrelay/walrelay/sink"
)

// Config is everything `walrelay run` and `walrelay doctor` need. Load fills
// it from defaults, a YAML file, WALRELAY_* environment variables and flags,
// in rising priority.
type Config struct {
	Postgres
	Logging
	// Filters publish only some events of the tables given with --table and
	// of the tableless prefix (filters.go).
	Filters
	// Envelope shapes the values of the tables given with --table as
	// Debezium's outbox router does (envelope.go).
	Envelope
	SafetyNet
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
	// HeartbeatDSN (and its file) is the primary's DSN when walrelay decodes
	// on a standby: heartbeats must write WAL, which only the primary can.
	HeartbeatDSN     string
	HeartbeatDSNFile string
	StatusInterval   time.Duration
	MaxInFlight      int
	ShutdownTimeout  time.Duration
	KafkaTimeout     time.Duration

	OnPoison string
	DLQTopic string

	Compression      string
	Batching         string
	Linger           time.Duration
	BatchMaxBytes    int
	MaxBufferedBytes int

	PProf bool

	// Kafka connection security (sink.TLSConfig, sink.SASLConfig) and the
	// file the SASL password may be read from instead (see ReadSecretFile).
	KafkaClientID    string
	KafkaTLS         sink.TLSConfig
	KafkaSASL        sink.SASLConfig
	SASLPasswordFile string
	// SlotMetricsInterval is how often pg_replication_slots is read for the
	// walrelay_slot_* metrics (0 disables). StandbyRetryInterval is the fixed
	// wait between tries of a slot held by another process. SlotFailover
	// creates the slot with failover = true (Postgres 17+).
	SlotMetricsInterval  time.Duration
	StandbyRetryInterval time.Duration
	SlotFailover         bool
	// SlotCreateTimeout bounds the creation of a missing slot
	// (replication.Config.SlotCreateTimeout); 0: no limit.
	SlotCreateTimeout time.Duration
	// SlotHolderAlertAfter is how long a transaction may hold the slot back
	// before walrelay warns (relay.Options.SlotHolderAlertAfter); 0: never.
	SlotHolderAlertAfter time.Duration
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

	// Registry encodes records in the Confluent wire format (schema.go).
	Registry SchemaRegistry

	file string // the --config file Load read (CommandLine)
}

// DefaultMetricsAddr is where /metrics, /healthz and /readyz listen unless
// metrics-addr says otherwise: loopback only, so that nothing is exposed
// that was not asked for (a container, or a host scraped from elsewhere,
// sets all interfaces, ":8187", as deploy/ does), on a port outside
// 9100-9999, the range of Prometheus exporters' default ports, which is
// fully allocated (postgres_exporter, often beside walrelay, has 9187), and
// clear of the Kafka ecosystem's usual ports (Connect 8083, Schema Registry
// 8081, REST Proxy 8082, ksqlDB 8088).
const DefaultMetricsAddr = "127.0.0.1:8187"

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
		MetricsAddr:            DefaultMetricsAddr,
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
		Logging:                defaultLogging(),
		SafetyNet:              defaultSafetyNet(),
		SlotMetricsInterval:    5 * time.Second,
		SlotHolderAlertAfter:   30 * time.Minute,
		SlotCreateTimeout:      10 * time.Minute,
		StandbyRetryInterval:   time.Second,
		Procs:                  1,

		Delivery:                    DeliveryAtLeastOnce,
		CheckpointTopic:             sink.DefaultCheckpointTopic,
		CheckpointReplicationFactor: -1,
		TxnCommitInterval:           100 * time.Millisecond,
		Registry:                    schemaDefaults(),
	}
}

// envDefaults: Go's own GOMAXPROCS variable, when set, wins over the default
// of procs.
func (c *Config) envDefaults(getenv func(string) string) {
	if getenv("GOMAXPROCS") != "" {
		c.Procs = 0
	}
}

// settings are the settings of walrelay run (and doctor), in the order -h
// lists them under their groups.
func (c *Config) settings() []setting {
	g := func(group string, ss ...setting) []setting {
		for i := range ss {
			ss[i].group = group
		}
		return ss
	}
	ss := c.loggingSettings()
	ss = append(ss, c.postgresSettings()...)
	ss = append(ss, g(GroupPostgres,
		slotSetting(&c.Slot, "replication slot name"),
		setting{name: "publication", usage: "publication name", value: stringVal{&c.Publication}},
		setting{name: "create-slot", usage: "create the replication slot when missing", value: boolVal{&c.CreateSlot}},
		setting{name: "create-publication", usage: "create the publication when missing", value: boolVal{&c.CreatePublication}},
		setting{name: "slot-failover", usage: "create the slot with failover = true, synchronized to physical standbys (Postgres 17+)", value: boolVal{&c.SlotFailover}},
		setting{name: "slot-create-timeout", usage: "how long creating a missing slot may wait for the transactions running when it starts to end (logged every few seconds with their pids) before walrelay gives up naming them; 0: no limit", value: durVal{&c.SlotCreateTimeout}},
	)...)
	ss = append(ss, g(GroupTables,
		setting{name: "table", usage: "outbox table(s), schema.name, comma-separated", value: listVal{&c.Tables}},
		setting{name: "tables", usage: "list of {name, columns, column_map, header_columns, topic, filter, envelope, expand_json_payload}: several outbox tables, each with its own mapping, topic, filter and value (replaces table, columns, the column, filter and envelope settings for tables)",
			value: tablesVal{&c.TableSpecs}, yamlOnly: true},
		setting{name: "columns", usage: "outbox column preset: default or debezium", value: stringVal{&c.Columns}},
		setting{name: "column-id", usage: "column holding the event id (overrides the preset)", value: mapVal{c.ColumnMap, "id"}},
		setting{name: "column-aggregate-type", usage: "column holding the aggregate type", value: mapVal{c.ColumnMap, "aggregate_type"}},
		setting{name: "column-aggregate-id", usage: "column holding the aggregate id (the record key)", value: mapVal{c.ColumnMap, "aggregate_id"}},
		setting{name: "column-event-type", usage: "column holding the event type", value: mapVal{c.ColumnMap, "event_type"}},
		setting{name: "column-payload", usage: "column holding the payload (jsonb, json, text or bytea)", value: mapVal{c.ColumnMap, "payload"}},
		setting{name: "column-headers", usage: "jsonb column whose top-level string entries become headers (none: no such column)", value: mapVal{c.ColumnMap, "headers"}},
		setting{name: "column-timestamp", usage: "timestamp column used as the record timestamp (none: commit time)", value: mapVal{c.ColumnMap, "timestamp"}},
		setting{name: "column-partition", usage: "integer column holding an explicit Kafka partition (NULL: by key)", value: mapVal{c.ColumnMap, "partition"}},
		setting{name: "header-columns", usage: "more columns copied into record headers, column[:header name], comma-separated (may be added to the table later)", value: listVal{&c.HeaderColumns}},
		setting{name: "message-prefix", usage: "logical message prefix of tableless outbox events, e.g. walrelay.outbox (opt-in; empty, the default, disables)", value: stringVal{&c.MessagePrefix}},
	)...)
	ss = append(ss, c.filterSettings()...)
	ss = append(ss, c.envelopeSettings()...)
	ss = append(ss, g(GroupKafka,
		setting{name: "kafka-brokers", usage: "Kafka seed brokers, comma-separated host:port; required", value: listVal{&c.KafkaBrokers}},
		setting{name: "kafka-client-id", usage: "Kafka client id (broker logs, quotas, ACL audit)", value: stringVal{&c.KafkaClientID}},
		setting{name: "kafka-timeout", usage: "how long startup waits for a Kafka broker to answer", value: durVal{&c.KafkaTimeout}},
	)...)
	ss = append(ss, g(GroupSecurity,
		setting{name: "kafka-tls", usage: "connect to the brokers with TLS (system roots unless --kafka-tls-ca-file)", value: boolVal{&c.KafkaTLS.Enabled}},
		setting{name: "kafka-tls-ca-file", usage: "PEM file of the CA(s) that sign the brokers' certificates; implies TLS", value: stringVal{&c.KafkaTLS.CAFile}},
		setting{name: "kafka-tls-cert-file", usage: "PEM client certificate for mTLS (with --kafka-tls-key-file); implies TLS", value: stringVal{&c.KafkaTLS.CertFile}},
		setting{name: "kafka-tls-key-file", usage: "PEM private key of --kafka-tls-cert-file", value: stringVal{&c.KafkaTLS.KeyFile}},
		setting{name: "kafka-tls-server-name", usage: "name checked against the brokers' certificates instead of the broker host; implies TLS", value: stringVal{&c.KafkaTLS.ServerName}},
		setting{name: "kafka-tls-insecure-skip-verify", usage: "accept any broker certificate (tests only; logs a warning); implies TLS", value: boolVal{&c.KafkaTLS.InsecureSkipVerify}},
		setting{name: "sasl-mechanism", usage: "Kafka SASL mechanism: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM (empty: none)", value: stringVal{&c.KafkaSASL.Mechanism}},
		setting{name: "sasl-username", usage: "SASL username (PLAIN, SCRAM)", value: stringVal{&c.KafkaSASL.Username}},
		setting{name: "sasl-password", usage: "SASL password (PLAIN, SCRAM); prefer --sasl-password-file or the environment", value: stringVal{&c.KafkaSASL.Password}},
		setting{name: "sasl-password-file", usage: "file holding the SASL password, read again on every authentication so that it can be rotated (trailing newlines ignored)", value: stringVal{&c.SASLPasswordFile}, secretOf: "sasl-password"},
		setting{name: "sasl-oauth-token-file", usage: "file holding the OAUTHBEARER token, read again on every authentication", value: stringVal{&c.KafkaSASL.OAuthTokenFile}},
	)...)
	ss = append(ss, g(GroupDelivery,
		setting{name: "delivery", usage: "at-least-once or exactly-once (Kafka transactions; consumers must read with isolation.level=read_committed)", value: stringVal{&c.Delivery}},
		setting{name: "transactional-id", usage: "exactly-once: Kafka transactional.id (default walrelay-<slot>; every instance of a slot must use the same)", value: stringVal{&c.TransactionalID}},
		setting{name: "checkpoint-topic", usage: "compacted topic of walrelay's marks of the slots it made (both delivery modes) and, exactly-once, of the committed checkpoints (created if missing)", value: stringVal{&c.CheckpointTopic}},
		setting{name: "checkpoint-replication-factor", usage: "replication factor of a created checkpoint topic (-1: broker default)", value: intVal{&c.CheckpointReplicationFactor}},
		setting{name: "txn-commit-interval", usage: "exactly-once: how long a Kafka transaction stays open before it is committed at the next Postgres transaction end", value: durVal{&c.TxnCommitInterval}},
		setting{name: "txn-max-records", usage: "exactly-once: records after which a Kafka transaction is committed at the next Postgres transaction end (0: twice --max-in-flight)", value: intVal{&c.TxnMaxRecords}},
	)...)
	ss = append(ss, g(GroupRecords,
		setting{name: "topic", usage: "topic template; placeholders {aggregate_type}, {event_type}, {table}", value: stringVal{&c.Topic}},
		setting{name: "create-topics", usage: "create missing topics (otherwise stop with an error naming the topic)", value: boolVal{&c.CreateTopics}},
		setting{name: "topic-partitions", usage: "partitions of created topics (-1: broker default)", value: intVal{&c.TopicPartitions}},
		setting{name: "topic-replication-factor", usage: "replication factor of created topics (-1: broker default)", value: intVal{&c.TopicReplicationFactor}},
		setting{name: "on-poison", usage: "what to do with an event Kafka can never accept: dlq (dead-letter topic) or stop", value: stringVal{&c.OnPoison}},
		setting{name: "dlq-topic", usage: "dead-letter topic", value: stringVal{&c.DLQTopic}},
		setting{name: "cloudevents", usage: "add CloudEvents binary-mode headers (ce_id, ce_type, ce_source, ce_time, ce_specversion, content-type)", value: boolVal{&c.CloudEvents}},
		setting{name: "cloudevents-source", usage: "ce_source; {table} is replaced by schema.table (or message)", value: stringVal{&c.CloudEventsSource}},
		setting{name: "content-type", usage: "content-type header in CloudEvents mode", value: stringVal{&c.ContentType}},
	)...)
	ss = append(ss, c.Registry.schemaSettings()...)
	ss = append(ss, g(GroupBatching,
		setting{name: "compression", usage: "Kafka batch compression: none, gzip, snappy, lz4, zstd (fastest level)", value: stringVal{&c.Compression}},
		setting{name: "batching", usage: "adaptive: produce rounds at least --linger apart, one in flight, a record going out at once when neither is under way; fixed: Kafka's linger, every batch waits --linger (exactly-once always batches fixed)", value: stringVal{&c.Batching}},
		setting{name: "linger", usage: "adaptive batching: least time between two produce rounds; fixed: how long a partition waits to fill a batch; 0: no wait", value: durVal{&c.Linger}},
		setting{name: "batch-max-bytes", usage: "largest record batch (bytes, or with a unit: 1MiB, 512KiB, 1MB)", value: sizeVal{&c.BatchMaxBytes}},
		setting{name: "max-buffered-bytes", usage: "cap on bytes of records awaiting Kafka acks (e.g. 64MiB)", value: sizeVal{&c.MaxBufferedBytes}},
		setting{name: "max-in-flight", usage: "cap on records and transactions awaiting Kafka acks (backpressure)", value: intVal{&c.MaxInFlight}},
	)...)
	ss = append(ss, g(GroupService,
		setting{name: "heartbeat-interval", usage: "interval of transactional heartbeat messages (0 disables)", value: durVal{&c.HeartbeatInterval}},
		setting{name: "heartbeat-postgres-dsn", usage: "the primary's DSN when --postgres-dsn is a standby (logical decoding on a standby, Postgres 16+): heartbeats write WAL there; empty: the Postgres DSN", value: stringVal{&c.HeartbeatDSN}},
		setting{name: "heartbeat-postgres-dsn-file", usage: "file holding the heartbeat Postgres DSN (instead of --heartbeat-postgres-dsn)", value: stringVal{&c.HeartbeatDSNFile}, secretOf: "heartbeat-postgres-dsn"},
		setting{name: "status-interval", usage: "how often a moved confirmed position is reported to Postgres", value: durVal{&c.StatusInterval}},
		setting{name: "standby-retry-interval", usage: "fixed wait between tries of a slot another process holds (standby)", value: durVal{&c.StandbyRetryInterval}},
		setting{name: "slot-metrics-interval", usage: "how often pg_replication_slots is read for the walrelay_slot_* metrics (0 disables)", value: durVal{&c.SlotMetricsInterval}},
		setting{name: "slot-holder-alert-after", usage: "how long an open or prepared transaction may hold the slot back (restart_lsn, catalog_xmin) before walrelay logs it as a warning and the WalrelaySlotHeldBack alert fires (0: never)", value: durVal{&c.SlotHolderAlertAfter}},
		setting{name: "shutdown-timeout", usage: "how long SIGTERM waits for in-flight records", value: durVal{&c.ShutdownTimeout}},
		setting{name: "metrics-addr", usage: "listen address for /metrics, /healthz, /readyz (loopback by default; :8187 for all interfaces; port 0 picks one and logs it); empty disables", value: stringVal{&c.MetricsAddr}},
		setting{name: "pprof", usage: "serve Go profiles under /debug/pprof/ on the metrics address", value: boolVal{&c.PProf}},
		setting{name: "procs", usage: "threads running walrelay's code at once (GOMAXPROCS); 1 suits its one stream best, see docs/configuration.md; 0: Go's default (the CPUs available); 0 when the GOMAXPROCS variable is set", value: intVal{&c.Procs}},
	)...)
	return append(ss, c.safetyNetSettings()...)
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
		{"slot-metrics-interval", c.SlotMetricsInterval < 0, "must not be negative (0 disables)"},
		{"slot-holder-alert-after", c.SlotHolderAlertAfter < 0, "must not be negative (0 disables)"},
		{"standby-retry-interval", c.StandbyRetryInterval <= 0, "must be positive"},
		{"procs", c.Procs < 0 || c.Procs > 1024, fmt.Sprintf("must be between 0 and 1024, got %d", c.Procs)},
	}
	if c.PostgresDSN == "" && len(c.KafkaBrokers) == 0 { // name every required setting at once
		return &Error{Key: "postgres-dsn", Also: []string{"kafka-brokers"},
			Err: errors.New("required, and kafka-brokers too, e.g. postgres://walrelay@db:5432/app and kafka1:9092,kafka2:9092")}
	}
	if err := c.Postgres.validate(); err != nil {
		return err
	}
	for _, r := range rules {
		if r.broken {
			return invalid(r.key, "%s", r.why)
		}
	}
	return firstError(c.Logging.validate, c.SafetyNet.validate, c.validateTables, c.validateFilters, c.validateDecoder, c.validateDelivery, c.validateReplication, c.validateSink, c.validateSchemaRules)
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
	if _, _, err := splitNamed(c.HeaderColumns, "header column"); err != nil {
		return invalid("header-columns", "%v", err)
	}
	if _, err := envelopeColumns(c.EnvelopeColumns); err != nil {
		return invalid("envelope", "%v", err)
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
	case de.Field == "envelope":
		key = "envelope"
	}
	return &Error{Key: key, Err: de.Err}
}

// validateReplication maps what the replication configuration refuses to
// the key that sets it.
func (c Config) validateReplication() error { return validateReplication(c.Replication()) }

// validateSink maps what the sink configuration refuses to the key that
// sets it.
func (c Config) validateSink() error {
	if err := c.Sink().Validate(); err != nil {
		return SinkError(err)
	}
	return nil
}

// SinkError returns err, a *sink.SettingError or *schema.SettingError from
// the sink's Validate or New (a TLS or secret file that cannot be read, a
// schema file that does not parse), as an *Error naming the settings; other
// errors unchanged.
func SinkError(err error) error {
	if err, ok := schemaError(err); ok {
		return err
	}
	var se *sink.SettingError
	if !errors.As(err, &se) {
		return err
	}
	return keyedError(se, se.Setting, se.Err)
}

// OptionError returns oe, a *relay.OptionError, as an *Error naming the
// settings behind the fields oe names (fieldKeys), else the field.
func OptionError(oe *relay.OptionError) *Error { return keyedError(oe, oe.Option, oe.Err) }

// OperatorError returns oe, an *operator.OptionError, as an *Error naming
// the settings behind the fields oe names (fieldKeys), else the field.
func OperatorError(oe *operator.OptionError) *Error { return keyedError(oe, oe.Option, oe.Err) }

// MetricsAddrError is the *Error of a metrics address that cannot be
// listened on.
func MetricsAddrError(err error) *Error { return &Error{Key: "metrics-addr", Err: err} }

// EnvError is the *Error of an environment variable read outside the
// settings (OTEL_*) whose value cannot be used.
func EnvError(name string, err error) *Error { return &Error{Key: name, Err: err} }

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
		HeartbeatDSN:         c.HeartbeatDSN,
		SlotMetricsInterval:  c.SlotMetricsInterval,
		SlotHolderAlertAfter: c.SlotHolderAlertAfter,
		StandbyRetryInterval: c.StandbyRetryInterval,
		ShutdownTimeout:      c.ShutdownTimeout,
		KafkaTimeout:         c.KafkaTimeout,
		Logger:               log,
	}
	c.SafetyNet.apply(&o)
	o.SlotMarkTopic, o.SlotMarkReplicationFactor = c.CheckpointTopic, int16(c.CheckpointReplicationFactor)
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
		SlotCreateTimeout:   c.SlotCreateTimeout,
		PasswordSource:      c.PasswordSource(),
	}
}

// Sink is the Kafka producer's configuration.
func (c Config) Sink() sink.Config {
	ts, _ := c.tables()
	topics := map[string]string{}
	var values map[string]sink.JSONValue
	for _, t := range ts {
		if t.topic != c.Topic {
			topics[t.name.String()] = t.topic
		}
		if t.value != nil {
			if values == nil {
				values = map[string]sink.JSONValue{}
			}
			values[t.name.String()] = *t.value
		}
	}
	return sink.Config{
		TableTopics:            topics,
		JSONValues:             values,
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
		SASL:                   c.saslConfig(),
		Schema:                 c.Registry.Schema,
	}
}

// Decoder is the decoder's configuration: the outbox tables' column
// mappings and the tableless prefix.
func (c Config) Decoder() (decoder.Config, error) {
	ts, err := c.tables()
	if err != nil {
		return decoder.Config{}, err
	}
	dc := decoder.Config{MessagePrefix: c.MessagePrefix, HeartbeatPrefix: relay.HeartbeatPrefix, MessageFilter: c.Filters.decoder()}
	for _, t := range ts {
		dc.Tables = append(dc.Tables, decoder.Table{Schema: t.name.Schema, Name: t.name.Name, Columns: t.columns, Filter: t.filter})
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

// saslConfig is the Kafka SASL settings, with the password file (read at
// start into the password, to check it) read again on every
// authentication.
func (c Config) saslConfig() sink.SASLConfig {
	s := c.KafkaSASL
	if c.SASLPasswordFile != "" {
		s.PasswordFile, s.Password = c.SASLPasswordFile, ""
	}
	return s
}
