package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/walrelay/walrelay/cmd/walrelay/internal/config"
)

// sample is a value of one setting in a --config file and the value the
// setting then has (as its flag prints it).
type sample struct {
	yaml string // the YAML value; "" leaves the key out of the file
	want string
}

// settingSamples returns a sample of every setting of every command. They
// fit together: one file with all of them is a valid configuration of each
// command. dsnFile and passwordFile hold the two secrets.
func settingSamples(dsnFile, passwordFile string) map[string]sample {
	return map[string]sample{
		"log-level":  {"debug", "debug"},
		"log-format": {"text", "text"},
		// The secrets come from their files, so the file sets no secret itself.
		"postgres-dsn":       {"", "postgres://file@h/db"},
		"postgres-dsn-file":  {dsnFile, dsnFile},
		"sasl-password":      {"", "sasl-file-secret"},
		"sasl-password-file": {passwordFile, passwordFile},
		// read for every connection; a region only goes with aws-iam
		"postgres-auth":          {"password", "password"},
		"postgres-aws-region":    {"", ""},
		"postgres-password-file": {passwordFile, passwordFile},
		// The primary's DSN of a walrelay decoding on a standby, in the file
		// itself (its file variant is left out: one source per secret).
		"heartbeat-postgres-dsn":      {"postgres://primary@p/db", "postgres://primary@p/db"},
		"heartbeat-postgres-dsn-file": {"", ""},

		"slot":                           {"orders", "orders"},
		"publication":                    {"orders_pub", "orders_pub"},
		"create-slot":                    {"false", "false"},
		"create-publication":             {"false", "false"},
		"slot-failover":                  {"true", "true"},
		"table":                          {"sales.outbox", "sales.outbox"},
		"tables":                         {"[{name: sales.outbox2, columns: debezium}]", "sales.outbox2"},
		"columns":                        {"debezium", "debezium"},
		"column-id":                      {"c_id", "c_id"},
		"column-aggregate-type":          {"c_at", "c_at"},
		"column-aggregate-id":            {"c_ai", "c_ai"},
		"column-event-type":              {"c_et", "c_et"},
		"column-payload":                 {"c_pl", "c_pl"},
		"column-headers":                 {"c_hd", "c_hd"},
		"column-timestamp":               {"c_ts", "c_ts"},
		"column-partition":               {"c_pt", "c_pt"},
		"header-columns":                 {"[h1, h2]", "h1,h2"},
		"include-event-types":            {"['Order*', 'Invoice?']", "Order*,Invoice?"},
		"exclude-event-types":            {"['*Draft']", "*Draft"},
		"include-aggregate-types":        {"[order]", "order"},
		"exclude-aggregate-types":        {"[test_*]", "test_*"},
		"envelope":                       {"[c_et:eventType, c_ai]", "c_et:eventType,c_ai"},
		"expand-json-payload":            {"true", "true"},
		"message-prefix":                 {"walrelay.outbox", "walrelay.outbox"},
		"kafka-brokers":                  {"[k1:9092, k2:9092]", "k1:9092,k2:9092"},
		"kafka-client-id":                {"relay-1", "relay-1"},
		"kafka-timeout":                  {"20s", "20s"},
		"kafka-tls":                      {"true", "true"},
		"kafka-tls-ca-file":              {"/etc/ca.pem", "/etc/ca.pem"},
		"kafka-tls-cert-file":            {"/etc/c.pem", "/etc/c.pem"},
		"kafka-tls-key-file":             {"/etc/c.key", "/etc/c.key"},
		"kafka-tls-server-name":          {"kafka.internal", "kafka.internal"},
		"kafka-tls-insecure-skip-verify": {"true", "true"},
		"sasl-mechanism":                 {"OAUTHBEARER", "OAUTHBEARER"},
		"sasl-username":                  {"relay", "relay"},
		"sasl-oauth-token-file":          {"/etc/token", "/etc/token"},
		"delivery":                       {"exactly-once", "exactly-once"},
		"transactional-id":               {"tx-1", "tx-1"},
		"checkpoint-topic":               {"cp.topic", "cp.topic"},
		"checkpoint-replication-factor":  {"3", "3"},
		"txn-commit-interval":            {"250ms", "250ms"},
		"txn-max-records":                {"500", "500"},
		"topic":                          {`"orders.{event_type}"`, "orders.{event_type}"},
		"create-topics":                  {"false", "false"},
		"topic-partitions":               {"6", "6"},
		"topic-replication-factor":       {"3", "3"},
		"on-poison":                      {"stop", "stop"},
		"dlq-topic":                      {"dead.letters", "dead.letters"},
		"cloudevents":                    {"true", "true"},
		"cloudevents-source":             {"/src", "/src"},
		"content-type":                   {"application/cloudevents+json", "application/cloudevents+json"},
		"compression":                    {"lz4", "lz4"},
		"batching":                       {"fixed", "fixed"},
		"linger":                         {"20ms", "20ms"},
		"batch-max-bytes":                {"2MiB", "2MiB"},
		"max-buffered-bytes":             {"128MiB", "128MiB"},
		"max-in-flight":                  {"5000", "5000"},
		"heartbeat-interval":             {"30s", "30s"},
		"status-interval":                {"2s", "2s"},
		"standby-retry-interval":         {"3s", "3s"},
		"slot-metrics-interval":          {"0", "0s"},
		"slot-holder-alert-after":        {"0", "0s"},
		"slot-create-timeout":            {"0", "0s"},
		"shutdown-timeout":               {"45s", "45s"},
		"metrics-addr":                   {`":9999"`, ":9999"},
		"pprof":                          {"true", "true"},
		"procs":                          {"2", "2"},
		"older-than":                     {"3d", "72h0m0s"},
		"batch-size":                     {"500", "500"},
		"created-at-column":              {"born", "born"},
		"dry-run":                        {"true", "true"},
		"from-slot":                      {"dbz", "dbz"},
		"timeout":                        {"5m", "5m0s"},
		"poll-interval":                  {"2s", "2s"},
		"stall-warning":                  {"30s", "30s"},
		"nudge":                          {"false", "false"},
		"drop-from-slot":                 {"true", "true"},
		"start-lsn":                      {"0/2A", "0/2A"},
		"partitioned":                    {"true", "true"},

		// Basic auth, so neither bearer token (one kind of credentials).
		"schema-registry-url":                      {"[http://sr1:8081, http://sr2:8081]", "http://sr1:8081,http://sr2:8081"},
		"schema-registry-username":                 {"relay", "relay"},
		"schema-registry-password":                 {"", "sasl-file-secret"},
		"schema-registry-password-file":            {passwordFile, passwordFile},
		"schema-registry-bearer-token":             {"", ""},
		"schema-registry-bearer-token-file":        {"", ""},
		"schema-registry-tls-ca-file":              {"/etc/sr-ca.pem", "/etc/sr-ca.pem"},
		"schema-registry-tls-cert-file":            {"/etc/sr.pem", "/etc/sr.pem"},
		"schema-registry-tls-key-file":             {"/etc/sr.key", "/etc/sr.key"},
		"schema-registry-tls-server-name":          {"registry.internal", "registry.internal"},
		"schema-registry-tls-insecure-skip-verify": {"true", "true"},
		"schema-registry-timeout":                  {"3s", "3s"},
		"schema-subject-strategy":                  {"topic-record", "topic-record"},
		"schema-dir":                               {"/etc/schemas", "/etc/schemas"},
		"schema-rules":                             {"[{table: sales.outbox2, event_type: OrderCreated, value: {file: /etc/order.avsc}}]", "sales.outbox2/OrderCreated"},

		"force":                   {"true", "true"},
		"accept-slot-loss":        {"true", "true"},
		"on-slot-lost":            {"recover", "recover"},
		"outbox-span-interval":    {"5m", "5m0s"},
		"outbox-retention-target": {"7d", "168h0m0s"},
		"since":                   {"2026-11-24", "2026-11-24T00:00:00Z"},
		"until":                   {`"2026-11-25T06:30:00.5+01:00"`, "2026-11-25T05:30:00.5Z"},
		"event-id":                {"[e1, e2]", "e1,e2"},
		"aggregate-type":          {"order", "order"},
		"aggregate-id":            {"[o-1, o-2]", "o-1,o-2"},
		"event-type":              {"OrderCreated", "OrderCreated"},
		"rate":                    {"250.5", "250.5"},
		"resume":                  {"tok", "tok"},
		"replay-id":               {"", ""}, // the resume token carries the id
		"since-last-delivered":    {"false", "false"},
		"recovery-margin":         {"30m", "30m0s"},
		"progress":                {"log", "log"},
		"progress-interval":       {"2s", "2s"},
		"reason":                  {"[topic_refused, too_large]", "topic_refused,too_large"},
		"intended-topic":          {"orders.x", "orders.x"},
		"redrive-group":           {"g-1", "g-1"},
	}
}

