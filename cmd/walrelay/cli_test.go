package main

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/walrelay/walrelay/cmd/walrelay/internal/config"
)

// mainOut runs Main with env and returns the exit code and everything printed.
func mainOut(env map[string]string, args ...string) (int, string) {
	var out, errOut bytes.Buffer
	code := Main(context.Background(), args, envMap(env), &out, &errOut)
	return code, out.String() + errOut.String()
}

// TestEveryCommandReadsConfigFile: every command takes --config (and
// WALRELAY_CONFIG): a file that does not exist is a configuration error
// naming it, never "flag provided but not defined".
func TestEveryCommandReadsConfigFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such.yaml")
	for _, cmd := range []string{"run", "doctor", "status", "migrate", "prune", "cutover", "replay", "version"} {
		t.Run(cmd, func(t *testing.T) {
			for _, how := range []struct {
				args []string
				env  map[string]string
			}{
				{[]string{cmd, "--config", missing}, nil},
				{[]string{cmd}, map[string]string{"WALRELAY_CONFIG": missing}},
			} {
				code, out := mainOut(how.env, how.args...)
				if code != ExitConfig || !strings.Contains(out, missing) || strings.Contains(out, "not defined") {
					t.Errorf("walrelay %s (env %v): exit %d, want %d and an error naming %s:\n%s",
						strings.Join(how.args, " "), how.env, code, ExitConfig, missing, out)
				}
			}
		})
	}
}

// TestVersionAndHelpRefuseStrayArguments: version and help take no flags of
// their own and no arguments (help takes one command name).
func TestVersionAndHelpRefuseStrayArguments(t *testing.T) {
	for _, args := range [][]string{
		{"version", "--foo"}, {"version", "extra"}, {"help", "--foo"}, {"help", "no-such-command"}, {"help", "run", "extra"},
	} {
		code, out := mainOut(nil, args...)
		if code != ExitConfig || !strings.Contains(out, strings.TrimLeft(args[len(args)-1], "-")) {
			t.Errorf("walrelay %s: exit %d, want %d and an error naming %q:\n%s", strings.Join(args, " "), code, ExitConfig, args[len(args)-1], out)
		}
	}
	if code, out := mainOut(nil, "help", "prune"); code != ExitOK || !strings.HasPrefix(out, "Usage: walrelay prune") {
		t.Errorf("walrelay help prune: exit %d, want prune's usage:\n%s", code, out)
	}
}

// listed reports whether the -h output help lists the flag (e.g. "-slot").
func listed(help, flag string) bool {
	return strings.Contains(help, "\n  "+flag+" ") || strings.Contains(help, "\n  "+flag+"\n")
}

// TestDoctorHelpListsItsChecks: doctor -h lists the settings its checks use,
// not every tuning knob of walrelay run; doctor still takes those (a run
// command line works with doctor in its place).
func TestDoctorHelpListsItsChecks(t *testing.T) {
	_, help := mainOut(nil, "doctor", "-h")
	for _, want := range []string{"-postgres-dsn", "-slot", "-table", "-kafka-brokers", "-sasl-mechanism", "-kafka-tls-ca-file", "-delivery", "-config"} {
		if !listed(help, want) {
			t.Errorf("doctor -h does not list %s:\n%s", want, help)
		}
	}
	for _, tuning := range []string{"-linger", "-compression", "-batch-max-bytes", "-pprof", "-procs", "-cloudevents-source"} {
		if listed(help, tuning) {
			t.Errorf("doctor -h lists %s, a setting none of its checks uses", tuning)
		}
	}
	if !strings.Contains(help, "walrelay run -h") {
		t.Errorf("doctor -h does not say where the other settings it takes are listed:\n%s", help)
	}
	// A bad value of a setting doctor does not list is still refused like run does.
	code, out := mainOut(nil, "doctor", "--postgres-dsn", "postgres://u@127.0.0.1:1/db", "--kafka-brokers", "k:9092", "--linger", "-1s", "--batching", "eager")
	if code != ExitConfig || !strings.Contains(out, "batching") {
		t.Errorf("doctor --batching eager: exit %d, want %d naming batching:\n%s", code, ExitConfig, out)
	}
}

// TestNoDoubledWords: messages do not repeat their own prefix.
func TestNoDoubledWords(t *testing.T) {
	dir := t.TempDir()
	bad := writeFile(t, dir, "bad.yaml", "postgres_dns: typo\n")
	for _, args := range [][]string{
		{"run", "--config", bad},
		{"run", "--kafka-brokers", "k:9092", "--postgres-dsn", "postgres://u@h/db", "--slot", "Bad-Slot"},
		{"prune", "--postgres-dsn", "postgres://u@h/db", "--older-than", "1m"},
	} {
		_, out := mainOut(nil, args...)
		for _, doubled := range []string{"config config", "invalid configuration\",\"error\":\"invalid config", "connect: connect"} {
			if strings.Contains(out, doubled) {
				t.Errorf("walrelay %s says %q:\n%s", strings.Join(args, " "), doubled, out)
			}
		}
	}
}

