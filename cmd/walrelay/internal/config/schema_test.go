package config

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/walrelay/walrelay/sink/schema"
)

// TestLoadSchemaSettings: the registry settings arrive in sink.Config.Schema
// from their flags, WALRELAY_* variables and YAML keys, the per-table and
// per-event-type rules from the YAML key schema_rules, the password from its
// file.
func TestLoadSchemaSettings(t *testing.T) {
	dir := t.TempDir()
	pwFile := writeFile(t, dir, "pw", "sr-secret\n")
	yml := writeFile(t, dir, "walrelay.yaml", `
postgres_dsn: postgres://u@h/db
kafka_brokers: k:9092
tables:
  - name: public.outbox
  - name: shop.orders
    topic: orders
message_prefix: walrelay.outbox
schema_registry_url: [http://sr1:8081, http://sr2:8081]
schema_registry_username: relay
schema_registry_tls_ca_file: /etc/sr-ca.pem
schema_subject_strategy: record
schema_rules:
  - table: shop.orders
    value:
      file: schemas/order.avsc
      references: [{name: wr.common.Money, subject: wr.common.Money, version: 1}]
    key: {file: schemas/order-key.avsc, strategy: topic}
  - table: public.outbox
    event_type: RefundIssued
    value: {file: schemas/orders.proto, message: wr.it.Refund}
  - table: message
    value: {subject: events-value, format: json, version: 3}
`)
	cfg := mustLoadFile(t, yml, []string{"--schema-registry-timeout", "2s"}, map[string]string{
		"WALRELAY_SCHEMA_REGISTRY_PASSWORD_FILE": pwFile,
		"WALRELAY_SCHEMA_DIR":                    "/etc/schemas",
	})
	got := cfg.Sink().Schema
	want := schema.Config{
		URLs: []string{"http://sr1:8081", "http://sr2:8081"}, Username: "relay", Password: "sr-secret",
		TLS: schema.TLSConfig{CAFile: "/etc/sr-ca.pem"}, Timeout: 2 * time.Second, Strategy: schema.StrategyRecord, Dir: "/etc/schemas",
		Rules: []schema.Rule{
			{Table: "shop.orders",
				Value: schema.Binding{File: "schemas/order.avsc", References: []schema.Reference{{Name: "wr.common.Money", Subject: "wr.common.Money", Version: 1}}},
				Key:   schema.Binding{File: "schemas/order-key.avsc", Strategy: schema.StrategyTopic}},
			{Table: "public.outbox", EventType: "RefundIssued", Value: schema.Binding{File: "schemas/orders.proto", Message: "wr.it.Refund"}},
			{Table: "message", Value: schema.Binding{Subject: "events-value", Format: schema.FormatJSON, Version: 3}},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("schema config:\n got %+v\nwant %+v", got, want)
	}
	if strings.Contains(got.String(), "sr-secret") {
		t.Errorf("the formatted config shows the password: %s", got)
	}

	// The defaults encode nothing; the bearer token file by flag.
	def := mustLoad(t, []string{"--schema-registry-bearer-token-file", "/run/token"}, nil).Sink().Schema
	if def.Enabled() || def.BearerTokenFile != "/run/token" || def.Timeout != schema.DefaultTimeout || def.Strategy != schema.StrategyTopic {
		t.Errorf("defaults: %+v", def)
	}
}

// TestLoadRefusesBadSchemaSettings: each refusal names the setting to fix.
func TestLoadRefusesBadSchemaSettings(t *testing.T) {
	dir := t.TempDir()
	pwFile := writeFile(t, dir, "pw", "sr-secret\n")
	n := 0
	rules := func(yaml string) string {
		n++
		return writeFile(t, dir, fmt.Sprintf("rules-%d.yaml", n), "schema_registry_url: http://sr:8081\nschema_rules:\n"+yaml)
	}
	tests := []struct {
		name    string
		file    string // YAML content; "" for none
		args    []string
		wantKey string
		wantMsg string
	}{
		{"rules without url", "schema_rules: [{table: public.outbox, value: {file: o.avsc}}]\n", nil, "schema-registry-url", "registry's URL"},
		{"credentials in the url", "", []string{"--schema-registry-url", "http://u:sr-secret@sr:8081", "--schema-dir", "/s"}, "schema-registry-url", "credentials in the URL"},
		{"unknown strategy", "", []string{"--schema-registry-url", "http://sr:8081", "--schema-dir", "/s", "--schema-subject-strategy", "name"}, "schema-subject-strategy", "not one of"},
		{"user without password", "", []string{"--schema-registry-url", "http://sr:8081", "--schema-dir", "/s", "--schema-registry-username", "u"}, "schema-registry-password", "without a password"},
		{"basic auth and bearer", "", []string{"--schema-registry-url", "http://sr:8081", "--schema-dir", "/s", "--schema-registry-username", "u",
			"--schema-registry-password-file", pwFile, "--schema-registry-bearer-token-file", "/t"}, "schema-registry-bearer-token", "one of"},
		{"password twice", "", []string{"--schema-registry-password", "x", "--schema-registry-password-file", pwFile}, "schema-registry-password-file", "keep one"},
		{"rule for a table walrelay does not read", rules("  - {table: public.orders, value: {file: o.avsc}}\n"), nil, "schema-rules", "not an outbox table"},
		{"tableless rule without prefix", rules("  - {table: message, value: {file: o.avsc}}\n"), nil, "schema-rules", "no message-prefix"},
		{"rule without value", rules("  - {table: public.outbox, key: {file: k.avsc}}\n"), nil, "schema-rules", "no value schema"},
		{"unknown rule key", rules("  - {table: public.outbox, value: {file: o.avsc, subjet: x}}\n"), nil, "schema-rules", "subjet"},
		{"rules as a flag", "", []string{"--schema-rules", "x"}, "flags", "provided but not defined"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--postgres-dsn", "postgres://u@h/db", "--kafka-brokers", "k:9092"}, tc.args...)
			if tc.file != "" {
				f := tc.file
				if !strings.HasPrefix(f, dir) {
					f = writeFile(t, dir, "c.yaml", f)
				}
				args = append(args, "--config", f)
			}
			_, err := loadRun(args, envMap(nil), io.Discard)
			var ce *Error
			if !errors.As(err, &ce) || ce.Key != tc.wantKey || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("Load: %v; want an Error for %s saying %q", err, tc.wantKey, tc.wantMsg)
			}
			if strings.Contains(Explain(err), "sr-secret") {
				t.Fatalf("error shows the secret: %v", Explain(err))
			}
		})
	}
}

// mustLoadFile loads the --config file path, then args, with env.
func mustLoadFile(t *testing.T, path string, args []string, env map[string]string) Config {
	t.Helper()
	cfg, err := loadRun(append([]string{"--config", path}, args...), envMap(env), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
