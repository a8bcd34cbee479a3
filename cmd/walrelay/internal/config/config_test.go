package config

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// loadRun loads the configuration of `walrelay run`.
func loadRun(args []string, getenv func(string) string, help io.Writer) (Config, error) {
	cfg := Defaults()
	if err := Load(Command{Name: "run", Usage: "Usage: walrelay run [flags]\n"}, &cfg, args, getenv, help); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// minimalArgs are the flags every `walrelay run` needs.
var minimalArgs = []string{"--postgres-dsn", "postgres://u@h/db", "--kafka-brokers", "k:9092"}

// mustLoad loads minimalArgs followed by args, with env as the environment,
// failing the test on an error.
func mustLoad(t *testing.T, args []string, env map[string]string) Config {
	t.Helper()
	cfg, err := loadRun(append(slices.Clone(minimalArgs), args...), envMap(env), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestLoadPrecedence(t *testing.T) {
	dir := t.TempDir()
	yml := filepath.Join(dir, "walrelay.yaml")
	if err := os.WriteFile(yml, []byte(`
postgres_dsn: postgres://from-yaml/db
kafka_brokers: [k1:9092, k2:9092]
slot: yaml_slot
heartbeat_interval: 3s
max_in_flight: 500
`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := envMap(map[string]string{
		"WALRELAY_CONFIG":        yml,
		"WALRELAY_SLOT":          "env_slot",
		"WALRELAY_MAX_IN_FLIGHT": "700",
	})
	cfg, err := loadRun([]string{"--max-in-flight", "900", "--table", "a.outbox, b.outbox"}, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"dsn from yaml", cfg.PostgresDSN, "postgres://from-yaml/db"},
		{"brokers list from yaml", strings.Join(cfg.KafkaBrokers, ","), "k1:9092,k2:9092"},
		{"env beats yaml", cfg.Slot, "env_slot"},
		{"flag beats env", cfg.MaxInFlight, 900},
		{"yaml duration", cfg.HeartbeatInterval, 3 * time.Second},
		{"flag list", strings.Join(cfg.Tables, ","), "a.outbox,b.outbox"},
		{"default kept", cfg.Publication, "walrelay"},
		{"default topic", cfg.Topic, "outbox.event.{aggregate_type}"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestLoadRefusesBadConfig(t *testing.T) {
	base := []string{"--postgres-dsn", "postgres://u@h/db", "--kafka-brokers", "k:9092"}
	dir := t.TempDir()
	badYAML := filepath.Join(dir, "bad.yaml")
	_ = os.WriteFile(badYAML, []byte("postgres_dns: typo\n"), 0o600)
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantKey string
	}{
		{"missing dsn", []string{"--kafka-brokers", "k:9092"}, nil, "postgres-dsn"},
		{"missing brokers", []string{"--postgres-dsn", "postgres://u@h/db"}, nil, "kafka-brokers"},
		{"broker without port", append(base[:2:2], "--kafka-brokers", "kafka"), nil, "kafka-brokers"},
		{"negative in-flight", append(base, "--max-in-flight", "-5"), nil, "max-in-flight"},
		{"negative procs", append(base, "--procs", "-1"), nil, "procs"},
		{"not a number", append(base, "--max-in-flight", "lots"), nil, "flags"},
		{"bad env value", base, map[string]string{"WALRELAY_MAX_IN_FLIGHT": "x"}, "max-in-flight"},
		{"unknown placeholder", append(base, "--topic", "x.{nope}"), nil, "topic"},
		{"bad compression", append(base, "--compression", "brotli"), nil, "compression"},
		{"bad batching", append(base, "--batching", "eager"), nil, "batching"},
		{"bad table", append(base, "--table", "a.b.c"), nil, "table"},
		{"bad slot", append(base, "--slot", "My-Slot"), nil, "slot"},
		{"bad dsn", []string{"--postgres-dsn", "postgres://u@h:notaport/db", "--kafka-brokers", "k:9092"}, nil, "postgres-dsn"},
		{"bad preset", append(base, "--columns", "camel"), nil, "columns"},
		{"bad duration", append(base, "--heartbeat-interval", "often"), nil, "flags"},
		{"unknown yaml key", append(base, "--config", badYAML), nil, "config"},
		{"zero standby retry", append(base, "--standby-retry-interval", "0"), nil, "standby-retry-interval"},
		{"negative slot metrics interval", append(base, "--slot-metrics-interval", "-1s"), nil, "slot-metrics-interval"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadRun(tc.args, envMap(tc.env), io.Discard)
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("got %v, want a *Error", err)
			}
			if ce.Key != tc.wantKey {
				t.Fatalf("error names key %q, want %q: %v", ce.Key, tc.wantKey, err)
			}
			if tc.wantKey != "flags" && tc.wantKey != "config" && !strings.Contains(Explain(err), "--"+tc.wantKey) {
				t.Fatalf("message does not say how to set %s: %v", tc.wantKey, err)
			}
		})
	}
}

// TestProcs: walrelay runs with one P unless told otherwise; Go's own
// GOMAXPROCS variable, when set, is left alone unless --procs says so.
func TestProcs(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want int
	}{
		{"default", nil, nil, 1},
		{"GOMAXPROCS set", nil, map[string]string{"GOMAXPROCS": "4"}, 0},
		{"flag over GOMAXPROCS", []string{"--procs", "2"}, map[string]string{"GOMAXPROCS": "4"}, 2},
		{"env", nil, map[string]string{"WALRELAY_PROCS": "0"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if cfg := mustLoad(t, tc.args, tc.env); cfg.Procs != tc.want {
				t.Errorf("procs %d, want %d", cfg.Procs, tc.want)
			}
		})
	}
}

// TestBatching: adaptive by default, fixed by flag or env, and the sink gets it
// with the linger.
func TestBatching(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		env    map[string]string
		want   string
		linger time.Duration
	}{
		{"default", nil, nil, "adaptive", 5 * time.Millisecond},
		{"flag", []string{"--batching", "fixed", "--linger", "20ms"}, nil, "fixed", 20 * time.Millisecond},
		{"env", nil, map[string]string{"WALRELAY_BATCHING": "fixed"}, "fixed", 5 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if sc := mustLoad(t, tc.args, tc.env).Sink(); sc.Batching != tc.want || sc.Linger != tc.linger {
				t.Errorf("sink batching %q linger %v, want %q %v", sc.Batching, sc.Linger, tc.want, tc.linger)
			}
		})
	}
}

func TestHeartbeatZeroDisables(t *testing.T) {
	cfg, err := loadRun([]string{"--postgres-dsn", "postgres://u@h/db", "--kafka-brokers", "k:9092", "--heartbeat-interval", "0"}, envMap(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HeartbeatInterval != 0 {
		t.Fatalf("heartbeat interval %v, want 0", cfg.HeartbeatInterval)
	}
}

func TestTablesFromYAML(t *testing.T) {
	yml := filepath.Join(t.TempDir(), "w.yaml")
	if err := os.WriteFile(yml, []byte(`
postgres_dsn: postgres://u@h/db
kafka_brokers: k:9092
topic: default.{aggregate_type}
tables:
  - name: billing.outbox
    columns: debezium
    topic: billing.{event_type}
  - name: shipping.outbox
    column_map: {aggregate_id: shipment_id, headers: none}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadRun([]string{"--config", yml}, envMap(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := cfg.Decoder()
	if err != nil {
		t.Fatal(err)
	}
	if len(dc.Tables) != 2 {
		t.Fatalf("tables %+v", dc.Tables)
	}
	if got := dc.Tables[0].Columns.AggregateType; got != "aggregatetype" {
		t.Errorf("billing preset not applied: aggregate type column %q", got)
	}
	if got := dc.Tables[1].Columns; got.AggregateID != "shipment_id" || got.Headers != "" || got.Payload != "payload" {
		t.Errorf("shipping column map not applied: %+v", got)
	}
	sc := cfg.Sink()
	if sc.TableTopics["billing.outbox"] != "billing.{event_type}" || sc.Topic != "default.{aggregate_type}" {
		t.Errorf("routing: %+v / %q", sc.TableTopics, sc.Topic)
	}
	if _, ok := sc.TableTopics["shipping.outbox"]; ok {
		t.Errorf("shipping should use the default topic")
	}
	if got := strings.Join(cfg.Replication().Tables, ","); got != "billing.outbox,shipping.outbox" {
		t.Errorf("publication tables %q", got)
	}
}

func TestColumnFlagsAndTablelessOnly(t *testing.T) {
	base := []string{"--postgres-dsn", "postgres://u@h/db", "--kafka-brokers", "k:9092"}
	cfg, err := loadRun(append(base, "--columns", "debezium", "--column-aggregate-id", "agg", "--column-timestamp", "occurred_at"), envMap(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	dc, _ := cfg.Decoder()
	if c := dc.Tables[0].Columns; c.AggregateID != "agg" || c.Timestamp != "occurred_at" || c.EventType != "type" {
		t.Fatalf("columns %+v", c)
	}
	if dc.MessagePrefix != "" {
		t.Fatalf("message prefix %q, want none (the tableless outbox is opt-in)", dc.MessagePrefix)
	}
	// Tableless only: no table at all is fine with a message prefix.
	cfg, err = loadRun(append(base, "--table", "", "--message-prefix", "walrelay.outbox"), envMap(nil), io.Discard)
	if err != nil {
		t.Fatalf("tableless-only config refused: %v", err)
	}
	if n := len(cfg.Replication().Tables); n != 0 {
		t.Fatalf("tables %d", n)
	}
	// ... but not without one.
	_, err = loadRun(append(base, "--table", "", "--message-prefix", ""), envMap(nil), io.Discard)
	var ce *Error
	if !errors.As(err, &ce) || ce.Key != "table" {
		t.Fatalf("no table and no prefix: %v", err)
	}
	_, err = loadRun(append(base, "--column-payload", "none"), envMap(nil), io.Discard)
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "required") {
		t.Fatalf("payload none: %v", err)
	}
	_, err = loadRun(append(base, "--on-poison", "ignore"), envMap(nil), io.Discard)
	if !errors.As(err, &ce) || ce.Key != "on-poison" {
		t.Fatalf("on-poison ignore: %v", err)
	}
}

func TestHeaderAndPartitionColumns(t *testing.T) {
	cfg, err := loadRun([]string{"--postgres-dsn", "postgres://u@h/db", "--kafka-brokers", "k:9092",
		"--header-columns", "trace_id, tenant", "--column-partition", "shard"}, envMap(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := cfg.Decoder()
	if err != nil {
		t.Fatal(err)
	}
	c := dc.Tables[0].Columns
	if strings.Join(c.HeaderColumns, ",") != "trace_id,tenant" || c.Partition != "shard" || c.Payload != "payload" {
		t.Fatalf("columns %+v", c)
	}
}

func TestOperationsSettings(t *testing.T) {
	base := []string{"--postgres-dsn", "postgres://u@h/db", "--kafka-brokers", "k:9092"}
	cfg, err := loadRun(base, envMap(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.SlotMetricsInterval != 5*time.Second || cfg.StandbyRetryInterval != time.Second || cfg.SlotFailover {
		t.Fatalf("defaults: slot metrics %v, standby retry %v, failover %v", cfg.SlotMetricsInterval, cfg.StandbyRetryInterval, cfg.SlotFailover)
	}
	cfg, err = loadRun(append(base, "--slot-metrics-interval", "0", "--standby-retry-interval", "2s"),
		envMap(map[string]string{"WALRELAY_SLOT_FAILOVER": "true"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.SlotMetricsInterval != 0 || cfg.StandbyRetryInterval != 2*time.Second || !cfg.SlotFailover || !cfg.Replication().SlotFailover {
		t.Fatalf("set: slot metrics %v, standby retry %v, failover %v", cfg.SlotMetricsInterval, cfg.StandbyRetryInterval, cfg.SlotFailover)
	}
}
