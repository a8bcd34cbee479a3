package sink

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
)

// testPKI is a throwaway CA with a server certificate for 127.0.0.1 and a
// client certificate, written as PEM files.
type testPKI struct {
	dir                   string
	caFile                string
	serverCert, serverKey string
	clientCert, clientKey string
	otherKey              string // a key that matches no certificate
	ca                    *x509.Certificate
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	p := &testPKI{dir: t.TempDir()}
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "walrelay test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	p.ca, _ = x509.ParseCertificate(der)
	p.caFile = p.write(t, "ca.pem", "CERTIFICATE", der)
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (string, string) {
		key := newKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
			DNSNames:     []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return p.write(t, name+".pem", "CERTIFICATE", der), p.writeKey(t, name+".key", key)
	}
	p.serverCert, p.serverKey = leaf("server", 2, x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = leaf("client", 3, x509.ExtKeyUsageClientAuth)
	p.otherKey = p.writeKey(t, "other.key", newKey(t))
	return p
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func (p *testPKI) write(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func (p *testPKI) writeKey(t *testing.T, name string, k *ecdsa.PrivateKey) string {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return p.write(t, name, "PRIVATE KEY", der)
}

func TestValidateSecurity(t *testing.T) {
	cases := []struct {
		name    string
		tls     TLSConfig
		sasl    SASLConfig
		setting string // "" means valid
		want    string
		keys    []string // Fields
	}{
		{name: "plaintext"},
		{name: "tls system roots", tls: TLSConfig{Enabled: true}},
		{name: "scram", sasl: SASLConfig{Mechanism: "scram-sha-512", Username: "u", Password: "p"}},
		{name: "plain", sasl: SASLConfig{Mechanism: "PLAIN", Username: "u", Password: "p"}},
		{name: "oauth", sasl: SASLConfig{Mechanism: "OAUTHBEARER", OAuthTokenFile: "/run/token"}},
		{name: "msk iam", tls: TLSConfig{Enabled: true}, sasl: SASLConfig{Mechanism: "aws-msk-iam"}},
		{name: "cert without key", tls: TLSConfig{CertFile: "c.pem"}, setting: "TLS.KeyFile", want: "without its private key", keys: []string{"sink.Config.TLS.KeyFile", "sink.Config.TLS.CertFile"}},
		{name: "key without cert", tls: TLSConfig{KeyFile: "c.key"}, setting: "TLS.CertFile", want: "without its certificate", keys: []string{"sink.Config.TLS.CertFile", "sink.Config.TLS.KeyFile"}},
		{name: "unknown mechanism", sasl: SASLConfig{Mechanism: "GSSAPI"}, setting: "SASL.Mechanism", want: `"GSSAPI" is not one of`, keys: []string{"sink.Config.SASL.Mechanism"}},
		{name: "scram without password", sasl: SASLConfig{Mechanism: "SCRAM-SHA-256", Username: "u"}, setting: "SASL.Password", want: "needs a password", keys: []string{"sink.Config.SASL.Password"}},
		{name: "plain without user", sasl: SASLConfig{Mechanism: "PLAIN", Password: "p"}, setting: "SASL.Username", want: "needs a username", keys: []string{"sink.Config.SASL.Username"}},
		{name: "oauth without file", sasl: SASLConfig{Mechanism: "OAUTHBEARER"}, setting: "SASL.OAuthTokenFile", want: "needs a token file", keys: []string{"sink.Config.SASL.OAuthTokenFile"}},
		{name: "token with scram", sasl: SASLConfig{Mechanism: "SCRAM-SHA-256", Username: "u", Password: "p", OAuthTokenFile: "/t"}, setting: "SASL.OAuthTokenFile", want: "only used with", keys: []string{"sink.Config.SASL.OAuthTokenFile", "sink.Config.SASL.Mechanism"}},
		{name: "credentials without mechanism", sasl: SASLConfig{Username: "u", Password: "p"}, setting: "SASL.Mechanism", want: "no mechanism", keys: []string{"sink.Config.SASL.Mechanism"}},
		{name: "msk iam without tls", sasl: SASLConfig{Mechanism: "AWS_MSK_IAM"}, setting: "TLS", want: "only go over TLS", keys: []string{"sink.Config.TLS", "sink.Config.SASL.Mechanism"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config{Brokers: []string{"k:9092"}, TLS: c.tls, SASL: c.sasl}
			err := cfg.Validate()
			if c.setting == "" {
				if err != nil {
					t.Fatalf("Validate: %v, want nil", err)
				}
				return
			}
			var se *SettingError
			if !errors.As(err, &se) {
				t.Fatalf("Validate: %v, want a *SettingError", err)
			}
			if se.Setting != c.setting || !strings.Contains(err.Error(), c.want) || !slices.Equal(se.Fields(), c.keys) {
				t.Fatalf("Validate: setting %q, %q, fields %q; want setting %q, %q and fields %q", se.Setting, err, se.Fields(), c.setting, c.want, c.keys)
			}
			if strings.Contains(err.Error(), `"p"`) {
				t.Fatalf("error shows the password: %v", err)
			}
		})
	}
}

func TestBuildTLS(t *testing.T) {
	p := newTestPKI(t)
	notPEM := filepath.Join(p.dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		cfg     TLSConfig
		setting string
		want    string
		check   func(t *testing.T, tc *tls.Config)
	}{
		{name: "off", check: func(t *testing.T, tc *tls.Config) {
			if tc != nil {
				t.Fatal("TLS config for a plaintext setup")
			}
		}},
		{name: "system roots", cfg: TLSConfig{Enabled: true}, check: func(t *testing.T, tc *tls.Config) {
			if tc == nil || tc.RootCAs != nil || tc.InsecureSkipVerify {
				t.Fatalf("want TLS verified by the system roots, got %+v", tc)
			}
		}},
		{name: "ca and mtls", cfg: TLSConfig{CAFile: p.caFile, CertFile: p.clientCert, KeyFile: p.clientKey, ServerName: "kafka.internal"},
			check: func(t *testing.T, tc *tls.Config) {
				if tc.RootCAs == nil || len(tc.Certificates) != 1 || tc.ServerName != "kafka.internal" {
					t.Fatalf("CA, client certificate or server name missing: %+v", tc)
				}
			}},
		{name: "insecure", cfg: TLSConfig{InsecureSkipVerify: true}, check: func(t *testing.T, tc *tls.Config) {
			if tc == nil || !tc.InsecureSkipVerify {
				t.Fatal("InsecureSkipVerify not set")
			}
		}},
		{name: "missing ca file", cfg: TLSConfig{CAFile: filepath.Join(p.dir, "nope.pem")}, setting: "TLS.CAFile", want: "no such file"},
		{name: "ca file without pem", cfg: TLSConfig{CAFile: notPEM}, setting: "TLS.CAFile", want: "holds no PEM certificate"},
		{name: "cert key mismatch", cfg: TLSConfig{CertFile: p.clientCert, KeyFile: p.otherKey}, setting: "TLS.CertFile", want: "private key does not match public key"},
		{name: "missing key file", cfg: TLSConfig{CertFile: p.clientCert, KeyFile: filepath.Join(p.dir, "nope.key")}, setting: "TLS.CertFile", want: "no such file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tc, err := buildTLS(c.cfg)
			if c.setting == "" {
				if err != nil {
					t.Fatal(err)
				}
				c.check(t, tc)
				return
			}
			var se *SettingError
			if !errors.As(err, &se) || se.Setting != c.setting || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("buildTLS: %v; want a %s error with %q", err, c.setting, c.want)
			}
		})
	}
}

func TestBuildSASLMechanisms(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte("t0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	static := credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "secret", "")
	for _, c := range []struct {
		cfg  SASLConfig
		name string
	}{
		{SASLConfig{Mechanism: "plain", Username: "u", Password: "p"}, "PLAIN"},
		{SASLConfig{Mechanism: "SCRAM-SHA-256", Username: "u", Password: "p"}, "SCRAM-SHA-256"},
		{SASLConfig{Mechanism: "scram-sha-512", Username: "u", Password: "p"}, "SCRAM-SHA-512"},
		{SASLConfig{Mechanism: "OAUTHBEARER", OAuthTokenFile: tok}, "OAUTHBEARER"},
		{SASLConfig{Mechanism: "AWS_MSK_IAM", AWSCredentials: static}, "AWS_MSK_IAM"},
	} {
		m, err := buildSASL(c.cfg)
		if err != nil {
			t.Fatalf("%s: %v", c.cfg.Mechanism, err)
		}
		if m.Name() != c.name {
			t.Errorf("%s: mechanism %s, want %s", c.cfg.Mechanism, m.Name(), c.name)
		}
	}
	if m, err := buildSASL(SASLConfig{}); m != nil || err != nil {
		t.Errorf("no mechanism: got %v, %v; want nil, nil", m, err)
	}
	failing := aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{}, errors.New("no EC2 IMDS role found")
	})
	m, err := buildSASL(SASLConfig{Mechanism: "AWS_MSK_IAM", AWSCredentials: failing})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = m.Authenticate(context.Background(), "b-1.demo.abc123.c2.kafka.eu-west-1.amazonaws.com:9098")
	if se := (Config{SASL: SASLConfig{Mechanism: "AWS_MSK_IAM"}}).securityError(err); se == nil || !strings.Contains(se.Error(), "AWS_ACCESS_KEY_ID") ||
		!strings.Contains(se.Error(), "IRSA") || !strings.Contains(se.Error(), "no EC2 IMDS role found") {
		t.Errorf("AWS_MSK_IAM without credentials: %v, want a security error naming the chain and its cause", se)
	}
	_, err = buildSASL(SASLConfig{Mechanism: "OAUTHBEARER", OAuthTokenFile: tok + ".missing"})
	if err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing token file: %v, want an error at start", err)
	}
}

