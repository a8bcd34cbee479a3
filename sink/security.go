package sink

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/aws"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/walrelay/walrelay/cloudauth"
	"github.com/walrelay/walrelay/internal/fieldref"
	"github.com/walrelay/walrelay/internal/tlsfiles"
)

// TLSConfig secures the connections to the brokers. The zero value is
// plaintext.
type TLSConfig struct {
	// Enabled turns TLS on; it is implied by every other field. Without
	// CAFile the system's root certificates verify the brokers.
	Enabled bool
	// CAFile is a PEM file of the certificates that sign the brokers'
	// certificates (instead of the system roots).
	CAFile string
	// CertFile and KeyFile are the PEM client certificate and its private
	// key, for brokers that require client certificates (mTLS). Both or
	// neither.
	CertFile string
	KeyFile  string
	// ServerName is the name checked against the brokers' certificates
	// instead of the host of each broker address.
	ServerName string
	// InsecureSkipVerify accepts any broker certificate. For tests only: it
	// makes the connection open to interception, and New logs a warning.
	InsecureSkipVerify bool
}

func (c TLSConfig) enabled() bool {
	return c.Enabled || c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" || c.ServerName != "" || c.InsecureSkipVerify
}

// SASL mechanism names, as Kafka spells them.
const (
	MechanismPlain       = "PLAIN"
	MechanismScramSHA256 = "SCRAM-SHA-256"
	MechanismScramSHA512 = "SCRAM-SHA-512"
	MechanismOAuthBearer = "OAUTHBEARER"
	MechanismAWSMSKIAM   = "AWS_MSK_IAM"
)

// SASLConfig authenticates walrelay to the brokers. The zero value sends no
// authentication.
type SASLConfig struct {
	// Mechanism is one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER,
	// AWS_MSK_IAM (case-insensitive; "" disables SASL).
	Mechanism string
	// Username and Password are the credentials of PLAIN and SCRAM.
	Username string
	Password string
	// PasswordFile, when set, holds the PLAIN or SCRAM password instead of
	// Password and is read again on every authentication (each new
	// connection and each re-authentication the broker asks for through
	// connections.max.reauth.ms), so that a rotated password is picked up
	// without a restart.
	PasswordFile string
	// OAuthTokenFile holds the OAUTHBEARER token. It is read again on every
	// authentication (each new connection and each re-authentication the
	// broker asks for), so a sidecar can replace the token while walrelay
	// runs.
	OAuthTokenFile string
	// AWSCredentials signs AWS_MSK_IAM authentications; it is asked on
	// every authentication and should cache (aws.CredentialsCache). Nil
	// takes the AWS default credential chain (cloudauth.AWSCredentials:
	// environment, shared config, web identity/IRSA, EKS Pod Identity, ECS,
	// EC2 instance metadata), refreshed before the credentials expire.
	AWSCredentials awssdk.CredentialsProvider
}

// String shows the settings with the password masked, so that a
// configuration printed with %v or %+v does not reveal it.
func (c SASLConfig) String() string {
	pass := ""
	if c.Password != "" {
		pass = "xxxxx"
	}
	return fmt.Sprintf("{Mechanism:%s Username:%s Password:%s PasswordFile:%s OAuthTokenFile:%s}", c.Mechanism, c.Username, pass, c.PasswordFile, c.OAuthTokenFile)
}

// LogValue masks the password in log attributes.
func (c SASLConfig) LogValue() slog.Value { return slog.StringValue(c.String()) }

// mechanism returns the canonical mechanism name, "" for none.
func (c SASLConfig) mechanism() string {
	m := strings.ToUpper(strings.TrimSpace(c.Mechanism))
	if m == "AWS-MSK-IAM" {
		m = MechanismAWSMSKIAM
	}
	return m
}

// SettingError is a Config value that cannot work. Setting is its field
// ("Brokers", "TLS.CAFile", "SASL.Password", "TableTopics"); Err says why.
// Related names other fields involved, the same way.
type SettingError struct {
	Setting string
	Related []string
	Err     error
}

func (e *SettingError) Error() string { return "kafka " + e.Setting + ": " + e.Err.Error() }
func (e *SettingError) Unwrap() error { return e.Err }

// Fields returns the fields to change, Setting's first, as
// sink.Config.<field>.
func (e *SettingError) Fields() []string {
	return configFields(append([]string{e.Setting}, e.Related...)...)
}

