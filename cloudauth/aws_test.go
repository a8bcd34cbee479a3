package cloudauth

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/credentials"
)

func TestRDSRegion(t *testing.T) {
	for host, want := range map[string]string{
		"orders.c1a2b3c4d5e6.eu-west-1.rds.amazonaws.com":            "eu-west-1",
		"orders.cluster-c1a2b3c4d5e6.us-east-2.rds.amazonaws.com":    "us-east-2",
		"orders.cluster-ro-c1a2b3c4d5e6.us-east-2.rds.amazonaws.com": "us-east-2",
		"orders.c1a2b3c4d5e6.cn-north-1.rds.amazonaws.com.cn":        "cn-north-1",
		"db.example.com":    "",
		"rds.amazonaws.com": "",
		"127.0.0.1":         "",
	} {
		if got := RDSRegion(host); got != want {
			t.Errorf("RDSRegion(%q) = %q, want %q", host, got, want)
		}
	}
}

// TestRDSIAMToken: each connection gets a token for its host, port and user,
// signed for rds-db in the host's region with the credentials' session
// token; two tokens for the same connection differ only when time moved.
func TestRDSIAMToken(t *testing.T) {
	r := &RDSIAM{Credentials: credentials.NewStaticCredentialsProvider("ASIAEXAMPLE", "secret", "session-token")}
	tok, err := r.Password(context.Background(), "orders.c1a2b3c4d5e6.eu-west-1.rds.amazonaws.com", 5432, "relay")
	if err != nil {
		t.Fatal(err)
	}
	host, query, ok := strings.Cut(tok, "?")
	if !ok || host != "orders.c1a2b3c4d5e6.eu-west-1.rds.amazonaws.com:5432" {
		t.Fatalf("token %q is not for the host and port", tok)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		t.Fatal(err)
	}
	if q.Get("Action") != "connect" || q.Get("DBUser") != "relay" || q.Get("X-Amz-Security-Token") != "session-token" ||
		!strings.Contains(q.Get("X-Amz-Credential"), "/eu-west-1/rds-db/aws4_request") || q.Get("X-Amz-Signature") == "" || q.Get("X-Amz-Expires") != "900" {
		t.Fatalf("token query %v", q)
	}
	// A host that is no RDS endpoint name and no region configured anywhere.
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/none")
	t.Setenv("AWS_PROFILE", "")
	if _, err := (&RDSIAM{Credentials: r.Credentials}).Password(context.Background(), "10.0.0.5", 5432, "relay"); err == nil ||
		!strings.Contains(err.Error(), "Postgres AWS region") {
		t.Errorf("no region: %v, want an error naming the setting", err)
	}
}
