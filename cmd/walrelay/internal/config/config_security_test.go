package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/walrelay/walrelay/cloudauth"
	"github.com/walrelay/walrelay/sink"
)

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLoadSecuritySettings: every security setting arrives in sink.Config
// from its flag, WALRELAY_* variable or YAML key; secrets come from files.
func TestLoadSecuritySettings(t *testing.T) {
	dir := t.TempDir()
	dsnFile := writeFile(t, dir, "dsn", "postgres://relay:pg-secret@db/app\n")
	pwFile := writeFile(t, dir, "pw", "sasl-secret\r\n")
	yml := writeFile(t, dir, "walrelay.yaml", `
kafka_brokers: k:9093
kafka_tls_ca_file: /etc/ca.pem
kafka_tls_server_name: kafka.internal
sasl_mechanism: SCRAM-SHA-512
sasl_username: relay
`)
	env := envMap(map[string]string{
		"WALRELAY_CONFIG":              yml,
		"WALRELAY_POSTGRES_DSN_FILE":   dsnFile,
		"WALRELAY_SASL_PASSWORD_FILE":  pwFile,
		"WALRELAY_KAFKA_TLS_CERT_FILE": "/etc/client.pem",
		"WALRELAY_KAFKA_CLIENT_ID":     "relay-eu-1",
	})
	cfg, err := loadRun([]string{"--kafka-tls-key-file", "/etc/client.key"}, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	sc := cfg.Sink()
	want := sink.Config{
		ClientID: "relay-eu-1",
		TLS:      sink.TLSConfig{CAFile: "/etc/ca.pem", CertFile: "/etc/client.pem", KeyFile: "/etc/client.key", ServerName: "kafka.internal"},
		// the file, read again on every authentication (checked at start)
		SASL: sink.SASLConfig{Mechanism: "SCRAM-SHA-512", Username: "relay", PasswordFile: pwFile},
	}
	if sc.ClientID != want.ClientID || sc.TLS != want.TLS || sc.SASL != want.SASL {
		t.Errorf("sink config:\n got %+v %+v %q\nwant %+v %+v %q", sc.TLS, sc.SASL, sc.ClientID, want.TLS, want.SASL, want.ClientID)
	}
	if cfg.PostgresDSN != "postgres://relay:pg-secret@db/app" {
		t.Errorf("dsn from file: %q", cfg.PostgresDSN)
	}

	// OAUTHBEARER and MSK IAM by flag.
	cfg, err = loadRun([]string{"--postgres-dsn", "postgres://u@h/db", "--kafka-brokers", "k:9098", "--kafka-tls",
		"--sasl-mechanism", "AWS_MSK_IAM"}, envMap(nil), io.Discard)
	if err != nil || !cfg.Sink().TLS.Enabled || cfg.Sink().SASL.Mechanism != "AWS_MSK_IAM" {
		t.Errorf("msk iam: %v %+v", err, cfg.KafkaSASL)
	}
}

func TestLoadRefusesBadSecurity(t *testing.T) {
	dir := t.TempDir()
	pwFile := writeFile(t, dir, "pw", "sasl-secret\n")
	empty := writeFile(t, dir, "empty", "\n")
	base := []string{"--postgres-dsn", "postgres://u@h/db", "--kafka-brokers", "k:9092"}
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantKey string
	}{
		{"scram without password", append(base, "--sasl-mechanism", "SCRAM-SHA-256", "--sasl-username", "u"), nil, "sasl-password"},
		{"scram without user", append(base, "--sasl-mechanism", "SCRAM-SHA-256", "--sasl-password-file", pwFile), nil, "sasl-username"},
		{"unknown mechanism", append(base, "--sasl-mechanism", "KERBEROS"), nil, "sasl-mechanism"},
		{"cert without key", append(base, "--kafka-tls-cert-file", "/c.pem"), nil, "kafka-tls-key-file"},
		{"msk iam without tls", append(base, "--sasl-mechanism", "AWS_MSK_IAM"), nil, "kafka-tls"},
		{"oauth without token file", append(base, "--sasl-mechanism", "OAUTHBEARER"), nil, "sasl-oauth-token-file"},
		{"password twice", append(base, "--sasl-password", "x", "--sasl-password-file", pwFile), nil, "sasl-password-file"},
		{"dsn twice", base, map[string]string{"WALRELAY_POSTGRES_DSN_FILE": pwFile}, "postgres-dsn-file"},
		{"missing password file", append(base, "--sasl-password-file", filepath.Join(dir, "nope")), nil, "sasl-password-file"},
		{"empty dsn file", []string{"--postgres-dsn-file", empty, "--kafka-brokers", "k:9092"}, nil, "postgres-dsn-file"},
		{"unknown postgres auth", append(base, "--postgres-auth", "kerberos"), nil, "postgres-auth"},
		{"token without TLS", []string{"--postgres-dsn", "postgres://u@db.example/app?sslmode=disable", "--kafka-brokers", "k:9092",
			"--postgres-auth", "aws-iam"}, nil, "postgres-auth"},
		{"password file with a token", append(base, "--postgres-auth", "gcp-iam", "--postgres-password-file", pwFile), nil, "postgres-password-file"},
		{"region without aws-iam", append(base, "--postgres-aws-region", "eu-west-1"), nil, "postgres-aws-region"},
		{"missing postgres password file", append(base, "--postgres-password-file", filepath.Join(dir, "nope")), nil, "postgres-password-file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadRun(tc.args, envMap(tc.env), io.Discard)
			var ce *Error
			if !errors.As(err, &ce) || ce.Key != tc.wantKey {
				t.Fatalf("Load: %v; want a Error for %s", err, tc.wantKey)
			}
			if strings.Contains(err.Error(), "sasl-secret") {
				t.Fatalf("error shows the secret: %v", err)
			}
		})
	}
}

// TestPostgresAuthSources: each Postgres authentication setting gives the
// password source every connection of the command asks.
func TestPostgresAuthSources(t *testing.T) {
	pwFile := writeFile(t, t.TempDir(), "pw", "rotating\n")
	tls := "postgres://relay@orders.c1a2b3.eu-west-1.rds.amazonaws.com/app?sslmode=require"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--postgres-dsn", tls}, "<nil>"},
		{[]string{"--postgres-dsn", tls, "--postgres-password-file", pwFile}, "replication.PasswordFile"},
		{[]string{"--postgres-dsn", tls, "--postgres-auth", "aws-iam", "--postgres-aws-region", "eu-west-1"}, "*cloudauth.RDSIAM"},
		{[]string{"--postgres-dsn", tls, "--postgres-auth", "gcp-iam"}, "*cloudauth.GCPIAM"},
		{[]string{"--postgres-dsn", "host=/cloudsql/p:r:i user=relay@p.iam", "--postgres-auth", "gcp-iam"}, "*cloudauth.GCPIAM"},
		{[]string{"--postgres-dsn", tls, "--postgres-auth", "azure-ad"}, "*cloudauth.AzureAD"},
	} {
		cfg, err := loadRun(append(tc.args, "--kafka-brokers", "k:9092"), envMap(nil), io.Discard)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if got := fmt.Sprintf("%T", cfg.Replication().PasswordSource); got != tc.want {
			t.Errorf("%v: password source %s, want %s", tc.args, got, tc.want)
		}
		if r, ok := cfg.Replication().PasswordSource.(*cloudauth.RDSIAM); ok && r.Region != "eu-west-1" {
			t.Errorf("aws-iam region %q", r.Region)
		}
	}
}