// TestCommandOfSeveralWords: a command named by two words (dlq redrive,
// here a stand-in for it) is found, loads its settings like any other, and
// has its usage and help.
func TestCommandOfSeveralWords(t *testing.T) {
	var ran []string
	redrive := newCommand(config.Command{Name: "dlq redrive", Usage: "Usage: walrelay dlq redrive\n"}, "", "re-send dead letters",
		func() config.NoSettings { return config.NoSettings{} },
		func(_ context.Context, _ config.NoSettings, c *call) int { ran = append(ran, c.name); return ExitOK })
	cmds := append(slices.DeleteFunc(commands(), func(c command) bool { return c.spec.Name == "dlq redrive" }), redrive)
	exec := func(args ...string) (int, string) {
		var out bytes.Buffer
		code := execute(context.Background(), cmds, args, envMap(nil), streams{stdout: &out, stderr: &out})
		return code, out.String()
	}
	if code, out := exec("dlq", "redrive"); code != ExitOK || len(ran) != 1 || ran[0] != "dlq redrive" {
		t.Errorf("dlq redrive: exit %d, ran %v\n%s", code, ran, out)
	}
	if code, out := exec("dlq", "redrive", "--config", filepath.Join(t.TempDir(), "missing.yaml")); code != ExitConfig || !strings.Contains(out, "missing.yaml") {
		t.Errorf("dlq redrive --config missing: exit %d\n%s", code, out)
	}
	if code, out := exec("dlq", "redrive", "extra"); code != ExitConfig || !strings.HasPrefix(out, "walrelay dlq redrive: ") {
		t.Errorf("dlq redrive extra: exit %d\n%s", code, out)
	}
	if code, out := exec("help", "dlq", "redrive"); code != ExitOK || !strings.HasPrefix(out, "Usage: walrelay dlq redrive\n") {
		t.Errorf("help dlq redrive: exit %d\n%s", code, out)
	}
	if code, out := exec("dlq"); code != ExitConfig || !strings.Contains(out, "walrelay dlq: missing its sub-command: walrelay dlq redrive") {
		t.Errorf("dlq alone: exit %d\n%s", code, out)
	}
}

// TestDoctorLinesNameTheCheckOnce: doctor's line for a server it cannot
// reach names the check once, not again as the error's own prefix, and says
// how to fix it.
func TestDoctorLinesNameTheCheckOnce(t *testing.T) {
	code, out := mainOut(nil, "doctor", "--postgres-dsn", "postgres://u@127.0.0.1:1/db?connect_timeout=2",
		"--kafka-brokers", "127.0.0.1:1", "--kafka-timeout", "1s")
	if code != ExitFailure || !strings.Contains(out, "FAIL kafka ") || !strings.Contains(out, "FAIL postgres ") {
		t.Fatalf("doctor with nothing reachable: exit %d, want %d with a FAIL line per server:\n%s", code, ExitFailure, out)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "FAIL kafka") && !strings.Contains(l, "fix: check the broker addresses") {
			t.Errorf("doctor's FAIL line has no fix: %s", l)
		}
		if f := strings.Fields(l); len(f) > 2 && strings.TrimSuffix(f[2], ":") == f[1] {
			t.Errorf("doctor line names its check twice: %s", l)
		}
	}
}

// TestCommandGroupsAndRequiredSettings: `walrelay help config` prints the usage of
// config from-debezium (the one command of the group), `walrelay config` alone names
// its sub-commands, and run without its two required settings names both at once.
func TestCommandGroupsAndRequiredSettings(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"help", "config"}, ExitOK, []string{"Usage: walrelay config from-debezium"}},
		{[]string{"help", "dlq"}, ExitOK, []string{"Usage: walrelay dlq redrive"}},
		{[]string{"config"}, ExitConfig, []string{"walrelay config from-debezium", "walrelay help config"}},
		{[]string{"run"}, ExitConfig, []string{"postgres-dsn", "kafka-brokers", "WALRELAY_POSTGRES_DSN", "WALRELAY_KAFKA_BROKERS"}},
	} {
		code, out := mainOut(nil, c.args...)
		for _, w := range c.want {
			if code != c.code || !strings.Contains(out, w) {
				t.Errorf("walrelay %s: exit %d, want %d and %q\n%s", strings.Join(c.args, " "), code, c.code, w, out)
				break
			}
		}
	}
}
