package relay

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	cfg, err := Load([]string{"--kafka-tls-key-file", "/etc/client.key"}, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	sc := cfg.sinkConfig()
	want := sink.Config{
		ClientID: "relay-eu-1",
		TLS:      sink.TLSConfig{CAFile: "/etc/ca.pem", CertFile: "/etc/client.pem", KeyFile: "/etc/client.key", ServerName: "kafka.internal"},
		SASL:     sink.SASLConfig{Mechanism: "SCRAM-SHA-512", Username: "relay", Password: "sasl-secret"},
	}
	if sc.ClientID != want.ClientID || sc.TLS != want.TLS || sc.SASL != want.SASL {
		t.Errorf("sink config:\n got %+v %+v %q\nwant %+v %+v %q", sc.TLS, sc.SASL, sc.ClientID, want.TLS, want.SASL, want.ClientID)
	}
	if cfg.PostgresDSN != "postgres://relay:pg-secret@db/app" {
		t.Errorf("dsn from file: %q", cfg.PostgresDSN)
	}

	// OAUTHBEARER and MSK IAM by flag.
	cfg, err = Load([]string{"--postgres-dsn", "postgres://u@h/db", "--kafka-brokers", "k:9098", "--kafka-tls",
		"--sasl-mechanism", "AWS_MSK_IAM"}, envMap(nil), io.Discard)
	if err != nil || !cfg.sinkConfig().TLS.Enabled || cfg.sinkConfig().SASL.Mechanism != "AWS_MSK_IAM" {
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
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.args, envMap(tc.env), io.Discard)
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Key != tc.wantKey {
				t.Fatalf("Load: %v; want a ConfigError for %s", err, tc.wantKey)
			}
			if strings.Contains(err.Error(), "sasl-secret") {
				t.Fatalf("error shows the secret: %v", err)
			}
		})
	}
}

// TestDSNFileEverywhere: migrate, status and prune also read the DSN from a
// file, and a DSN that does not parse is reported without its password.
func TestDSNFileEverywhere(t *testing.T) {
	dir := t.TempDir()
	dsnFile := writeFile(t, dir, "dsn", "postgres://u:pg-secret@h/db\n")
	cfg, err := loadPruneConfig([]string{"--older-than", "72h"}, envMap(map[string]string{"WALRELAY_POSTGRES_DSN_FILE": dsnFile}), io.Discard)
	if err != nil || cfg.PostgresDSN != "postgres://u:pg-secret@h/db" {
		t.Errorf("prune: %v, dsn %q", err, cfg.PostgresDSN)
	}
	for _, cmd := range []string{"migrate", "status"} {
		var stderr strings.Builder
		code := Main(t.Context(), []string{cmd, "--postgres-dsn-file", filepath.Join(dir, "missing")}, envMap(nil), io.Discard, &stderr)
		if code != ExitConfig || !strings.Contains(stderr.String(), "postgres-dsn-file") {
			t.Errorf("%s with a missing DSN file: exit %d, %s", cmd, code, stderr.String())
		}
	}
	bad := writeFile(t, dir, "bad", "postgres://u:pg-secret@h:notaport/db")
	_, err = Load([]string{"--postgres-dsn-file", bad, "--kafka-brokers", "k:9092"}, envMap(nil), io.Discard)
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Key != "postgres-dsn" || strings.Contains(err.Error(), "pg-secret") {
		t.Errorf("bad DSN: %v; want a postgres-dsn error without the password", err)
	}
}

// TestRunRefusesUnreadableTLSFiles: a client certificate that does not match
// its key stops Run before anything connects, as a configuration error
// naming the setting.
func TestRunRefusesUnreadableTLSFiles(t *testing.T) {
	dir := t.TempDir()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	otherDER, _ := x509.MarshalPKCS8PrivateKey(other)
	cert := writeFile(t, dir, "client.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	wrongKey := writeFile(t, dir, "other.key", string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: otherDER})))
	cfg, err := Load([]string{"--postgres-dsn", "postgres://u@127.0.0.1:1/db", "--kafka-brokers", "127.0.0.1:1",
		"--kafka-tls-cert-file", cert, "--kafka-tls-key-file", wrongKey}, envMap(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	err = Run(t.Context(), cfg, slog.New(slog.DiscardHandler))
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Key != "kafka-tls-cert-file" || !strings.Contains(err.Error(), "private key does not match") {
		t.Fatalf("Run: %v; want a kafka-tls-cert-file ConfigError about the key", err)
	}
}
