package sink

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

const mskHost = "b-1.orders.abc123.c2.kafka.eu-west-1.amazonaws.com"

// checkMSKSignature re-signs the request an AWS_MSK_IAM challenge stands for
// with the AWS SDK's own SigV4 signer and compares the signatures, so that
// what walrelay sends is what AWS verifies.
func checkMSKSignature(t *testing.T, challenge []byte, creds aws.Credentials) {
	t.Helper()
	var kv map[string]string
	if err := json.Unmarshal(challenge, &kv); err != nil {
		t.Fatalf("challenge %q: %v", challenge, err)
	}
	if kv["x-amz-credential"] != creds.AccessKeyID+"/"+kv["x-amz-date"][:8]+"/eu-west-1/kafka-cluster/aws4_request" ||
		kv["x-amz-security-token"] != creds.SessionToken || kv["action"] != "kafka-cluster:Connect" || kv["host"] != mskHost {
		t.Fatalf("challenge %v: not for %s with access key %s and its session token", kv, mskHost, creds.AccessKeyID)
	}
	signedAt, err := time.Parse("20060102T150405Z", kv["x-amz-date"])
	if err != nil {
		t.Fatal(err)
	}
	q := url.Values{"Action": {"kafka-cluster:Connect"}, "X-Amz-Expires": {kv["x-amz-expires"]}}
	req, err := http.NewRequest(http.MethodGet, "https://"+mskHost+"/?"+q.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	const emptyPayload = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	signed, _, err := v4.NewSigner().PresignHTTP(context.Background(), creds, req, emptyPayload, "kafka-cluster", "eu-west-1", signedAt)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(signed)
	if err != nil {
		t.Fatal(err)
	}
	if want := u.Query().Get("X-Amz-Signature"); want == "" || kv["x-amz-signature"] != want {
		t.Fatalf("signature %s, the AWS SDK signs the same request as %s (%s)", kv["x-amz-signature"], want, signed)
	}
}

// TestMSKIAMSignature: the AWS_MSK_IAM challenge carries a SigV4 signature
// that the AWS SDK's signer computes the same (with and without a session
// token).
func TestMSKIAMSignature(t *testing.T) {
	for _, creds := range []aws.Credentials{
		{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"},
		{AccessKeyID: "ASIAEXAMPLE", SecretAccessKey: "session/secret+key", SessionToken: "FwoGZXIvYXdzEXAMPLE//token=="},
	} {
		m, err := buildSASL(SASLConfig{Mechanism: "AWS_MSK_IAM", AWSCredentials: credentials.StaticCredentialsProvider{Value: creds}})
		if err != nil {
			t.Fatal(err)
		}
		_, challenge, err := m.Authenticate(context.Background(), mskHost+":9098")
		if err != nil {
			t.Fatal(err)
		}
		checkMSKSignature(t, challenge, creds)
	}
}

// expiringCreds is a stand-in for a rotating credential source (IRSA's web
// identity, EKS Pod Identity, ECS, the instance role): each retrieval hands
// out a new key pair that expires after lifetime.
type expiringCreds struct {
	mu       sync.Mutex
	n        int
	lifetime time.Duration
	issued   []aws.Credentials
}

func (e *expiringCreds) Retrieve(context.Context) (aws.Credentials, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	c := aws.Credentials{AccessKeyID: "ASIAROTATED" + string(rune('A'+e.n)), SecretAccessKey: "secret-" + string(rune('a'+e.n)),
		SessionToken: "token-" + string(rune('a'+e.n)), CanExpire: true, Expires: time.Now().Add(e.lifetime)}
	e.issued = append(e.issued, c)
	return c, nil
}

// TestMSKIAMCredentialsRefresh: with credentials that expire every second
// behind the SDK's cache (as the default chain is), every authentication
// (a new connection or a re-authentication the broker asks for) is signed
// with credentials that are still valid: after an expiry the next one uses
// the new key pair, with no restart.
func TestMSKIAMCredentialsRefresh(t *testing.T) {
	src := &expiringCreds{lifetime: time.Second}
	cache := aws.NewCredentialsCache(src, func(o *aws.CredentialsCacheOptions) { o.ExpiryWindow = 200 * time.Millisecond })
	m, err := buildSASL(SASLConfig{Mechanism: "AWS_MSK_IAM", AWSCredentials: cache})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	deadline := time.Now().Add(3500 * time.Millisecond)
	for time.Now().Before(deadline) {
		_, challenge, err := m.Authenticate(context.Background(), mskHost+":9098")
		if err != nil {
			t.Fatal(err)
		}
		var kv map[string]string
		if err := json.Unmarshal(challenge, &kv); err != nil {
			t.Fatal(err)
		}
		src.mu.Lock()
		current := src.issued[len(src.issued)-1]
		src.mu.Unlock()
		if time.Now().After(current.Expires) {
			t.Fatalf("signed with credentials that expired at %s", current.Expires)
		}
		checkMSKSignature(t, challenge, current)
		seen[current.AccessKeyID] = true
		time.Sleep(100 * time.Millisecond) // authentications spread over several lifetimes
	}
	if len(seen) < 3 {
		t.Fatalf("%d key pairs used over 3.5 s of one-second credentials, want at least 3", len(seen))
	}
}

// TestSASLPasswordFileReread: with a password file, every authentication
// reads it again, so a password rotated in the file is used by the next
// connection or re-authentication.
func TestSASLPasswordFileReread(t *testing.T) {
	path := filepath.Join(t.TempDir(), "password")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("first-password\n")
	m, err := buildSASL(SASLConfig{Mechanism: "PLAIN", Username: "relay", PasswordFile: path})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"first-password", "second-password"} {
		write(want + "\n")
		_, msg, err := m.Authenticate(context.Background(), "127.0.0.1:9092")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(msg, []byte("\x00relay\x00"+want)) {
			t.Fatalf("PLAIN message %q, want the password %q", msg, want)
		}
	}
	if s := (SASLConfig{Mechanism: "SCRAM-SHA-512", Username: "relay", PasswordFile: path}).String(); bytes.Contains([]byte(s), []byte("second-password")) {
		t.Fatalf("String() shows the password: %s", s)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := buildSASL(SASLConfig{Mechanism: "SCRAM-SHA-512", Username: "relay", PasswordFile: path}); err == nil {
		t.Fatal("a missing password file is refused at start")
	}
}