// TestOAuthTokenFileReread: every authentication reads the token file again,
// so a rotated token is used by the next connection.
func TestOAuthTokenFileReread(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "token")
	write := func(s string) {
		if err := os.WriteFile(tok, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("first-token\n")
	m, err := buildSASL(SASLConfig{Mechanism: "OAUTHBEARER", OAuthTokenFile: tok})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"first-token", "second-token"} {
		if want == "second-token" {
			write("second-token\n")
		}
		_, msg, err := m.Authenticate(context.Background(), "127.0.0.1:9092")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(msg, []byte("auth=Bearer "+want+"\x01")) {
			t.Fatalf("authentication message %q does not carry %q", msg, want)
		}
	}
	write("  \n")
	if _, _, err := m.Authenticate(context.Background(), "127.0.0.1:9092"); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Fatalf("empty token file: %v, want an error", err)
	}
}

func TestInsecureSkipVerifyWarns(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	if _, err := securityOpts(Config{TLS: TLSConfig{InsecureSkipVerify: true}}, log); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if strings.Count(out, "\n") != 1 || !strings.Contains(out, `"level":"WARN"`) || !strings.Contains(out, `"field":"TLS.InsecureSkipVerify"`) {
		t.Fatalf("want one WARN line naming the setting, got %q", out)
	}
	buf.Reset()
	if _, err := securityOpts(Config{TLS: TLSConfig{Enabled: true}}, log); err != nil || buf.Len() != 0 {
		t.Fatalf("verified TLS: err %v, log %q; want neither", err, buf.String())
	}
	if _, err := securityOpts(Config{SASL: SASLConfig{Mechanism: "PLAIN", Username: "u", Password: "hunter2"}}, log); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); strings.Count(out, "\n") != 1 || !strings.Contains(out, "clear text") || !strings.Contains(out, `"field":"TLS"`) ||
		strings.Contains(out, "hunter2") {
		t.Fatalf("PLAIN without TLS: want one WARN line naming the setting, got %q", out)
	}
}

