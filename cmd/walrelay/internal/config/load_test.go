package config

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLoadPrecedenceEveryCommand: for a command other than run (prune), a
// flag beats its WALRELAY_* variable, which beats the --config file, which
// beats the default; the same holds for run (TestLoadPrecedence).
func TestLoadPrecedenceEveryCommand(t *testing.T) {
	yml := writeFile(t, t.TempDir(), "walrelay.yaml", `
postgres_dsn: postgres://from-file/db
table: file.outbox
older_than: 5h
batch_size: 7
created-at-column: born
`)
	env := envMap(map[string]string{
		"WALRELAY_CONFIG":     yml,
		"WALRELAY_TABLE":      "env.outbox",
		"WALRELAY_OLDER_THAN": "6h",
	})
	cfg := DefaultPruneConfig()
	if err := Load(Command{Name: "prune"}, &cfg, []string{"--older-than", "3d"}, env, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"file", cfg.PostgresDSN, "postgres://from-file/db"},
		{"file, key spelt with -", cfg.CreatedAtColumn, "born"},
		{"env beats file", cfg.Table, "env.outbox"},
		{"flag beats env", cfg.OlderThan, 72 * time.Hour},
		{"file int", cfg.BatchSize, 7},
		{"default", cfg.LogFormat, LogAuto},
	} {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
}

// TestLoadHelpShowsBuiltInDefaults: -h prints the built-in defaults, never a
// value from the environment or the file (a DSN there may hold a password),
// and lists the settings under their group headings.
func TestLoadHelpShowsBuiltInDefaults(t *testing.T) {
	yml := writeFile(t, t.TempDir(), "w.yaml", "slot: file_slot\npostgres_dsn: postgres://u:file-secret@h/db\n")
	env := envMap(map[string]string{
		"WALRELAY_CONFIG":       yml,
		"WALRELAY_POSTGRES_DSN": "postgres://u:env-secret@h/db",
		"WALRELAY_SLOT":         "env_slot",
	})
	for _, args := range [][]string{{"-h"}, {"--slot", "flag_slot", "-h"}} {
		cfg := DefaultStatusConfig()
		var help strings.Builder
		if err := Load(Command{Name: "status", Usage: "Usage: walrelay status\n"}, &cfg, args, env, &help); !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("%v: %v, want flag.ErrHelp", args, err)
		}
		h := help.String()
		for _, leak := range []string{"env-secret", "file-secret", "env_slot", "file_slot", "flag_slot"} {
			if strings.Contains(h, leak) {
				t.Errorf("%v: -h shows %q:\n%s", args, leak, h)
			}
		}
		for _, want := range []string{"Usage: walrelay status\n", "\nGeneral:\n  -config string\n", "\nPostgres:\n  -postgres-dsn string\n",
			`(default "walrelay")`, "WALRELAY_NAME"} {
			if !strings.Contains(h, want) {
				t.Errorf("%v: -h lacks %q:\n%s", args, want, h)
			}
		}
	}
}

// TestLoadErrorsNameTheSource: a bad value names the setting and where it
// came from; a bad flag value is a usage error.
func TestLoadErrorsNameTheSource(t *testing.T) {
	yml := writeFile(t, t.TempDir(), "w.yaml", "batch_size: many\n")
	for _, c := range []struct {
		name   string
		args   []string
		env    map[string]string
		key    string
		source string
	}{
		{"env", []string{"--postgres-dsn", "postgres://h/db", "--older-than", "2h"}, map[string]string{"WALRELAY_BATCH_SIZE": "x"}, "batch-size", "env WALRELAY_BATCH_SIZE"},
		{"file", []string{"--postgres-dsn", "postgres://h/db", "--older-than", "2h", "--config", yml}, nil, "batch-size", yml},
		{"flag", []string{"--batch-size", "x"}, nil, usageKey, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultPruneConfig()
			err := Load(Command{Name: "prune"}, &cfg, c.args, envMap(c.env), io.Discard)
			var ce *Error
			if !errors.As(err, &ce) || ce.Key != c.key || ce.Source != c.source {
				t.Fatalf("got %#v (%v), want key %q from %q", ce, err, c.key, c.source)
			}
		})
	}
}

// TestSharedConfigFile: one file serves every command. A key of another
// command's setting is ignored, a key of no command is refused with the
// nearest key, and a map where a value belongs is refused.
func TestSharedConfigFile(t *testing.T) {
	dir := t.TempDir()
	shared := writeFile(t, dir, "shared.yaml", `
postgres_dsn: postgres://h/db
kafka_brokers: [k1:9092]
slot: orders
older_than: 3d
from_slot: debezium
partitioned: true
tables:
  - name: public.outbox
`)
	status := DefaultStatusConfig()
	if err := Load(Command{Name: "status"}, &status, []string{"--config", shared}, envMap(nil), io.Discard); err != nil || status.Slot != "orders" {
		t.Fatalf("status with a shared file: %v, slot %q", err, status.Slot)
	}
	run := Defaults()
	if err := Load(Command{Name: "run"}, &run, []string{"--config", shared}, envMap(nil), io.Discard); err != nil || len(run.TableSpecs) != 1 {
		t.Fatalf("run with a shared file: %v, tables %v", err, run.TableSpecs)
	}
	for _, c := range []struct {
		yaml, key, want string
	}{
		{"postgres_dns: x\n", configKey, `unknown key "postgres_dns": no walrelay command has this setting (did you mean postgres_dsn?)`},
		{"frobnicate: 1\n", configKey, `unknown key "frobnicate": no walrelay command has this setting`},
		{"slot: {a: b}\n", "slot", "is a map"},
		{"config: other.yaml\n", configKey, "cannot name another"},
		{"slot: [\n", configKey, "not valid YAML"},
	} {
		p := writeFile(t, dir, "c.yaml", c.yaml)
		cfg := DefaultStatusConfig()
		err := Load(Command{Name: "status"}, &cfg, []string{"--config", p, "--postgres-dsn", "postgres://h/db"}, envMap(nil), io.Discard)
		var ce *Error
		if !errors.As(err, &ce) || ce.Key != c.key || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%q: got %v, want a %s error naming %s and saying %q", c.yaml, err, c.key, p, c.want)
		}
	}
	err := Load(Command{Name: "status"}, &NoSettings{}, []string{"--config", filepath.Join(dir, "missing.yaml")}, envMap(nil), io.Discard)
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "missing.yaml") || strings.Contains(err.Error(), "config config") {
		t.Errorf("missing file: %v", err)
	}
}

