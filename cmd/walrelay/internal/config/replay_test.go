package config

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/walrelay/walrelay/operator"
)

func TestParseTime(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		in   string
		want time.Time
		bad  bool
	}{
		{in: "2026-11-24T10:00:00Z", want: time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)},
		{in: "2026-11-24T10:00:00.123456+02:00", want: time.Date(2026, 11, 24, 8, 0, 0, 123456000, time.UTC)},
		{in: "2026-11-24", want: time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)},
		{in: "2026-11-24 07:30", want: time.Date(2026, 11, 24, 7, 30, 0, 0, time.UTC)},
		{in: "2026-11-24T07:30:15", want: time.Date(2026, 11, 24, 7, 30, 15, 0, time.UTC)},
		{in: "36h", want: now.Add(-36 * time.Hour)},
		{in: "3d", want: now.Add(-72 * time.Hour)},
		{in: "", want: time.Time{}},
		{in: "tuesday", bad: true},
		{in: "-3d", bad: true},
		{in: "2026-13-01", bad: true},
	} {
		got, err := parseTime(c.in, now)
		switch {
		case c.bad && err == nil:
			t.Errorf("%q: %v, want an error", c.in, got)
		case !c.bad && (err != nil || !got.Equal(c.want)):
			t.Errorf("%q: %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

// loadReplay loads replay's configuration from the minimal run flags and args.
func loadReplay(args ...string) (ReplayConfig, error) {
	cfg := DefaultReplayConfig()
	err := Load(Command{Name: "replay"}, &cfg, append(slices.Clone(minimalArgs), args...), envMap(nil), io.Discard)
	return cfg, err
}

// TestReplayConfig: replay takes run's settings (the same mapping and
// routing) and its own selection; combinations that cannot mean what they
// say are refused naming the setting.
func TestReplayConfig(t *testing.T) {
	cfg, err := loadReplay("--topic", "orders.{event_type}", "--created-at-column", "born", "--since", "2026-11-24",
		"--aggregate-type", "order,invoice", "--rate", "500", "--delivery", "exactly-once")
	if err != nil {
		t.Fatal(err)
	}
	ro, err := cfg.Replay(nil)
	if err != nil || ro.TimeColumn != "born" || ro.Rate != 500 || !ro.Selection.Since.Equal(time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)) ||
		!slices.Equal(ro.Selection.AggregateTypes, []string{"order", "invoice"}) {
		t.Errorf("replay options %+v, %v", ro, err)
	}
	if ro.Sink.Topic != "orders.{event_type}" || ro.ExactlyOnce == nil || ro.ExactlyOnce.TransactionalID != "walrelay-walrelay" {
		t.Errorf("replay options from run's settings: %+v", ro)
	}
	if cfg.RecoveryMargin != operator.DefaultRecoveryMargin {
		t.Errorf("recovery margin %v, want the library's default %v", cfg.RecoveryMargin, operator.DefaultRecoveryMargin)
	}
	// A recovery resumes as a recovery: it keeps its pending slot and
	// hands it over at the end.
	if _, err := loadReplay("--since-last-delivered", "--resume", "tok"); err != nil {
		t.Errorf("--since-last-delivered --resume: %v", err)
	}
	for _, c := range []struct {
		args []string
		key  string
	}{
		{[]string{"--since", "2026-11-25", "--until", "2026-11-24"}, "until"},
		{[]string{"--since", "2026-11-25", "--until", "2026-11-25"}, "until"},
		{[]string{"--rate", "-1"}, "rate"},
		{[]string{"--resume", "tok", "--replay-id", "x"}, "replay-id"},
		{[]string{"--since-last-delivered", "--since", "1d"}, "since-last-delivered"},
		{[]string{"--since-last-delivered", "--event-type", "e"}, "since-last-delivered"},
		{[]string{"--recovery-margin", "-1h"}, "recovery-margin"},
		{[]string{"--progress", "fancy"}, "progress"},
		{[]string{"--progress-interval", "0"}, "progress-interval"},
		{[]string{"--created-at-column", ""}, "created-at-column"},
		{[]string{"--slot", "Bad-Slot"}, "slot"}, // run's own checks apply
	} {
		_, err := loadReplay(c.args...)
		var ce *Error
		if !errors.As(err, &ce) || ce.Key != c.key {
			t.Errorf("%v: %v, want a refusal naming %s", c.args, err, c.key)
		}
	}
}

func TestRedriveConfig(t *testing.T) {
	load := func(args ...string) (RedriveConfig, error) {
		cfg := DefaultRedriveConfig()
		err := Load(Command{Name: "dlq redrive"}, &cfg, append(slices.Clone(minimalArgs), args...), envMap(nil), io.Discard)
		return cfg, err
	}
	cfg, err := load("--reason", "topic_refused", "--intended-topic", "a.b", "--since", "1d", "--dlq-topic", "dead")
	if err != nil {
		t.Fatal(err)
	}
	ro, err := cfg.Redrive(nil)
	if err != nil || !slices.Equal(ro.Reasons, []string{"topic_refused"}) || !slices.Equal(ro.Topics, []string{"a.b"}) || ro.Since.IsZero() ||
		ro.Group != operator.DefaultRedriveGroup || ro.Sink.DeadLetterTopic() != "dead" {
		t.Errorf("redrive options %+v, %v", ro, err)
	}
	for _, c := range []struct {
		args []string
		key  string
	}{
		{[]string{"--reason", "because"}, "reason"},
		{[]string{"--intended-topic", "bad topic"}, "intended-topic"},
		{[]string{"--since", "2d", "--until", "3d"}, "until"},
		{[]string{"--redrive-group", ""}, "redrive-group"},
	} {
		_, err := load(c.args...)
		var ce *Error
		if !errors.As(err, &ce) || ce.Key != c.key {
			t.Errorf("%v: %v, want a refusal naming %s", c.args, err, c.key)
		}
	}
}

// TestCommandLine: the flags that carry a run's settings to another
// command: what differs from the defaults, the --config file, quoted for a
// shell; a secret given directly is left out and named, one from a file is
// carried as its file.
func TestCommandLine(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "walrelay config.yaml")
	if err := os.WriteFile(file, []byte("slot: from_file\ntables: [{name: a.outbox}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Defaults()
	err := Load(Command{Name: "run"}, &cfg, []string{"--config", file, "--postgres-dsn", "postgres://u:secret@h/db", "--kafka-brokers", "k1:9092,k2:9092",
		"--topic", "orders.{event_type}", "--create-topics=false", "--log-level", "debug", "--sasl-mechanism", "PLAIN", "--sasl-username", "it's me",
		"--sasl-password", "pw-secret"}, envMap(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	def := Defaults()
	flags, leftOut := CommandLine(&cfg, &def, func(key, group string) bool { return group != GroupGeneral })
	line := strings.Join(flags, " ")
	for _, want := range []string{"--config='" + file + "'", "--slot=from_file", "--kafka-brokers=k1:9092,k2:9092", "--topic='orders.{event_type}'",
		"--create-topics=false", "--sasl-mechanism=PLAIN", `--sasl-username='it'\''s me'`} {
		if !strings.Contains(line, want) {
			t.Errorf("command line %s lacks %s", line, want)
		}
	}
	for _, never := range []string{"secret", "log-level", "--tables", "--publication"} {
		if strings.Contains(line, never) {
			t.Errorf("command line %s holds %s", line, never)
		}
	}
	if !slices.Equal(leftOut, []string{"postgres-dsn", "sasl-password"}) {
		t.Errorf("left out %v, want the two secrets", leftOut)
	}

	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte("pw-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg = Defaults()
	if err := Load(Command{Name: "run"}, &cfg, []string{"--postgres-dsn", "postgres://h/db", "--kafka-brokers", "k:9092",
		"--sasl-mechanism", "PLAIN", "--sasl-username", "u", "--sasl-password-file", pwFile}, envMap(nil), io.Discard); err != nil {
		t.Fatal(err)
	}
	flags, leftOut = CommandLine(&cfg, &def, func(string, string) bool { return true })
	line = strings.Join(flags, " ")
	if !strings.Contains(line, "--sasl-password-file="+pwFile) || strings.Contains(line, "pw-secret") || strings.Contains(line, "--config") ||
		!slices.Equal(leftOut, []string{"postgres-dsn"}) {
		t.Errorf("with the password from a file: %s, left out %v", line, leftOut)
	}
}
