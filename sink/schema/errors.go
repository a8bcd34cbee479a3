package schema

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"

	"github.com/twmb/franz-go/pkg/sr"
)

// ErrMismatch reports a payload (or key) that does not fit its schema: not
// JSON, a value of the wrong type, a missing required field, no rule for the
// event's type. The error text carries the validator's message. It is the
// event's fault: the relay dead-letters it.
var ErrMismatch = errors.New("schema mismatch")

// ErrUnavailable reports a registry that could not answer: unreachable, a
// timeout, HTTP 5xx, 408 or 429. The same call may succeed later.
var ErrUnavailable = errors.New("schema registry unavailable")

// ErrNotAuthorized reports a registry that refused walrelay's credentials
// (HTTP 401) or their rights (403). Retrying cannot help.
var ErrNotAuthorized = errors.New("schema registry: not authorized")

// ErrSubjectMissing reports a subject (or its version) the registry does not
// have, for a schema that is looked up rather than registered from a file.
var ErrSubjectMissing = errors.New("schema registry: subject not found")

// ErrRefused reports a schema the registry refused to register: incompatible
// with the subject's earlier versions (HTTP 409) or invalid (422). The error
// text carries the registry's message.
var ErrRefused = errors.New("schema registry refused the schema")

// ErrInvalidSchema reports a schema walrelay cannot use: it does not parse or
// compile, references cannot be resolved, or it is not of the format the
// rule expects.
var ErrInvalidSchema = errors.New("invalid schema")

// IsRetryable reports whether err, from Encode or Register, means the
// registry was unavailable: calling again later may succeed.
func IsRetryable(err error) bool { return errors.Is(err, ErrUnavailable) }

// mismatch wraps a validator's message as a mismatch.
func mismatch(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrMismatch, fmt.Sprintf(format, a...))
}

// registryError sorts err from the sr client for operation op (e.g.
// `look up subject "orders-value"`). parent is the caller's context: when it
// ended, the error is its own (not retryable).
func registryError(parent context.Context, op string, err error) error {
	if parent.Err() != nil {
		return fmt.Errorf("schema registry: %s: %w", op, parent.Err())
	}
	var re *sr.ResponseError
	if errors.As(err, &re) {
		msg := re.Message
		if msg == "" || msg == "no response" { // an empty body (Apicurio's 401)
			msg = http.StatusText(re.StatusCode)
		}
		switch code := re.StatusCode; {
		case code == http.StatusUnauthorized:
			return keyed(fmt.Errorf("%w: %s: HTTP 401 %s (check the registry credentials: username and password, or the bearer token)", ErrNotAuthorized, op, msg),
				credentialFields...)
		case code == http.StatusForbidden:
			return keyed(fmt.Errorf("%w: %s: HTTP 403 %s (the registry's user lacks the right to do this)", ErrNotAuthorized, op, msg), credentialFields...)
		case code == http.StatusNotFound:
			return fmt.Errorf("%w: %s: HTTP 404 %s", ErrSubjectMissing, op, msg)
		case code == http.StatusConflict, code == http.StatusUnprocessableEntity:
			return fmt.Errorf("%w: %s: HTTP %d %s", ErrRefused, op, code, msg)
		case code == http.StatusRequestTimeout, code == http.StatusTooManyRequests, code >= 500:
			return fmt.Errorf("%w: %s: HTTP %d %s", ErrUnavailable, op, code, msg)
		}
		return fmt.Errorf("schema registry: %s: HTTP %d %s", op, re.StatusCode, msg)
	}
	if terr := tlsError(err); terr != nil {
		return keyed(fmt.Errorf("schema registry: %s: %w", op, terr), terr.fields...)
	}
	var ue *url.Error
	var ne net.Error
	if errors.As(err, &ue) || errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
	}
	return fmt.Errorf("schema registry: %s: %w", op, err)
}

// credentialFields are the Config fields of the registry's credentials.
var credentialFields = []string{"Username", "Password", "BearerTokenFile"}

// keyedError is err, which a change of the Config fields fixes (a registry
// that refuses the credentials, a TLS failure): the message says the fix in
// words, Fields gives the fields, the main one first.
type keyedError struct {
	err    error
	fields []string
}

func keyed(err error, fields ...string) *keyedError { return &keyedError{err: err, fields: fields} }

func (e *keyedError) Error() string    { return e.err.Error() }
func (e *keyedError) Unwrap() error    { return e.err }
func (e *keyedError) Fields() []string { return configFields(e.fields...) }

// tlsError explains a TLS failure of a registry connection, nil for other
// errors. It is permanent: the configuration must change.
func tlsError(err error) *keyedError {
	var (
		unknownCA x509.UnknownAuthorityError
		hostErr   x509.HostnameError
		invalid   x509.CertificateInvalidError
		verify    *tls.CertificateVerificationError
		recordErr tls.RecordHeaderError
		opErr     *net.OpError
	)
	switch {
	case errors.As(err, &unknownCA):
		return keyed(fmt.Errorf("TLS: certificate signed by unknown authority (set the registry's CA file to the CA that signed its certificate): %w", err), "TLS.CAFile")
	case errors.As(err, &hostErr):
		return keyed(fmt.Errorf("TLS: the registry's certificate is not valid for its URL's host (set the registry's TLS server name to a name in it): %w", err), "TLS.ServerName", "URLs")
	case errors.As(err, &invalid), errors.As(err, &verify):
		return keyed(fmt.Errorf("TLS: the registry's certificate is invalid (renew it, or check the clock): %w", err), "TLS.CAFile")
	case errors.As(err, &recordErr):
		return keyed(fmt.Errorf("TLS: the registry does not speak TLS at this URL (use http://): %w", err), "URLs")
	case errors.As(err, &opErr) && opErr.Op == "remote error":
		return keyed(fmt.Errorf("TLS: the registry refused the connection's client certificate (set the registry's client certificate and key to ones it trusts): %w", err),
			"TLS.CertFile", "TLS.KeyFile")
	}
	return nil
}
