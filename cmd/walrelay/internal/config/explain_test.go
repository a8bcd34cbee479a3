package config

import (
	"errors"
	"fmt"
	"testing"
)

// keyedError is a library error that names settings, as the contract asks.
type keyedError struct {
	msg  string
	keys []string
	err  error
}

func (e *keyedError) Error() string         { return e.msg }
func (e *keyedError) Unwrap() error         { return e.err }
func (e *keyedError) SettingKeys() []string { return e.keys }

func TestExplain(t *testing.T) {
	sasl := &keyedError{msg: `kafka: SASL authentication failed for user "x" with SCRAM-SHA-512 — check the SASL username and password`,
		keys: []string{"sasl-username", "sasl-password"}}
	slot := &keyedError{msg: "slot in use", keys: []string{"slot"}}
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
		{"joined, each key once", errors.Join(slot, fmt.Errorf("again: %w", slot), &keyedError{msg: "tables", keys: []string{"tables", "slot"}}),
			"slot in use\nagain: slot in use\ntables (settings: --slot / WALRELAY_SLOT / slot in --config; tables in --config)"},
		{"nested keys after the outer ones", &keyedError{msg: "outer", keys: []string{"kafka-tls-ca-file"}, err: slot},
			"outer (settings: --kafka-tls-ca-file / WALRELAY_KAFKA_TLS_CA_FILE / kafka_tls_ca_file in --config; --slot / WALRELAY_SLOT / slot in --config)"},
		{"a key no command has", &keyedError{msg: "m", keys: []string{"no-such-key"}}, "m (setting: no-such-key)"},
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
