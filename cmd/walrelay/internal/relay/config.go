package relay

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/walrelay/walrelay/checkpoint"
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

	// Delivery is at-least-once (default) or exactly-once (see eos.go and
	// docs/exactly-once.md); the other keys apply to exactly-once only.
	Delivery                    string
	TransactionalID             string
	CheckpointTopic             string
	CheckpointReplicationFactor int
	TxnCommitInterval           time.Duration
	TxnMaxRecords               int
}

// setting binds one configuration key to its flag, env var and YAML key.
type setting struct {
	name  string // flag name; env WALRELAY_<NAME_UPPER>; yaml <name with _>
	usage string
	value flag.Value
}

func (s setting) env() string {
	return "WALRELAY_" + strings.ToUpper(strings.ReplaceAll(s.name, "-", "_"))
}

func (s setting) yamlKey() string { return strings.ReplaceAll(s.name, "-", "_") }

type stringVal struct{ p *string }

func (v stringVal) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}
func (v stringVal) Set(s string) error { *v.p = s; return nil }

type listVal struct{ p *[]string }

func (v listVal) String() string {
	if v.p == nil {
		return ""
	}
	return strings.Join(*v.p, ",")
}
func (v listVal) Set(s string) error {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	*v.p = out
	return nil
}

type intVal struct{ p *int }

func (v intVal) String() string {
	if v.p == nil {
		return ""
	}
	return strconv.Itoa(*v.p)
}
func (v intVal) Set(s string) error {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("%q is not a whole number", s)
	}
	*v.p = n
	return nil
}

// sizeVal is a byte size: plain bytes (67108864) or a number with a unit,
// KiB/MiB/GiB (powers of 1024) or KB/MB/GB (powers of 1000); B is bytes.
// Flags, env and YAML all parse through it, and String prints the form the
// README shows (64MiB).
type sizeVal struct{ p *int }

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	// Longest suffixes first, so "MiB" is not read as "B".
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9},
	{"B", 1},
}

func (v sizeVal) String() string {
	if v.p == nil {
		return ""
	}
	return formatSize(int64(*v.p))
}

func (v sizeVal) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	*v.p = int(n)
	return nil
}

// formatSize prints n with the largest binary unit that divides it exactly.
func formatSize(n int64) string {
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// parseSize reads a non-negative byte size such as 64MiB, 512KiB, 1MB or
// 67108864; a result that does not fit in an int is an error.
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, fmt.Errorf("%q is too large", s)
		}
		return 0, fmt.Errorf("%q is not a size (bytes, or a whole number with KiB, MiB, GiB, KB, MB or GB, e.g. 64MiB)", s)
	}
	if n < 0 {
		return 0, fmt.Errorf("%q is negative", s)
	}
	if n > int64(math.MaxInt)/mult {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n * mult, nil
}

type boolVal struct{ p *bool }

func (v boolVal) String() string {
	if v.p == nil {
		return ""
	}
	return strconv.FormatBool(*v.p)
}
func (v boolVal) IsBoolFlag() bool { return true }
func (v boolVal) Set(s string) error {
	b, err := strconv.ParseBool(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("%q is not true or false", s)
	}
	*v.p = b
	return nil
}

type mapVal struct {
	m   map[string]string
	key string
}

func (v mapVal) String() string {
	if v.m == nil {
		return ""
	}
	return v.m[v.key]
}
func (v mapVal) Set(s string) error {
	v.m[v.key] = strings.TrimSpace(s)
	return nil
}

type durVal struct{ p *time.Duration }

