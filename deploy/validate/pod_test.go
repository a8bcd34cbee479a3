package validate

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// podEnv is the environment of container c for walrelayStarts: literal values as they
// are, and every Secret file (secretEnv) replaced by a file in dir with made-up content of
// the right form (a DSN to a closed port, a password, a PEM CA, certificate and key).
func podEnv(t *testing.T, dir string, c corev1.Container, secretEnv map[string]secretFile) []string {
	t.Helper()
	certPEM, keyPEM := selfSignedPEM(t)
	content := map[string]string{
		"WALRELAY_POSTGRES_DSN_FILE":     closedDSN,
		"WALRELAY_SASL_PASSWORD_FILE":    "validate-password",
		"WALRELAY_SASL_OAUTH_TOKEN_FILE": "validate-token",
		"WALRELAY_KAFKA_TLS_CA_FILE":     certPEM,
		"WALRELAY_KAFKA_TLS_CERT_FILE":   certPEM,
		"WALRELAY_KAFKA_TLS_KEY_FILE":    keyPEM,
	}
	var env []string
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			continue
		}
		if _, ok := secretEnv[e.Name]; !ok {
			env = append(env, e.Name+"="+e.Value)
			continue
		}
		body, ok := content[e.Name]
		if !ok {
			t.Errorf("env %s: no made-up content for this Secret file (add it to podEnv)", e.Name)
			continue
		}
		f := filepath.Join(dir, e.Name)
		if err := os.WriteFile(f, []byte(body+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		env = append(env, e.Name+"="+f)
	}
	return env
}

// selfSignedPEM returns a self-signed CA certificate and its key, PEM-encoded.
func selfSignedPEM(t *testing.T) (certPEM, keyPEM string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "walrelay validate"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}))
}