// TestEveryCommandValidatesSharedKeysAlike: a setting several commands take
// is refused with the same message by each.
func TestEveryCommandValidatesSharedKeysAlike(t *testing.T) {
	for _, c := range []struct {
		key  string
		args []string
	}{
		{"postgres-dsn", nil},
		{"postgres-dsn", []string{"--postgres-dsn", "postgres://h:notaport/db"}},
		{"log-format", []string{"--postgres-dsn", "postgres://h/db", "--log-format", "xml"}},
		{"log-level", []string{"--postgres-dsn", "postgres://h/db", "--log-level", "loud"}},
	} {
		msgs := map[string]bool{}
		for _, s := range everyCommand() {
			if _, ok := s.(*NoSettings); ok {
				continue
			}
			// Enough for every command to get past its other checks.
			args := append([]string{"--kafka-brokers", "k:9092", "--from-slot", "dbz", "--older-than", "2h"}, c.args...)
			var keep []string
			for i := 0; i < len(args); i += 2 {
				if _, ok := Value(s, strings.TrimPrefix(args[i], "--")); ok {
					keep = append(keep, args[i], args[i+1])
				}
			}
			err := Load(Command{Name: "x"}, s, keep, envMap(nil), io.Discard)
			var ce *Error
			if !errors.As(err, &ce) || ce.Key != c.key {
				t.Fatalf("%T %v: %v, want a %s error", s, keep, err, c.key)
			}
			msgs[Explain(err)] = true
		}
		if len(msgs) != 1 {
			t.Errorf("%s: the commands refuse it with different messages: %v", c.key, msgs)
		}
	}
}

// TestRunFlagsServeEveryCommand: run's command line serves prune and status as one
// --config file does: a flag of run's that the command lacks is taken and ignored,
// a bad value of it is still refused, and -h lists only the command's own flags.
func TestRunFlagsServeEveryCommand(t *testing.T) {
	shared := []string{"--postgres-dsn", "postgres://u@db/app", "--kafka-brokers", "k:9092", "--publication", "pub", "--topic", "t.{aggregate_type}", "--slot", "s1"}
	prune := DefaultPruneConfig()
	if err := Load(Command{Name: "prune"}, &prune, append(shared, "--older-than", "3d"), envMap(nil), io.Discard); err != nil || prune.Slot != "s1" {
		t.Errorf("prune with run's flags: %v (slot %q)", err, prune.Slot)
	}
	status := DefaultStatusConfig()
	if err := Load(Command{Name: "status"}, &status, shared, envMap(nil), io.Discard); err != nil {
		t.Errorf("status with run's flags: %v", err)
	}
	status = DefaultStatusConfig()
	if err := Load(Command{Name: "status"}, &status, []string{"--postgres-dsn", "postgres://u@db/app", "--max-in-flight", "many"}, envMap(nil), io.Discard); err == nil {
		t.Error("status took a bad value of run's --max-in-flight")
	}
	status = DefaultStatusConfig()
	var help strings.Builder
	if err := Load(Command{Name: "status", Usage: "Usage: walrelay status\n"}, &status, []string{"-h"}, envMap(nil), &help); !errors.Is(err, flag.ErrHelp) || strings.Contains(help.String(), "-publication") {
		t.Errorf("status -h: %v, lists run's flags:\n%s", err, help.String())
	}
}

// TestTypoInsideTablesNamesLineAndNearestKey: a typo inside tables (or a table's
// filter) is reported as a top-level typo is, with the file's line of the key and the
// nearest key, and no Go type names.
func TestTypoInsideTablesNamesLineAndNearestKey(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ yml, want string }{
		{"postgres_dsn: postgres://u@db/app\nkafka_brokers: k:9092\ntables:\n  - name: public.outbox\n    topc: x\n",
			`line 5): unknown key "topc" (did you mean topic?)`},
		{"postgres_dsn: postgres://u@db/app\nkafka_brokers: k:9092\ntables:\n  - name: public.outbox\n    filter:\n      include_event_type: [a]\n",
			`line 6): unknown key "include_event_type" (did you mean include_event_types?)`},
	} {
		cfg := Defaults()
		err := Load(Command{Name: "run"}, &cfg, []string{"--config", writeFile(t, dir, "typo.yaml", c.yml)}, envMap(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "config.") {
			t.Errorf("typo:\n%s\ngot %v, want %q", c.yml, err, c.want)
		}
	}
}