func TestSecurityErrorMessages(t *testing.T) {
	scram := Config{SASL: SASLConfig{Mechanism: "SCRAM-SHA-512", Username: "relay", Password: "hunter2"}}
	wrap := func(err error) error { return fmt.Errorf("unable to dial: %w", err) }
	for _, c := range []struct {
		name string
		cfg  Config
		err  error
		want string // "" means not a security error
		keys []string
	}{
		{"auth failed", scram, wrap(kerr.SaslAuthenticationFailed), `SASL authentication failed for user "relay" with SCRAM-SHA-512 (check the SASL username and password)`,
			[]string{"SASL.Username", "SASL.Password"}},
		{"oauth failed", Config{SASL: SASLConfig{Mechanism: "OAUTHBEARER"}}, kerr.SaslAuthenticationFailed, "check the token in the OAuth token file",
			[]string{"SASL.OAuthTokenFile"}},
		{"msk iam failed", Config{SASL: SASLConfig{Mechanism: "AWS_MSK_IAM"}}, kerr.SaslAuthenticationFailed, "IAM policy", nil},
		{"mechanism off", scram, kerr.UnsupportedSaslMechanism, "does not enable SASL mechanism SCRAM-SHA-512", []string{"SASL.Mechanism", "Brokers"}},
		{"sasl required", Config{}, kerr.IllegalSaslState, "requires SASL", []string{"SASL.Mechanism", "SASL.Username", "SASL.Password"}},
		{"unknown ca", Config{}, wrap(&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), "certificate signed by unknown authority (set the Kafka TLS CA file",
			[]string{"TLS.CAFile"}},
		{"wrong name", Config{}, wrap(x509.HostnameError{Certificate: &x509.Certificate{}, Host: "x"}), "set the Kafka TLS server name",
			[]string{"TLS.ServerName", "Brokers"}},
		{"client cert refused", Config{}, wrap(&net.OpError{Op: "remote error", Err: errors.New("tls: certificate required")}), "set the Kafka TLS client certificate and key",
			[]string{"TLS.CertFile", "TLS.KeyFile"}},
		{"not tls", Config{}, wrap(tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), "does not speak TLS", []string{"Brokers", "TLS"}},
		{"unreadable token", Config{}, wrap(settingErr("SASL.OAuthTokenFile", "read token: gone")), "cannot authenticate", []string{"SASL.OAuthTokenFile"}},
		{"connection refused", scram, wrap(errors.New("connect: connection refused")), "", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.cfg.securityError(c.err)
			if c.want == "" {
				if err != nil {
					t.Fatalf("securityError: %v, want nil", err)
				}
				return
			}
			var se *SecurityError
			if !errors.As(err, &se) || !strings.Contains(err.Error(), c.want) || !errors.Is(err, c.err) {
				t.Fatalf("securityError: %v; want a *SecurityError wrapping the cause with %q", err, c.want)
			}
			if !slices.Equal(se.Config, c.keys) {
				t.Errorf("Config = %q, want %q", se.Config, c.keys)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("error shows the password: %v", err)
			}
		})
	}
}