func (v durVal) String() string {
	if v.p == nil {
		return ""
	}
	return v.p.String()
}
func (v durVal) Set(s string) error {
	s = strings.TrimSpace(s)
	if s == "0" {
		*v.p = 0
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration like 10s or 500ms", s)
	}
	*v.p = d
	return nil
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
		OnPoison:               OnPoisonDLQ,
		DLQTopic:               sink.DefaultDLQTopic,
		Compression:            "zstd",
		Linger:                 0, // adaptive batching (sink/gate.go)
		BatchMaxBytes:          1 << 20,
		MaxBufferedBytes:       64 << 20,
		LogLevel:               "info",
		LogFormat:              "json",
		SlotMetricsInterval:    5 * time.Second,
		StandbyRetryInterval:   time.Second,

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
		{"linger", "how long a partition waits to fill a batch; 0 (default): adaptive, records gather only while a produce request is in flight", durVal{&c.Linger}},
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
		{"slot-failover", "create the slot with failover = true, synchronized to physical standbys (Postgres 17+)", boolVal{&c.SlotFailover}},
		{"delivery", "at-least-once or exactly-once (Kafka transactions; consumers must read with isolation.level=read_committed)", stringVal{&c.Delivery}},
		{"transactional-id", "exactly-once: Kafka transactional.id (default walrelay-<slot>; every instance of a slot must use the same)", stringVal{&c.TransactionalID}},
		{"checkpoint-topic", "exactly-once: compacted topic of the committed checkpoints (created if missing)", stringVal{&c.CheckpointTopic}},
		{"checkpoint-replication-factor", "exactly-once: replication factor of a created checkpoint topic (-1: broker default)", intVal{&c.CheckpointReplicationFactor}},
		{"txn-commit-interval", "exactly-once: how long a Kafka transaction stays open before it is committed at the next Postgres transaction end", durVal{&c.TxnCommitInterval}},
		{"txn-max-records", "exactly-once: records after which a Kafka transaction is committed at the next Postgres transaction end (0: half of --max-in-flight)", intVal{&c.TxnMaxRecords}},
	}
}

// readSecretFiles replaces each secret with the contents of its -file
// setting, when set. Trailing newlines are not part of the secret. Setting
// a secret both directly and by file is an error.
func (c *Config) readSecretFiles() error {
	for _, f := range []struct {
		key, path string
		dst       *string
	}{
		{"postgres-dsn", c.PostgresDSNFile, &c.PostgresDSN},
		{"sasl-password", c.SASLPasswordFile, &c.KafkaSASL.Password},
	} {
		if err := readSecretFile(f.key, f.path, f.dst); err != nil {
			return err
		}
	}
	return nil
}

// readSecretFile sets *dst to the contents of path (without trailing
// newlines) when path is set; key names the secret's setting.
func readSecretFile(key, path string, dst *string) error {
	if path == "" {
		return nil
	}
	if *dst != "" {
		return &ConfigError{Key: key + "-file", Err: fmt.Errorf("both --%s and --%s-file are set; keep one", key, key)}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return &ConfigError{Key: key + "-file", Err: err}
	}
	if *dst = strings.TrimRight(string(b), "\r\n"); *dst == "" {
		return &ConfigError{Key: key + "-file", Err: fmt.Errorf("%s is empty", path)}
	}
	return nil
}

// ConfigError is a configuration value walrelay refuses, naming the key and
// where it can be set.
type ConfigError struct {
	Key    string
	Source string // flag, env, yaml file, or "" when the combination is wrong
	Err    error
}

func (e *ConfigError) Error() string {
	if e.Key == "flags" {
		return fmt.Sprintf("invalid command line: %v (see walrelay run -h)", e.Err)
	}
	where := fmt.Sprintf("--%s / %s", e.Key, "WALRELAY_"+strings.ToUpper(strings.ReplaceAll(e.Key, "-", "_")))
	if e.Source != "" {
		return fmt.Sprintf("invalid config %s (from %s): %v; set %s", e.Key, e.Source, e.Err, where)
	}
	return fmt.Sprintf("invalid config %s: %v; set %s", e.Key, e.Err, where)
}

func (e *ConfigError) Unwrap() error { return e.Err }

// Load builds the configuration for `walrelay run` from args (flags, without
// the subcommand), the environment (getenv) and the YAML file named by
// --config or WALRELAY_CONFIG. It validates the result. -h prints the usage
// to help and returns flag.ErrHelp.
func Load(args []string, getenv func(string) string, help io.Writer) (Config, error) {
	return loadCommand("run", args, getenv, help)
}