// configFields returns the fields of Config as sink.Config.<field>.
func configFields(names ...string) []string { return fieldref.Of("sink.Config", names...) }

func settingErr(setting, format string, a ...any) error {
	return &SettingError{Setting: setting, Err: fmt.Errorf(format, a...)}
}

// validateSecurity checks the TLS and SASL settings without touching files.
func (c Config) validateSecurity() error {
	t, s := c.TLS, c.SASL
	if (t.CertFile == "") != (t.KeyFile == "") {
		if t.CertFile == "" {
			return &SettingError{Setting: "TLS.CertFile", Related: []string{"TLS.KeyFile"},
				Err: errors.New("a client key is set without its certificate: set the client certificate too")}
		}
		return &SettingError{Setting: "TLS.KeyFile", Related: []string{"TLS.CertFile"},
			Err: errors.New("a client certificate is set without its private key: set the client key too")}
	}
	mech := s.mechanism()
	switch mech {
	case "":
		switch {
		case s.Username != "" || s.Password != "":
			return settingErr("SASL.Mechanism", "a SASL username or password is set but no mechanism: set the SASL mechanism")
		case s.OAuthTokenFile != "":
			return &SettingError{Setting: "SASL.Mechanism", Related: []string{"SASL.OAuthTokenFile"},
				Err: errors.New("an OAuth token file is set but no mechanism: set the SASL mechanism to OAUTHBEARER")}
		}
	case MechanismPlain, MechanismScramSHA256, MechanismScramSHA512:
		if s.Username == "" {
			return settingErr("SASL.Username", "%s needs a username: set the SASL username", mech)
		}
		if s.Password == "" && s.PasswordFile == "" {
			return settingErr("SASL.Password", "%s needs a password: set the SASL password", mech)
		}
	case MechanismOAuthBearer:
		if s.OAuthTokenFile == "" {
			return settingErr("SASL.OAuthTokenFile", "OAUTHBEARER needs a token file: set the OAuth token file")
		}
	case MechanismAWSMSKIAM:
		if !t.enabled() {
			return &SettingError{Setting: "TLS", Related: []string{"SASL.Mechanism"},
				Err: errors.New("AWS_MSK_IAM signs requests that must only go over TLS: turn Kafka TLS on")}
		}
	default:
		return settingErr("SASL.Mechanism", "%q is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, AWS_MSK_IAM", s.Mechanism)
	}
	if mech != MechanismOAuthBearer && s.OAuthTokenFile != "" {
		return &SettingError{Setting: "SASL.OAuthTokenFile", Related: []string{"SASL.Mechanism"},
			Err: fmt.Errorf("only used with the SASL mechanism OAUTHBEARER, not %s", mech)}
	}
	return nil
}

