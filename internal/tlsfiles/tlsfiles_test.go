package tlsfiles

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestClientErrorsNameTheFile: a file Client cannot use is an *Error that
// tells the CA file from the client certificate and key, so that each
// caller names its own setting; nothing to read is no error.
func TestClientErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		name string
		f    Files
		ca   bool
		want string
	}{
		{"missing CA file", Files{CAFile: missing}, true, "no such file"},
		{"CA file without PEM", Files{CAFile: notPEM}, true, "holds no PEM certificate"},
		{"missing key", Files{CertFile: notPEM, KeyFile: missing}, false, "load client certificate"},
		{"key without certificate", Files{KeyFile: notPEM}, false, "load client certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Client(tc.f)
			var fe *Error
			if !errors.As(err, &fe) || fe.CA != tc.ca || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Client(%+v) = %v; want an *Error with CA %v containing %q", tc.f, err, tc.ca, tc.want)
			}
		})
	}
	tc, err := Client(Files{ServerName: "kafka.internal", InsecureSkipVerify: true})
	if err != nil || tc.ServerName != "kafka.internal" || !tc.InsecureSkipVerify || tc.MinVersion == 0 {
		t.Fatalf("Client without files = %+v, %v", tc, err)
	}
}