// yamlFile writes a --config file with the samples of keys (each under its
// key with _ for -, as the docs spell them) and the extra lines.
func yamlFile(t *testing.T, dir, name string, samples map[string]sample, keys []string, extra ...string) string {
	t.Helper()
	var b strings.Builder
	for _, k := range keys {
		if s := samples[k]; s.yaml != "" {
			fmt.Fprintf(&b, "%s: %s\n", config.YAMLKey(k), s.yaml)
		}
	}
	for _, l := range extra {
		b.WriteString(l + "\n")
	}
	return writeFile(t, dir, name, b.String())
}

// TestEveryCommandTakesItsSettingsFromConfigFile: for every command, a
// --config file holding every setting the command takes sets each of them
// (the same file for all: each ignores the others' keys); a key no command
// has is refused by every command; and every command's settings are keys
// the file may hold.
func TestEveryCommandTakesItsSettingsFromConfigFile(t *testing.T) {
	dir := t.TempDir()
	samples := settingSamples(writeFile(t, dir, "dsn", "postgres://file@h/db\n"), writeFile(t, dir, "pw", "sasl-file-secret\n"))
	known := config.KnownKeys()
	var all []string
	for _, cmd := range commands() {
		for _, k := range config.Keys(cmd.settings()) {
			if !slices.Contains(all, k) {
				all = append(all, k)
			}
		}
	}
	shared := yamlFile(t, dir, "shared.yaml", samples, all)
	unknown := yamlFile(t, dir, "unknown.yaml", samples, all, "no_such_setting: 1")
	for _, cmd := range commands() {
		t.Run(cmd.spec.Name, func(t *testing.T) {
			keys := config.Keys(cmd.settings())
			own := yamlFile(t, dir, cmd.spec.Name+".yaml", samples, keys)
			withConfig := func(file string) []string {
				if strings.HasPrefix(cmd.args, "<") { // the command's one argument
					return []string{"--config", file, "arg"}
				}
				return []string{"--config", file}
			}
			for _, file := range []string{own, shared} {
				s := cmd.settings()
				if err := config.Load(cmd.spec, s, withConfig(file), envMap(nil), io.Discard); err != nil {
					t.Fatalf("--config %s: %v", filepath.Base(file), err)
				}
				for _, k := range keys[1:] { // keys[0] is config itself
					sm, ok := samples[k]
					if !ok {
						t.Errorf("setting %s has no sample in settingSamples: add one", k)
						continue
					}
					if got, _ := config.Value(s, k); got != sm.want {
						t.Errorf("--config %s: %s is %q, want %q", filepath.Base(file), k, got, sm.want)
					}
				}
			}
			for _, k := range keys {
				if !slices.Contains(known, k) {
					t.Errorf("setting %s is not a key a --config file may hold (add the command's configuration to config.everyCommand)", k)
				}
			}
			err := config.Load(cmd.spec, cmd.settings(), withConfig(unknown), envMap(nil), io.Discard)
			var ce *config.Error
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), `unknown key "no_such_setting"`) {
				t.Errorf("a key no command has: %v, want it refused", err)
			}
		})
	}
}