// TestSinkTLSAndSCRAM connects through kfake with TLS and SCRAM-SHA-256: the
// right settings ping, a missing CA gives a *SecurityError that names the
// fix. (kfake closes the connection on a wrong password instead of answering
// SASL_AUTHENTICATION_FAILED as Kafka does; test/security_test.go covers that
// against the real broker.)
func TestSinkTLSAndSCRAM(t *testing.T) {
	p := newTestPKI(t)
	cert, err := tls.LoadX509KeyPair(p.serverCert, p.serverKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "relay", "right-pass"),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ping := func(tc TLSConfig, pass string) error {
		s, err := New(Config{Brokers: c.ListenAddrs(), TLS: tc,
			SASL: SASLConfig{Mechanism: "SCRAM-SHA-256", Username: "relay", Password: pass}})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return s.Ping(ctx)
	}
	if err := ping(TLSConfig{CAFile: p.caFile}, "right-pass"); err != nil {
		t.Fatalf("ping with the right CA and password: %v", err)
	}
	for _, c := range []struct {
		name string
		tc   TLSConfig
		pass string
		want string
	}{
		{"untrusted ca", TLSConfig{Enabled: true}, "right-pass", "set the Kafka TLS CA file"},
	} {
		err := ping(c.tc, c.pass)
		var se *SecurityError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want a *SecurityError with %q", c.name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), c.pass) {
			t.Errorf("%s: error shows the password: %v", c.name, err)
		}
	}
}

func TestSASLConfigHidesPassword(t *testing.T) {
	cfg := Config{Brokers: []string{"k:9092"}, SASL: SASLConfig{Mechanism: "PLAIN", Username: "u", Password: "hunter2"}}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("config", "sasl", cfg.SASL)
	for _, s := range []string{fmt.Sprintf("%v", cfg), fmt.Sprintf("%+v", cfg), fmt.Sprint(cfg.SASL), buf.String()} {
		if strings.Contains(s, "hunter2") || !strings.Contains(s, "xxxxx") {
			t.Errorf("password not masked: %s", s)
		}
	}
}

// TestSettingErrorFields: a SettingError names its field and the related
// ones as sink.Config.<field>, its own first.
func TestSettingErrorFields(t *testing.T) {
	got := (&SettingError{Setting: "TLS", Related: []string{"SASL.Mechanism", "Brokers"}}).Fields()
	if want := []string{"sink.Config.TLS", "sink.Config.SASL.Mechanism", "sink.Config.Brokers"}; !slices.Equal(got, want) {
		t.Errorf("Fields() = %q, want %q", got, want)
	}
}
