package config

import (
	"errors"
	"fmt"
	"testing"

	"github.com/walrelay/walrelay/relay"
	"github.com/walrelay/walrelay/sink"
)

// libError is a library error that names settings, as the contract asks.
type libError struct {
	msg  string
	keys []string
	err  error
}

func (e *libError) Error() string         { return e.msg }
func (e *libError) Unwrap() error         { return e.err }
func (e *libError) SettingKeys() []string { return e.keys }

func TestExplain(t *testing.T) {
	sasl := &libError{msg: `kafka: SASL authentication failed for user "x" with SCRAM-SHA-512 — check the SASL username and password`,
		keys: []string{"sasl-username", "sasl-password"}}
	slot := &libError{msg: "slot in use", keys: []string{"slot"}}
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"no keys", errors.New("boom"), "boom"},
		{"one key", slot, "slot in use (setting: --slot / WALRELAY_SLOT / slot in --config)"},
		{"secret offered by env or file, not by flag", sasl,
			`kafka: SASL authentication failed for user "x" with SCRAM-SHA-512 — check the SASL username and password ` +
				"(settings: --sasl-username / WALRELAY_SASL_USERNAME / sasl_username in --config; " +
				"WALRELAY_SASL_PASSWORD, or a file: --sasl-password-file / WALRELAY_SASL_PASSWORD_FILE / sasl_password_file in --config)"},
		{"wrapped", fmt.Errorf("start: %w", slot), "start: slot in use (setting: --slot / WALRELAY_SLOT / slot in --config)"},
		{"joined, each key once", errors.Join(slot, fmt.Errorf("again: %w", slot), &libError{msg: "tables", keys: []string{"tables", "slot"}}),
			"slot in use\nagain: slot in use\ntables (settings: --slot / WALRELAY_SLOT / slot in --config; tables in --config)"},
		{"nested keys after the outer ones", &libError{msg: "outer", keys: []string{"kafka-tls-ca-file"}, err: slot},
			"outer (settings: --kafka-tls-ca-file / WALRELAY_KAFKA_TLS_CA_FILE / kafka_tls_ca_file in --config; --slot / WALRELAY_SLOT / slot in --config)"},
		{"a key no command has", &libError{msg: "m", keys: []string{"no-such-key"}}, "m (setting: no-such-key)"},
		{"config.Error", invalid("max-in-flight", "must be at least 2"), "max-in-flight: must be at least 2 (setting: --max-in-flight / WALRELAY_MAX_IN_FLIGHT / max_in_flight in --config)"},
		{"config.Error from env", &Error{Key: "slot", Source: "env WALRELAY_SLOT", Err: errors.New("bad")}, "slot (from env WALRELAY_SLOT): bad (setting: --slot / WALRELAY_SLOT / slot in --config)"},
		{"the DSN", invalid("postgres-dsn", "required"),
			"postgres-dsn: required (setting: WALRELAY_POSTGRES_DSN, or a file: --postgres-dsn-file / WALRELAY_POSTGRES_DSN_FILE / postgres_dsn_file in --config)"},
		{"the config file", &Error{Key: configKey, Source: "/etc/w.yaml", Err: errors.New(`unknown key "x"`)}, `config file /etc/w.yaml: unknown key "x"`},
		{"usage", UsageError(errors.New("flag provided but not defined: -x")), "invalid command line: flag provided but not defined: -x"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Explain(c.err); got != c.want {
				t.Errorf("Explain =\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}

// TestEveryKeyRenders: every setting of every command renders as a flag, a
// variable or a file key, never as a bare key.
func TestEveryKeyRenders(t *testing.T) {
	for _, k := range KnownKeys() {
		if got := WithSettings("m", []string{k}); got == "m (setting: "+k+")" {
			t.Errorf("%s renders bare: %s", k, got)
		}
	}
}

// TestLibrarySettingErrors: the command's *Error made of a library's setting
// error names every setting the library named (SettingKeys), or falls back
// to the key the command maps the library's name to.
func TestLibrarySettingErrors(t *testing.T) {
	cause := errors.New("cannot read")
	lib := &libError{msg: "kafka tls-cert-file: cannot read", keys: []string{"kafka-tls-cert-file", "kafka-tls-key-file"}, err: cause}
	for _, c := range []struct {
		name string
		err  *Error
		want string
	}{
		{"keys from the library", keyedError(lib, "fallback", cause),
			"kafka-tls-cert-file: cannot read (settings: --kafka-tls-cert-file / WALRELAY_KAFKA_TLS_CERT_FILE / kafka_tls_cert_file in --config; " +
				"--kafka-tls-key-file / WALRELAY_KAFKA_TLS_KEY_FILE / kafka_tls_key_file in --config)"},
		{"no keys: the fallback", keyedError(errors.New("x"), "kafka-tls-ca-file", cause),
			"kafka-tls-ca-file: cannot read (setting: --kafka-tls-ca-file / WALRELAY_KAFKA_TLS_CA_FILE / kafka_tls_ca_file in --config)"},
		{"relay option", OptionError(&relay.OptionError{Option: "KafkaTimeout", Err: cause}),
			"kafka-timeout: cannot read (setting: --kafka-timeout / WALRELAY_KAFKA_TIMEOUT / kafka_timeout in --config)"},
		{"metrics address", MetricsAddrError(cause),
			"metrics-addr: cannot read (setting: --metrics-addr / WALRELAY_METRICS_ADDR / metrics_addr in --config)"},
		{"sink setting", SinkError(&sink.SettingError{Setting: "TLS.CAFile", Err: cause}).(*Error),
			"kafka-tls-ca-file: cannot read (setting: --kafka-tls-ca-file / WALRELAY_KAFKA_TLS_CA_FILE / kafka_tls_ca_file in --config)"},
	} {
		if got := Explain(c.err); got != c.want {
			t.Errorf("%s: Explain =\n%s\nwant\n%s", c.name, got, c.want)
		}
	}
}