// securityOpts returns the franz-go options for c's TLS and SASL settings,
// reading the CA and client certificate files now.
func securityOpts(c Config, log *slog.Logger) ([]kgo.Opt, error) {
	var opts []kgo.Opt
	tc, err := buildTLS(c.TLS)
	if err != nil {
		return nil, err
	}
	if tc != nil {
		if tc.InsecureSkipVerify {
			log.Warn("kafka TLS certificate verification is disabled: anyone between walrelay and the brokers "+
				"can read and change the traffic; give the CA that signs the brokers' certificates instead",
				"field", "TLS.InsecureSkipVerify")
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	mech, err := buildSASL(c.SASL)
	if err != nil {
		return nil, err
	}
	if mech != nil {
		if tc == nil && mech.Name() == MechanismPlain {
			log.Warn("SASL PLAIN without TLS sends the password in clear text; turn Kafka TLS on", "field", "TLS")
		}
		opts = append(opts, kgo.SASL(mech))
	}
	return opts, nil
}

// buildTLS returns the client TLS configuration, nil when TLS is off.
func buildTLS(c TLSConfig) (*tls.Config, error) {
	if !c.enabled() {
		return nil, nil
	}
	tc, err := tlsfiles.Client(tlsfiles.Files{CAFile: c.CAFile, CertFile: c.CertFile, KeyFile: c.KeyFile,
		ServerName: c.ServerName, InsecureSkipVerify: c.InsecureSkipVerify})
	var fe *tlsfiles.Error
	if errors.As(err, &fe) {
		if fe.CA {
			return nil, settingErr("TLS.CAFile", "%w", fe.Err)
		}
		return nil, settingErr("TLS.CertFile", "%w", fe.Err)
	}
	return tc, err
}

// buildSASL returns the SASL mechanism, nil when SASL is off. Every
// mechanism asks for its credentials on each authentication: a password
// file, a token file and AWS credentials are read again then.
func buildSASL(c SASLConfig) (sasl.Mechanism, error) {
	password := func() (string, error) {
		if c.PasswordFile == "" {
			return c.Password, nil
		}
		b, err := os.ReadFile(c.PasswordFile)
		if err != nil {
			return "", settingErr("SASL.PasswordFile", "read password: %w", err)
		}
		pw := strings.TrimRight(string(b), "\r\n")
		if pw == "" {
			return "", settingErr("SASL.PasswordFile", "%s is empty", c.PasswordFile)
		}
		return pw, nil
	}
	if _, err := password(); err != nil {
		return nil, err
	}
	scramAuth := func(context.Context) (scram.Auth, error) {
		pw, err := password()
		return scram.Auth{User: c.Username, Pass: pw}, err
	}
	switch c.mechanism() {
	case "":
		return nil, nil
	case MechanismPlain:
		return plain.Plain(func(context.Context) (plain.Auth, error) {
			pw, err := password()
			return plain.Auth{User: c.Username, Pass: pw}, err
		}), nil
	case MechanismScramSHA256:
		return scram.Sha256(scramAuth), nil
	case MechanismScramSHA512:
		return scram.Sha512(scramAuth), nil
	case MechanismOAuthBearer:
		path := c.OAuthTokenFile
		if _, err := readToken(path); err != nil {
			return nil, err
		}
		return oauth.Oauth(func(context.Context) (oauth.Auth, error) {
			tok, err := readToken(path)
			if err != nil {
				return oauth.Auth{}, err
			}
			return oauth.Auth{Token: tok}, nil
		}), nil
	case MechanismAWSMSKIAM:
		creds := c.AWSCredentials
		if creds == nil {
			cfg, err := cloudauth.AWSCredentials(context.Background(), "")
			if err != nil {
				return nil, settingErr("SASL.Mechanism", "AWS_MSK_IAM: %w", err)
			}
			creds = cfg.Credentials
		}
		return aws.ManagedStreamingIAM(func(ctx context.Context) (aws.Auth, error) {
			return awsAuth(ctx, creds)
		}), nil
	}
	return nil, settingErr("SASL.Mechanism", "%q is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, AWS_MSK_IAM", c.Mechanism)
}

// readToken reads the OAUTHBEARER token file; surrounding white space (a
// trailing newline) is not part of the token.
func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", settingErr("SASL.OAuthTokenFile", "read token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", settingErr("SASL.OAuthTokenFile", "%s is empty", path)
	}
	return tok, nil
}

// awsAuth signs one AWS_MSK_IAM authentication with the credentials creds
// has now (cached, refreshed before they expire).
func awsAuth(ctx context.Context, creds awssdk.CredentialsProvider) (aws.Auth, error) {
	if creds == nil {
		return aws.Auth{}, &AWSCredentialsError{Err: errors.New("no credential provider")}
	}
	v, err := creds.Retrieve(ctx)
	if err != nil {
		return aws.Auth{}, &AWSCredentialsError{Err: err}
	}
	return aws.Auth{AccessKey: v.AccessKeyID, SecretKey: v.SecretAccessKey, SessionToken: v.SessionToken, UserAgent: "walrelay"}, nil
}

// AWSCredentialsError is AWS_MSK_IAM finding no AWS credentials in the
// default chain (or the configured provider failing).
type AWSCredentialsError struct{ Err error }

func (e *AWSCredentialsError) Error() string {
	return "no AWS credentials for AWS_MSK_IAM (the default chain reads AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE and the shared config, web identity (IRSA), EKS Pod Identity, ECS and the EC2 instance role): " + e.Err.Error()
}
func (e *AWSCredentialsError) Unwrap() error { return e.Err }

// SecurityError is a connection to Kafka refused for a TLS or SASL reason.
// Its message says what fixes it, and Config are the Config fields
// involved ("SASL.Username"), the main one first; retrying without changing
// the configuration cannot succeed.
type SecurityError struct {
	Msg    string
	Config []string
	Err    error
}