// loadCommand is Load for cmd (run or doctor, which share the settings);
// cmd names the usage -h prints.
func loadCommand(cmd string, args []string, getenv func(string) string, help io.Writer) (Config, error) {
	cfg := Defaults()
	fs := flag.NewFlagSet("walrelay "+cmd, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), commandUsage[cmd])
		fs.PrintDefaults()
	}
	configFile := fs.String("config", getenv("WALRELAY_CONFIG"), "YAML config file (keys as the flags, with _ for -)")
	// Flags are parsed into a scratch Config first, then applied last.
	scratch := Defaults()
	for _, s := range scratch.settings() {
		fs.Var(s.value, s.name, s.usage+" (env "+s.env()+")")
	}
	if err := parseFlags(fs, args, help); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return Config{}, err
		}
		return Config{}, &ConfigError{Key: "flags", Err: err}
	}
	if fs.NArg() > 0 {
		return Config{}, &ConfigError{Key: "flags", Err: fmt.Errorf("unexpected argument %q", fs.Arg(0))}
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
		if v, ok := lookupEnv(getenv, s.env()); ok {
			if err := s.value.Set(v); err != nil {
				return Config{}, &ConfigError{Key: s.name, Source: "env " + s.env(), Err: err}
			}
		}
	}
	var ferr error
	fs.Visit(func(f *flag.Flag) {
		if s, ok := byName[f.Name]; ok && ferr == nil {
			if err := s.value.Set(f.Value.String()); err != nil {
				ferr = &ConfigError{Key: s.name, Source: "flag", Err: err}
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

func lookupEnv(getenv func(string) string, key string) (string, bool) {
	v := getenv(key)
	return v, v != ""
}

func applyYAML(path string, byName map[string]setting, cfg *Config) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return &ConfigError{Key: "config", Source: "flag", Err: err}
	}
	var raw map[string]any
	if err := yaml.Unmarshal(b, &raw); err != nil {
		return &ConfigError{Key: "config", Source: path, Err: fmt.Errorf("not valid YAML: %w", err)}
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k == "tables" {
			if err := tableSpecsFromYAML(raw[k], cfg); err != nil {
				return &ConfigError{Key: "tables", Source: path, Err: err}
			}
			continue
		}
		s, ok := byName[strings.ReplaceAll(k, "_", "-")]
		if !ok {
			return &ConfigError{Key: "config", Source: path, Err: fmt.Errorf("unknown key %q", k)}
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
			return &ConfigError{Key: s.name, Source: path, Err: err}
		}
	}
	return nil
}

// Validate checks every key and the combination, with a message naming the key.
func (c Config) Validate() error {
	bad := func(key string, format string, a ...any) error {
		return &ConfigError{Key: key, Err: fmt.Errorf(format, a...)}
	}
	if c.PostgresDSN == "" {
		return bad("postgres-dsn", "required, e.g. postgres://walrelay@db:5432/app (or --postgres-dsn-file)")
	}
	if len(c.KafkaBrokers) == 0 {
		return bad("kafka-brokers", "required, e.g. kafka1:9092,kafka2:9092")
	}
	if _, err := columnPreset(c.Columns); err != nil {
		return bad("columns", "%v", err)
	}
	if _, err := applyColumnMap(decoder.DefaultColumns(), c.ColumnMap); err != nil {
		return bad("column-"+strings.ReplaceAll(firstRole(c.ColumnMap), "_", "-"), "%v", err)
	}
	ts, err := c.tables()
	if err != nil {
		key := "table"
		if len(c.TableSpecs) > 0 {
			key = "tables"
		}
		return bad(key, "%v", err)
	}
	if len(ts) == 0 && c.MessagePrefix == "" {
		return bad("table", "at least one outbox table is required (or a message-prefix for the tableless outbox)")
	}
	for _, t := range ts {
		if _, err := sink.ParseTemplate(t.topic); err != nil {
			if t.topic == c.Topic {
				return bad("topic", "%v", err)
			}
			return bad("tables", "%s: %v", t.name, err)
		}
	}
	if err := c.validateDecoder(); err != nil {
		return err
	}
	if c.MessagePrefix == heartbeatPrefix {
		return bad("message-prefix", "%q is reserved for heartbeats", c.MessagePrefix)
	}
	if c.MaxInFlight < 2 {
		return bad("max-in-flight", "must be at least 2, got %d", c.MaxInFlight)
	}
	if c.HeartbeatInterval < 0 {
		return bad("heartbeat-interval", "must not be negative (0 disables)")
	}
	if c.StatusInterval <= 0 {
		return bad("status-interval", "must be positive")
	}
	if c.ShutdownTimeout <= 0 {
		return bad("shutdown-timeout", "must be positive")
	}
	if c.KafkaTimeout <= 0 {
		return bad("kafka-timeout", "must be positive")
	}
	if c.BatchMaxBytes <= 0 || c.BatchMaxBytes > 1<<30 {
		return bad("batch-max-bytes", "must be between 1 and 1 GiB, got %d", c.BatchMaxBytes)
	}
	if c.MaxBufferedBytes < c.BatchMaxBytes {
		return bad("max-buffered-bytes", "must be at least batch-max-bytes (%d), got %d", c.BatchMaxBytes, c.MaxBufferedBytes)
	}
	if c.TopicPartitions == 0 || c.TopicPartitions < -1 {
		return bad("topic-partitions", "must be -1 (broker default) or positive, got %d", c.TopicPartitions)
	}
	if c.TopicReplicationFactor == 0 || c.TopicReplicationFactor < -1 || c.TopicReplicationFactor > 32767 {
		return bad("topic-replication-factor", "must be -1 (broker default) or positive, got %d", c.TopicReplicationFactor)
	}
	if c.OnPoison != OnPoisonDLQ && c.OnPoison != OnPoisonStop {
		return bad("on-poison", "must be dlq or stop, got %q", c.OnPoison)
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return bad("log-level", "%v", err)
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		return bad("log-format", "must be json or text, got %q", c.LogFormat)
	}
	if c.SlotMetricsInterval < 0 {
		return bad("slot-metrics-interval", "must not be negative (0 disables)")
	}
	if c.StandbyRetryInterval <= 0 {
		return bad("standby-retry-interval", "must be positive")
	}
	if err := c.validateDelivery(); err != nil {
		return err
	}
	if err := c.replicationConfig().Validate(); err != nil {
		// replication errors start with the key: "slot: ...".
		key, rest, _ := strings.Cut(err.Error(), ": ")
		return &ConfigError{Key: key, Err: errors.New(rest)}
	}
	if err := c.sinkConfig().Validate(); err != nil {
		return classifySinkErr(err)
	}
	return nil
}

func classifySinkErr(err error) error {
	var se *sink.SettingError
	if errors.As(err, &se) {
		key := se.Setting
		if !strings.HasPrefix(key, "sasl-") {
			key = "kafka-" + key
		}
		return &ConfigError{Key: key, Err: se.Err}
	}
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "kafka brokers"):
		return &ConfigError{Key: "kafka-brokers", Err: err}
	case strings.HasPrefix(msg, "kafka compression"):
		return &ConfigError{Key: "compression", Err: err}
	case strings.HasPrefix(msg, "topic template for"):
		return &ConfigError{Key: "tables", Err: err}
	case strings.HasPrefix(msg, "topic template"):
		return &ConfigError{Key: "topic", Err: err}
	case strings.HasPrefix(msg, "dead-letter topic"):
		return &ConfigError{Key: "dlq-topic", Err: err}
	case strings.HasPrefix(msg, "kafka linger"):
		return &ConfigError{Key: "linger", Err: err}
	case strings.HasPrefix(msg, "kafka batch max bytes"):
		return &ConfigError{Key: "batch-max-bytes", Err: err}
	}
	return &ConfigError{Key: "kafka", Err: err}
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

func (c Config) replicationConfig() replication.Config {
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

func (c Config) sinkConfig() sink.Config {
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

func (c Config) decoderConfig() (decoder.Config, error) {
	ts, err := c.tables()
	if err != nil {
		return decoder.Config{}, err
	}
	dc := decoder.Config{MessagePrefix: c.MessagePrefix, HeartbeatPrefix: heartbeatPrefix}
	for _, t := range ts {
		dc.Tables = append(dc.Tables, decoder.Table{Schema: t.name.Schema, Name: t.name.Name, Columns: t.columns})
	}
	return dc, nil
}

// validateDecoder checks the whole decoder configuration (duplicate header
// columns, a required column unmapped, ...) so that it fails at startup, not
// in every replication session.
func (c Config) validateDecoder() error {
	dc, err := c.decoderConfig()
	if err == nil {
		err = dc.Validate()
	}
	if err == nil {
		return nil
	}
	key := "table"
	switch {
	case len(c.TableSpecs) > 0:
		key = "tables"
	case strings.Contains(err.Error(), "header column"):
		key = "header-columns"
	case strings.Contains(err.Error(), "prefix"):
		key = "message-prefix"
	}
	return &ConfigError{Key: key, Err: errors.New(strings.TrimPrefix(err.Error(), "decoder config: "))}
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
