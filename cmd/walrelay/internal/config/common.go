package config

import (
	"errors"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walrelay/walrelay/cloudauth"
	"github.com/walrelay/walrelay/replication"
)

// Log formats (--log-format).
const (
	LogAuto = "auto" // text on a terminal, json otherwise
	LogJSON = "json"
	LogText = "text"
)

// Logging is the log settings of every command that logs: the same keys,
// defaults and checks everywhere.
type Logging struct {
	LogLevel  string // debug, info (default), warn or error
	LogFormat string // auto (default), json or text
}

func defaultLogging() Logging { return Logging{LogLevel: "info", LogFormat: LogAuto} }

func (l *Logging) loggingSettings() []setting {
	return []setting{
		{name: "log-level", group: GroupGeneral, usage: "debug, info, warn or error", value: stringVal{&l.LogLevel}},
		{name: "log-format", group: GroupGeneral, usage: "auto (text on a terminal, json otherwise), json or text", value: stringVal{&l.LogFormat}},
	}
}

// Log returns the log settings.
func (l Logging) Log() Logging { return l }

func (l Logging) validate() error {
	if _, err := ParseLevel(l.LogLevel); err != nil {
		return &Error{Key: "log-level", Err: err}
	}
	switch l.LogFormat {
	case LogAuto, LogJSON, LogText:
		return nil
	}
	return invalid("log-format", "must be auto, json or text, got %q", l.LogFormat)
}

// Postgres is the connection setting of every command that connects to
// Postgres: the DSN, or the file holding it, and where each connection's
// password comes from.
type Postgres struct {
	PostgresDSN     string
	PostgresDSNFile string // holds the DSN instead of PostgresDSN
	// PostgresAuth is password ("" too: the DSN's), aws-iam, gcp-iam or
	// azure-ad (a token per connection from that cloud's SDK).
	PostgresAuth      string
	PostgresAWSRegion string // aws-iam: the database's region ("": from the host name)
	// PostgresPasswordFile is read for every connection (password auth).
	PostgresPasswordFile string
}

// Postgres authentication methods (--postgres-auth).
const (
	AuthPassword = "password"
	AuthAWSIAM   = "aws-iam"
	AuthGCPIAM   = "gcp-iam"
	AuthAzureAD  = "azure-ad"
)

// PasswordSource returns what supplies each Postgres connection's password
// (see replication.PasswordSource); nil for the DSN's own. Call it once per
// command: each source keeps its own credential cache.
func (p Postgres) PasswordSource() replication.PasswordSource {
	switch p.PostgresAuth {
	case AuthAWSIAM:
		return &cloudauth.RDSIAM{Region: p.PostgresAWSRegion}
	case AuthGCPIAM:
		return &cloudauth.GCPIAM{}
	case AuthAzureAD:
		return &cloudauth.AzureAD{}
	}
	if p.PostgresPasswordFile != "" {
		return replication.PasswordFile(p.PostgresPasswordFile)
	}
	return nil
}

func (p *Postgres) postgresSettings() []setting {
	return []setting{
		{name: "postgres-dsn", group: GroupPostgres, value: stringVal{&p.PostgresDSN},
			usage: "Postgres connection (libpq URL or key=value DSN); required; keep a password out of the command line (environment or file)"},
		{name: "postgres-dsn-file", group: GroupPostgres, value: stringVal{&p.PostgresDSNFile}, secretOf: "postgres-dsn",
			usage: "file holding the Postgres DSN (instead of --postgres-dsn; trailing newlines ignored)"},
		{name: "postgres-auth", group: GroupPostgres, value: stringVal{&p.PostgresAuth},
			usage: "how each Postgres connection authenticates: password (the DSN's, PGPASSWORD or .pgpass; the default), aws-iam (an RDS/Aurora IAM token per connection), gcp-iam (a Cloud SQL/AlloyDB IAM token), azure-ad (a Microsoft Entra ID token); tokens come from the cloud's default credentials"},
		{name: "postgres-aws-region", group: GroupPostgres, value: stringVal{&p.PostgresAWSRegion},
			usage: "aws-iam: the database's AWS region (default: from an RDS host name, else the AWS configuration)"},
		{name: "postgres-password-file", group: GroupPostgres, value: stringVal{&p.PostgresPasswordFile},
			usage: "file holding the Postgres password, read again for every connection so that a sidecar can rotate it (trailing newlines ignored)"},
	}
}

// validate checks the DSN: set, and parsed as pgx parses it (the message
// never shows the password).
func (p Postgres) validate() error {
	if p.PostgresDSN == "" {
		return invalid("postgres-dsn", "required, e.g. postgres://walrelay@db:5432/app")
	}
	pc, err := pgconn.ParseConfig(p.PostgresDSN)
	if err != nil {
		return &Error{Key: "postgres-dsn", Err: err}
	}
	switch p.PostgresAuth {
	case "", AuthPassword:
		if p.PostgresAWSRegion != "" {
			return invalid("postgres-aws-region", "only used with --postgres-auth %s", AuthAWSIAM)
		}
		if p.PostgresPasswordFile != "" {
			if _, err := os.Stat(p.PostgresPasswordFile); err != nil {
				return &Error{Key: "postgres-password-file", Err: err}
			}
		}
		return nil
	case AuthAWSIAM, AuthGCPIAM, AuthAzureAD:
	default:
		return invalid("postgres-auth", "must be %s, %s, %s or %s, got %q", AuthPassword, AuthAWSIAM, AuthGCPIAM, AuthAzureAD, p.PostgresAuth)
	}
	if p.PostgresPasswordFile != "" {
		return invalid("postgres-password-file", "only used with --postgres-auth %s (a %s token replaces the password)", AuthPassword, p.PostgresAuth)
	}
	if p.PostgresAWSRegion != "" && p.PostgresAuth != AuthAWSIAM {
		return invalid("postgres-aws-region", "only used with --postgres-auth %s", AuthAWSIAM)
	}
	if !replication.TLSReachable(pc) {
		return invalid("postgres-auth", "a %s token must not travel in clear text, and the Postgres DSN connects without TLS: set sslmode=require (or verify-full)", p.PostgresAuth)
	}
	return nil
}

// firstError runs checks in order and returns the first error.
func firstError(checks ...func() error) error {
	for _, check := range checks {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// slotSetting is --slot with the usage given.
func slotSetting(p *string, usage string) setting {
	return setting{name: "slot", group: GroupPostgres, usage: usage, value: stringVal{p}}
}

// validateReplication checks rc as the replication package does and names
// the setting it refuses.
func validateReplication(rc replication.Config) error {
	err := rc.Validate()
	if err == nil {
		return nil
	}
	var se *replication.SettingError
	if errors.As(err, &se) {
		return keyedError(se, se.Setting, se.Err)
	}
	return err
}

// oneTable refuses a --table that names several tables, for commands that
// work on one.
func oneTable(table, command string) error {
	if strings.Contains(table, ",") {
		return invalid("table", "%q names several tables; %s one table per run", table, command)
	}
	if _, err := replication.ParseTable(table); err != nil {
		return &Error{Key: "table", Err: err}
	}
	return nil
}
