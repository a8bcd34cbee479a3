package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	crand "crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// secureKafka is the secured side of the test broker (test/env/kafka.sh with
// WALRELAY_TEST_KAFKA_SECURE=1): a SASL_SSL listener (SCRAM-SHA-512, PLAIN,
// OAUTHBEARER with unsecured JWS tokens) and an SSL listener that requires
// client certificates, both signed by a throwaway CA.
type secureKafka struct {
	saslSSL, ssl string // host:port
	dir          string // ca.pem, client.pem, client.key, scram-user, ...
}

func (k *secureKafka) file(name string) string { return filepath.Join(k.dir, name) }

func (k *secureKafka) read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(k.file(name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func requireSecureKafka(t *testing.T) *secureKafka {
	t.Helper()
	k := &secureKafka{
		saslSSL: os.Getenv("WALRELAY_TEST_KAFKA_SASL_SSL"),
		ssl:     os.Getenv("WALRELAY_TEST_KAFKA_SSL"),
		dir:     os.Getenv("WALRELAY_TEST_KAFKA_SECURE_DIR"),
	}
	if k.saslSSL == "" || k.ssl == "" || k.dir == "" {
		msg := "secured Kafka listeners not set (WALRELAY_TEST_KAFKA_SASL_SSL, _SSL, _SECURE_DIR); start Kafka with WALRELAY_TEST_KAFKA_SECURE=1 (make test does)"
		if isCI() {
			t.Fatal(msg + " — CI must run the security tests")
		}
		t.Skip(msg)
	}
	return k
}

// unsecuredJWT is a token Kafka's default OAUTHBEARER validator accepts
// (alg none, a subject and an expiry).
func unsecuredJWT(sub string) string {
	enc := base64.RawURLEncoding.EncodeToString
	now := time.Now().Unix()
	payload := fmt.Sprintf(`{"sub":%q,"iat":%d,"exp":%d}`, sub, now, now+3600)
	return enc([]byte(`{"alg":"none"}`)) + "." + enc([]byte(payload)) + "."
}

// otherCA writes a CA certificate that signed nothing the broker uses.
func otherCA(t *testing.T, path string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), crand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "not the broker's CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(crand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestKafkaSecurity relays events over SASL_SSL with SCRAM-SHA-512, then
// PLAIN, then OAUTHBEARER (token from a file), then over SSL with a client
// certificate (mTLS), then with certificate checks off (one WARN line), each
// run picking up on the same slot; every committed
// event arrives once, in order. A wrong password, an untrusted CA and a
// missing client certificate each stop walrelay at start with exactly one
// ERROR line that names the fix. No secret (SASL passwords, OAuth token, the
// password in the Postgres DSN) appears in any log, doctor output, /metrics
// or /debug/pprof page.
func TestKafkaSecurity(t *testing.T) {
	env := requireEnv(t)
	k := requireSecureKafka(t)
	rng := testRand(t)
	s := newScenario(t, env, "security")
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}

	// The test cluster trusts local connections, so the DSN's password is
	// ignored by Postgres, yet walrelay must treat it as a secret.
	dsnSecret := "pgpw" + randHex(rng, 12)
	dsn := strings.Replace(env.pgDSN, "postgres://postgres@", "postgres://postgres:"+dsnSecret+"@", 1)
	if dsn == env.pgDSN {
		t.Fatalf("cannot add a password to %s", env.pgDSN)
	}
	dsnFile := write("dsn", dsn+"\n")
	scramPass, plainPass := k.read(t, "scram-password"), k.read(t, "plain-password")
	wrongPass := "wrongpw" + randHex(rng, 12)
	token := unsecuredJWT("walrelay")
	tokenFile := write("token", token+"\n")
	badCA := filepath.Join(dir, "other-ca.pem")
	otherCA(t, badCA)
	secrets := map[string]string{"SCRAM password": scramPass, "PLAIN password": plainPass, "wrong password": wrongPass,
		"OAuth token": token, "DSN password": dsnSecret}

	base := func(brokers string, extra ...string) []string {
		return append([]string{"run", "--postgres-dsn-file", dsnFile, "--kafka-brokers", brokers,
			"--slot", s.name, "--publication", s.name, "--table", s.table, "--topic", s.topicTemplate(),
			"--metrics-addr", "127.0.0.1:0", "--kafka-client-id", "walrelay-security-test"}, extra...)
	}
	scram := func(passFile string) []string {
		return []string{"--sasl-mechanism", "SCRAM-SHA-512", "--sasl-username", k.read(t, "scram-user"),
			"--sasl-password-file", passFile, "--kafka-tls-ca-file", k.file("ca.pem")}
	}
	runs := []struct {
		name string
		args []string
		env  []string
	}{
		{"scram", base(k.saslSSL, append(scram(k.file("scram-password")), "--pprof")...), nil},
		{"plain", base(k.saslSSL, "--sasl-mechanism", "PLAIN", "--sasl-username", k.read(t, "plain-user"),
			"--kafka-tls-ca-file", k.file("ca.pem")), []string{"WALRELAY_SASL_PASSWORD_FILE=" + k.file("plain-password")}},
		{"oauthbearer", base(k.saslSSL, "--sasl-mechanism", "OAUTHBEARER", "--sasl-oauth-token-file", tokenFile,
			"--kafka-tls-ca-file", k.file("ca.pem")), nil},
		{"mtls", base(k.ssl, "--kafka-tls-ca-file", k.file("ca.pem"), "--kafka-tls-cert-file", k.file("client.pem"),
			"--kafka-tls-key-file", k.file("client.key")), nil},
		{"insecure", base(k.saslSSL, "--sasl-mechanism", "SCRAM-SHA-512", "--sasl-username", k.read(t, "scram-user"),
			"--kafka-tls-insecure-skip-verify"), []string{"WALRELAY_SASL_PASSWORD=" + scramPass}},
	}
	w := newWorkload(t, env, s.table, 20, newRandFrom(rng))
	var procs []*walrelayProc
	for i, r := range runs {
		p := startWalrelay(t, "security-"+r.name, filepath.Join(s.logDir, r.name+".log"), r.args, r.env)
		procs = append(procs, p)
		addr := p.waitReady(60 * time.Second)
		waitSlotStreaming(t, env.pgDSN, s.name, 60*time.Second, p)
		for range 20 {
			w.mustWriteTxn(5, false)
		}
		w.mustWriteTxn(5, true)
		waitSlotLSN(t, env.pgDSN, s.name, w.lastPostLSN(), 60*time.Second, p)
		if i == 0 {
			checkPagesHideSecrets(t, addr, secrets)
		}
		if r.name == "insecure" {
			var warns int
			for _, m := range p.logLines() {
				if msg, _ := m["msg"].(string); m["level"] == "WARN" && strings.Contains(msg, "certificate verification is disabled") {
					warns++
				}
			}
			if warns != 1 {
				t.Errorf("insecure: %d WARN lines about disabled certificate verification, want 1\n%s", warns, p.tail(20))
			}
		}
		p.sigterm()
		if !p.waitExit(30*time.Second) || p.exitCode() != 0 {
			t.Fatalf("%s: walrelay did not stop cleanly after SIGTERM (%s)\n%s", r.name, p.exitStatus(), p.tail(20))
		}
		t.Logf("%s: relayed through %s", r.name, r.args[4])
	}
	res := verify(t, s, w)
	t.Log(res.summary("security"))
	res.requireClean(t)
	if _, ctxns, cevents, _ := w.stats(); ctxns != 20*len(runs) || res.delivered != cevents || res.duplicates != 0 {
		t.Errorf("want the %d events of %d transactions delivered once each: delivered=%d duplicates=%d", cevents, ctxns, res.delivered, res.duplicates)
	}

	wrongFile := write("wrong-password", wrongPass+"\n")
	refusals := []struct {
		name     string
		args     []string
		keywords []string
	}{
		{"wrong_password", base(k.saslSSL, scram(wrongFile)...),
			[]string{"SASL authentication failed for user", "check the SASL username and password"}},
		{"untrusted_ca", base(k.saslSSL, append(scram(k.file("scram-password")), "--kafka-tls-ca-file", badCA)...),
			[]string{"certificate signed by unknown authority", "set the Kafka TLS CA file"}},
		{"no_client_cert", base(k.ssl, "--kafka-tls-ca-file", k.file("ca.pem")),
			[]string{"rejected the client certificate", "the Kafka TLS client certificate and key"}},
	}
	for _, r := range refusals {
		p := startWalrelay(t, "security-"+r.name, filepath.Join(s.logDir, r.name+".log"), r.args, nil)
		procs = append(procs, p)
		if !p.waitExit(30 * time.Second) {
			t.Fatalf("%s: walrelay still running 30s after start; want a refusal\n%s", r.name, p.tail(20))
		}
		if p.exitCode() <= 0 {
			t.Errorf("%s: exit status %s, want non-zero", r.name, p.exitStatus())
		}
		var errs []string
		for _, m := range p.logLines() {
			if m["level"] == "ERROR" {
				b, _ := json.Marshal(m)
				errs = append(errs, string(b))
			}
		}
		if len(errs) != 1 || errorLine(p.log(), r.keywords) == "" {
			t.Errorf("%s: want exactly one ERROR line with %q, got %d:\n%s", r.name, r.keywords, len(errs), p.tail(20))
			continue
		}
		t.Logf("%s: refused in %s with %s: %s", r.name, time.Since(p.started).Round(time.Millisecond), p.exitStatus(), errs[0])
	}

	// doctor, with the right and with a wrong password.
	for _, passFile := range []string{k.file("scram-password"), wrongFile} {
		args := append([]string{"doctor"}, base(k.saslSSL, scram(passFile)...)[1:]...)
		out := runDoctor(t, args)
		t.Logf("walrelay doctor (password file %s):\n%s", filepath.Base(passFile), indent(out))
		if passFile == wrongFile && !strings.Contains(out, "SASL authentication failed") {
			t.Errorf("doctor with a wrong password does not say SASL authentication failed:\n%s", out)
		}
		checkNoSecrets(t, "doctor output", out, secrets)
	}
	for _, p := range procs {
		checkNoSecrets(t, p.name+" log", p.log(), secrets)
	}
}

func runDoctor(t *testing.T, args []string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, walrelayBin, args...).CombinedOutput() // exit 1 when a check fails
	return string(out)
}

// checkPagesHideSecrets fetches every page of the metrics server.
func checkPagesHideSecrets(t *testing.T, addr string, secrets map[string]string) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	for _, path := range []string{"/metrics", "/healthz", "/readyz", "/debug/pprof/", "/debug/pprof/cmdline",
		"/debug/pprof/goroutine?debug=2", "/debug/pprof/heap?debug=1"} {
		resp, err := client.Get("http://" + addr + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		checkNoSecrets(t, "GET "+path, string(body), secrets)
	}
}

func checkNoSecrets(t *testing.T, where, text string, secrets map[string]string) {
	t.Helper()
	for name, v := range secrets {
		if strings.Contains(text, v) {
			t.Errorf("%s shows the %s", where, name)
		}
	}
}