// TestEveryCommandTakesConfigFromFlagAndEnv: --config and WALRELAY_CONFIG
// name the file for every command; the flag wins.
func TestEveryCommandTakesConfigFromFlagAndEnv(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, dir, "good.yaml", "postgres_dsn: postgres://h/db\n")
	bad := writeFile(t, dir, "bad.yaml", "postgres_dsn: [\n")
	for _, cmd := range commands() {
		for _, c := range []struct {
			args []string
			env  map[string]string
		}{
			{[]string{"--config", good}, map[string]string{"WALRELAY_CONFIG": bad}},
			{nil, map[string]string{"WALRELAY_CONFIG": good}},
		} {
			s := cmd.settings()
			err := config.Load(cmd.spec, s, c.args, envMap(c.env), io.Discard)
			var ce *config.Error
			if errors.As(err, &ce) && strings.Contains(err.Error(), "config file") {
				t.Errorf("%s %v (env %v): %v; want %s read", cmd.spec.Name, c.args, c.env, err, good)
			}
			if _, takesDSN := config.Value(s, "postgres-dsn"); takesDSN {
				if dsn, _ := config.Value(s, "postgres-dsn"); dsn != "postgres://h/db" {
					t.Errorf("%s %v (env %v): DSN %q, want the file's", cmd.spec.Name, c.args, c.env, dsn)
				}
			}
		}
	}
}

