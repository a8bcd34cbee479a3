package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walrelay/walrelay/cmd/walrelay/internal/config"
)

func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDSNFileEverywhere: migrate, status, prune and cutover also read the DSN from a
// file, and a DSN that does not parse is reported without its password.
func TestDSNFileEverywhere(t *testing.T) {
	dir := t.TempDir()
	dsnFile := writeFile(t, dir, "dsn", "postgres://u:pg-secret@h/db\n")
	env := envMap(map[string]string{"WALRELAY_POSTGRES_DSN_FILE": dsnFile})
	for _, cmd := range commands() {
		s := cmd.settings()
		if _, ok := config.Value(s, "postgres-dsn-file"); !ok {
			continue
		}
		err := config.Load(cmd.spec, s, argsFor(s, "older-than", "72h", "from-slot", "debezium", "kafka-brokers", "k:9092"), env, io.Discard)
		if dsn, _ := config.Value(s, "postgres-dsn"); err != nil || dsn != "postgres://u:pg-secret@h/db" {
			t.Errorf("%s: %v, dsn %q", cmd.spec.Name, err, dsn)
		}
		var stderr strings.Builder
		code := Main(t.Context(), append(strings.Fields(cmd.spec.Name), "--postgres-dsn-file", filepath.Join(dir, "missing")), envMap(nil), io.Discard, &stderr)
		if code != ExitConfig || !strings.Contains(stderr.String(), "postgres-dsn-file") {
			t.Errorf("%s with a missing DSN file: exit %d, %s", cmd.spec.Name, code, stderr.String())
		}
	}
	bad := writeFile(t, dir, "bad", "postgres://u:pg-secret@h:notaport/db")
	cfg := config.Defaults()
	err := config.Load(config.Command{Name: "run"}, &cfg, []string{"--postgres-dsn-file", bad, "--kafka-brokers", "k:9092"}, envMap(nil), io.Discard)
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Key != "postgres-dsn" || strings.Contains(err.Error(), "pg-secret") {
		t.Errorf("bad DSN: %v; want a postgres-dsn error without the password", err)
	}
}

// argsFor returns the flags --key value of pairs (key, value, ...) that s
// takes.
func argsFor(s config.Settings, pairs ...string) []string {
	var args []string
	for i := 0; i+1 < len(pairs); i += 2 {
		if _, ok := config.Value(s, pairs[i]); ok {
			args = append(args, "--"+pairs[i], pairs[i+1])
		}
	}
	return args
}

// TestRunRefusesUnreadableTLSFiles: a client certificate that does not match
// its key stops `walrelay run` before anything connects, as a configuration
// error naming the setting (exit 2).
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
	var stderr strings.Builder
	code := Main(t.Context(), []string{"run", "--postgres-dsn", "postgres://u@127.0.0.1:1/db", "--kafka-brokers", "127.0.0.1:1",
		"--kafka-tls-cert-file", cert, "--kafka-tls-key-file", wrongKey, "--metrics-addr", ""}, envMap(nil), io.Discard, &stderr)
	if code != ExitConfig || !strings.Contains(stderr.String(), `"invalid configuration","error":"kafka-tls-cert-file: `) || !strings.Contains(stderr.String(), "private key does not match") {
		t.Fatalf("run: exit %d, %s; want exit 2 with a kafka-tls-cert-file error about the key", code, stderr.String())
	}
}
