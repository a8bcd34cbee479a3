package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestNoSecretInHelpOrUsageErrors: with every secret walrelay reads set in the
// environment and in files (the Postgres DSN and the SASL password, each both
// ways, and the per-connection Postgres password file), no command's help,
// usage error or configuration error shows one.
// The environment also sets both the DSN and its file, so each command stops
// at the configuration check before it connects anywhere.
func TestNoSecretInHelpOrUsageErrors(t *testing.T) {
	dir := t.TempDir()
	secrets := map[string]string{
		"WALRELAY_POSTGRES_DSN":  "env-dsn-pw-1",
		"WALRELAY_SASL_PASSWORD": "env-sasl-pw-3",
	}
	files := map[string]string{
		"WALRELAY_POSTGRES_DSN_FILE":      "file-dsn-pw-2",
		"WALRELAY_SASL_PASSWORD_FILE":     "file-sasl-pw-4",
		"WALRELAY_POSTGRES_PASSWORD_FILE": "file-pg-pw-5",
	}
	env := map[string]string{
		"WALRELAY_POSTGRES_DSN":       "postgres://relay:" + secrets["WALRELAY_POSTGRES_DSN"] + "@127.0.0.1:1/app",
		"WALRELAY_POSTGRES_DSN_FILE":  writeFile(t, dir, "dsn", "postgres://relay:"+files["WALRELAY_POSTGRES_DSN_FILE"]+"@127.0.0.1:1/app\n"),
		"WALRELAY_SASL_MECHANISM":     "SCRAM-SHA-512",
		"WALRELAY_SASL_USERNAME":      "relay",
		"WALRELAY_SASL_PASSWORD":      secrets["WALRELAY_SASL_PASSWORD"],
		"WALRELAY_SASL_PASSWORD_FILE": writeFile(t, dir, "sasl", files["WALRELAY_SASL_PASSWORD_FILE"]+"\n"),
		// read for every connection, never at start: a rotated token
		"WALRELAY_POSTGRES_PASSWORD_FILE": writeFile(t, dir, "pgpw", files["WALRELAY_POSTGRES_PASSWORD_FILE"]+"\n"),
		"WALRELAY_POSTGRES_AWS_REGION":    "eu-west-1",
		"WALRELAY_KAFKA_BROKERS":          "127.0.0.1:1",
		"WALRELAY_FROM_SLOT":              "debezium",
		"WALRELAY_OLDER_THAN":             "72h",
	}
	var passwords []string
	for _, m := range []map[string]string{secrets, files} {
		for _, pw := range m {
			passwords = append(passwords, pw)
		}
	}
	// Each invocation: help, a flag walrelay does not know, a stray argument, a
	// bad flag value, and no flags at all (a configuration error: the DSN is
	// set twice).
	invocations := func(cmd ...string) [][]string {
		return [][]string{
			append(cmd, "-h"), append(cmd, "--help"), append(cmd, "--no-such-flag"),
			append(cmd, "stray-argument"), append(cmd, "--postgres-dsn"), cmd,
		}
	}
	tests := []struct {
		name string
		args [][]string
	}{
		{"top-level", [][]string{nil, {"-h"}, {"--help"}, {"help"}, {"no-such-command"}, {"--no-such-flag"}}},
		{"run", invocations("run")},
		{"doctor", invocations("doctor")},
		{"status", invocations("status")},
		{"migrate", invocations("migrate")},
		{"prune", invocations("prune")},
		{"cutover", invocations("cutover")},
		{"version", [][]string{{"version"}, {"version", "-h"}, {"--version"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, args := range tc.args {
				var stdout, stderr bytes.Buffer
				ctx, cancel := context.WithCancel(t.Context())
				cancel() // nothing may wait on a network: a configuration error comes first
				code := Main(ctx, args, envMap(env), &stdout, &stderr)
				out := stdout.String() + stderr.String()
				if out == "" {
					t.Errorf("walrelay %s: exit %d and no output; the test checks nothing", strings.Join(args, " "), code)
				}
				for _, pw := range passwords {
					if strings.Contains(out, pw) {
						t.Errorf("walrelay %s (exit %d) shows the secret %q:\n%s", strings.Join(args, " "), code, pw, out)
					}
				}
			}
		})
	}
}
