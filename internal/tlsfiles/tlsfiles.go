// Package tlsfiles builds a TLS client configuration from PEM files: the
// Kafka client's and the schema registry client's, which name their files
// with settings of their own (the callers turn an *Error into theirs).
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// Files are a TLS client's PEM files and checks.
type Files struct {
	// CAFile holds the certificates that sign the server's (instead of the
	// system roots).
	CAFile string
	// CertFile and KeyFile are the client certificate and its key (mTLS).
	CertFile, KeyFile string
	// ServerName is checked against the server's certificate instead of
	// the host dialled.
	ServerName string
	// InsecureSkipVerify accepts any certificate (tests only; the caller
	// warns).
	InsecureSkipVerify bool
}

// Error is a file Client could not use. CA tells the CA file from the client
// certificate and key.
type Error struct {
	CA  bool
	Err error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Client returns the configuration of f, reading its files; TLS 1.2 at least.
func Client(f Files) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName, InsecureSkipVerify: f.InsecureSkipVerify} //nolint:gosec // opt-in, warned about
	if f.CAFile != "" {
		b, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, &Error{CA: true, Err: fmt.Errorf("read CA file: %w", err)}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, &Error{CA: true, Err: fmt.Errorf("%s holds no PEM certificate", f.CAFile)}
		}
		tc.RootCAs = pool
	}
	if f.CertFile != "" || f.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			// crypto/tls names neither file in its errors.
			return nil, &Error{Err: fmt.Errorf("load client certificate %s and key %s: %w", f.CertFile, f.KeyFile, err)}
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