func (e *SecurityError) Error() string { return e.Msg + ": " + e.Err.Error() }
func (e *SecurityError) Unwrap() error { return e.Err }

// Fields returns Config as sink.Config.<field>.
func (e *SecurityError) Fields() []string { return configFields(e.Config...) }

// securityError explains err when it is a TLS or SASL failure, else nil.
func (c Config) securityError(err error) error {
	var (
		unknownCA x509.UnknownAuthorityError
		hostErr   x509.HostnameError
		invalid   x509.CertificateInvalidError
		recordErr tls.RecordHeaderError
		opErr     *net.OpError
		se        *SettingError
		awsErr    *AWSCredentialsError
	)
	mech := c.SASL.mechanism()
	switch {
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		switch mech {
		case MechanismOAuthBearer:
			return &SecurityError{Msg: "kafka: SASL OAUTHBEARER authentication failed (check the token in the OAuth token file)",
				Config: []string{"SASL.OAuthTokenFile"}, Err: err}
		case MechanismAWSMSKIAM:
			return &SecurityError{Msg: "kafka: SASL AWS_MSK_IAM authentication failed (check which AWS identity the default credential chain finds and the IAM policy of the cluster)", Err: err}
		}
		return &SecurityError{Msg: fmt.Sprintf("kafka: SASL authentication failed for user %q with %s (check the SASL username and password)", c.SASL.Username, mech),
			Config: []string{"SASL.Username", "SASL.Password"}, Err: err}
	case errors.Is(err, kerr.UnsupportedSaslMechanism):
		return &SecurityError{Msg: fmt.Sprintf("kafka: the broker listener does not enable SASL mechanism %s (set the SASL mechanism to one it enables, or use the listener for it)", mech),
			Config: []string{"SASL.Mechanism", "Brokers"}, Err: err}
	case errors.Is(err, kerr.IllegalSaslState) && mech == "":
		return &SecurityError{Msg: "kafka: the broker listener requires SASL (set the SASL mechanism and its credentials)",
			Config: []string{"SASL.Mechanism", "SASL.Username", "SASL.Password"}, Err: err}
	case errors.As(err, &unknownCA):
		return &SecurityError{Msg: "kafka TLS: certificate signed by unknown authority (set the Kafka TLS CA file to the CA that signed the broker's certificate)",
			Config: []string{"TLS.CAFile"}, Err: err}
	case errors.As(err, &hostErr):
		return &SecurityError{Msg: "kafka TLS: the broker's certificate is not valid for the name walrelay dialed (set the Kafka TLS server name to a name in the certificate, or list the brokers by that name)",
			Config: []string{"TLS.ServerName", "Brokers"}, Err: err}
	case errors.As(err, &invalid):
		return &SecurityError{Msg: "kafka TLS: the broker's certificate is invalid (renew it, or check the clock)", Err: err}
	case errors.As(err, &recordErr):
		return &SecurityError{Msg: "kafka TLS: the broker does not speak TLS on this port (use its TLS listener, or turn Kafka TLS off)",
			Config: []string{"Brokers", "TLS"}, Err: err}
	case errors.As(err, &opErr) && opErr.Op == "remote error" && isClientCertAlert(opErr.Err):
		return &SecurityError{Msg: "kafka TLS: the broker rejected the client certificate (set the Kafka TLS client certificate and key to a certificate signed by a CA the broker trusts)",
			Config: []string{"TLS.CertFile", "TLS.KeyFile"}, Err: err}
	case errors.As(err, &se):
		return &SecurityError{Msg: "kafka: cannot authenticate", Config: append([]string{se.Setting}, se.Related...), Err: err}
	case errors.As(err, &awsErr):
		return &SecurityError{Msg: "kafka: cannot authenticate", Config: []string{"SASL.Mechanism"}, Err: err}
	}
	return nil
}

// isClientCertAlert reports a TLS alert by which a broker refuses walrelay's
// client certificate (or its absence). crypto/tls does not export the alert
// type of a TCP connection, only its text.
func isClientCertAlert(err error) bool {
	if err == nil {
		return false
	}
	switch err.Error() {
	case "tls: bad certificate", "tls: certificate required", "tls: unknown certificate authority":
		return true
	}
	return false
}