// keyedError is a library error naming settings (the SettingKeys contract).
type keyedError struct {
	msg  string
	keys []string
}

func (e *keyedError) Error() string         { return e.msg }
func (e *keyedError) SettingKeys() []string { return e.keys }

// TestTerminalOutput: on a terminal a command's configuration error and its
// failure are one plain line; elsewhere a JSON log record; --log-format
// forces either. The settings a library error names are rendered both ways.
func TestTerminalOutput(t *testing.T) {
	badSlot := []string{"status", "--postgres-dsn", "postgres://u@h/db", "--slot", "Bad-Slot"}
	for _, c := range []struct {
		name     string
		args     []string
		terminal bool
		plain    bool
		setting  string
	}{
		{"terminal", badSlot, true, true, "slot"},
		{"not a terminal", badSlot, false, false, "slot"},
		{"terminal, json forced", append(slices.Clone(badSlot), "--log-format", "json"), true, false, "slot"},
		{"not a terminal, text forced", append(slices.Clone(badSlot), "--log-format", "text"), false, true, "slot"},
		{"terminal, bad log format", append(slices.Clone(badSlot), "--log-format", "xml"), true, true, "log-format"},
		{"not a terminal, bad log format", append(slices.Clone(badSlot), "--log-format", "xml"), false, false, "log-format"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := execute(context.Background(), commands(), c.args, envMap(nil), streams{stdout: &stdout, stderr: &stderr, terminal: c.terminal})
			out := stderr.String()
			if code != ExitConfig || strings.Count(out, "\n") != 1 {
				t.Fatalf("exit %d, want %d and one line:\n%s", code, ExitConfig, out)
			}
			if c.plain && (!strings.HasPrefix(out, "walrelay status: invalid configuration: ") || strings.Contains(out, "{")) {
				t.Errorf("want one plain line, got:\n%s", out)
			}
			if !c.plain && !strings.HasPrefix(out, `{"time":`) {
				t.Errorf("want a JSON log record, got:\n%s", out)
			}
			if where := "--" + c.setting + " / " + config.EnvName(c.setting) + " / " + config.YAMLKey(c.setting) + " in --config"; !strings.Contains(out, where) {
				t.Errorf("the error does not say %q:\n%s", where, out)
			}
		})
	}
	// A failure whose error names settings, in both formats.
	err := fmt.Errorf("start: %w", &keyedError{msg: "kafka: SASL authentication failed", keys: []string{"sasl-username", "sasl-password"}})
	want := "kafka: SASL authentication failed (settings: --sasl-username / WALRELAY_SASL_USERNAME / sasl_username in --config; " +
		"WALRELAY_SASL_PASSWORD, or a file: --sasl-password-file / WALRELAY_SASL_PASSWORD_FILE / sasl_password_file in --config)"
	for _, terminal := range []bool{true, false} {
		var stderr bytes.Buffer
		cfg := config.Defaults()
		c := newCall("run", &cfg, streams{stdout: io.Discard, stderr: &stderr, terminal: terminal})
		if code := c.result("walrelay stopped", err, "slot", "orders"); code != ExitFailure {
			t.Errorf("exit %d, want %d", code, ExitFailure)
		}
		out := stderr.String()
		if terminal && out != "walrelay run: start: "+want+" (slot=orders)\n" {
			t.Errorf("terminal: got\n%s", out)
		}
		if !terminal && (!strings.Contains(out, `"msg":"walrelay stopped","error":"start: `+want+`","slot":"orders"`)) {
			t.Errorf("json: got\n%s", out)
		}
	}
}

// TestIsTerminal: a pseudo-terminal is a terminal; a pipe, a file and a
// writer that is no file are not.
func TestIsTerminal(t *testing.T) {
	pty, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open a pseudo-terminal: %v", err)
	}
	defer pty.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	file, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	for _, c := range []struct {
		name string
		w    io.Writer
		want bool
	}{
		{"pty", pty, true}, {"pipe", w, false}, {"file", file, false}, {"buffer", &bytes.Buffer{}, false},
	} {
		if got := isTerminal(c.w); got != c.want {
			t.Errorf("%s: isTerminal %v, want %v", c.name, got, c.want)
		}
	}
}
