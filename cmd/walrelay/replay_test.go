package main

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/walrelay/walrelay/cmd/walrelay/internal/config"
	"github.com/walrelay/walrelay/operator"
)

// TestRecoverySuggestion: after a lost slot, walrelay run prints the replay
// that recovers it with the settings that matter (tables, routing, Kafka,
// delivery, the slot always), not how run logs or serves, and never the
// DSN; the line parses as replay's command line.
func TestRecoverySuggestion(t *testing.T) {
	cfg := config.Defaults()
	err := config.Load(config.Command{Name: "run"}, &cfg, []string{"--postgres-dsn", "postgres://u:pg-secret@h/db", "--kafka-brokers", "k:9092",
		"--table", "sales.outbox", "--topic", "sales.{event_type}", "--delivery", "exactly-once", "--metrics-addr", ":9999", "--log-level", "debug",
		"--create-slot=false"}, envMap(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s := recoverySuggestion(cfg)
	line := s.line()
	want := "walrelay replay --since-last-delivered --slot=walrelay --table=sales.outbox --kafka-brokers=k:9092 --delivery=exactly-once --topic='sales.{event_type}'"
	if line != want {
		t.Errorf("recovery line\n%s\nwant\n%s", line, want)
	}
	if n := s.note(); !strings.Contains(n, "WALRELAY_POSTGRES_DSN") || strings.Contains(n, "pg-secret") {
		t.Errorf("note %q: want where to give the DSN, without it", n)
	}
	// The line's flags are replay's settings, and replay accepts them.
	words := strings.Fields(strings.ReplaceAll(line, "'", ""))
	replay := config.DefaultReplayConfig()
	if err := config.Load(config.Command{Name: "replay"}, &replay, append(words[2:], "--postgres-dsn", "postgres://h/db"), envMap(nil), io.Discard); err != nil {
		t.Fatalf("replay refuses the recovery line: %v", err)
	}
	if !replay.SinceLastDelivered || replay.Topic != cfg.Topic || replay.Delivery != config.DeliveryExactlyOnce || replay.Tables[0] != "sales.outbox" {
		t.Errorf("replay from the line: %+v", replay)
	}

	// Printed after the error: plain lines on a terminal, a log record else.
	for _, terminal := range []bool{true, false} {
		var stderr bytes.Buffer
		c := newCall("run", &cfg, streams{stdout: io.Discard, stderr: &stderr, terminal: terminal})
		s.print(c)
		out := stderr.String()
		if terminal && !strings.HasPrefix(out, "walrelay run: recover with:\n  "+want+"\n  (") {
			t.Errorf("terminal:\n%s", out)
		}
		var rec map[string]any
		if !terminal && (json.Unmarshal([]byte(out), &rec) != nil || rec["msg"] != "recover with" || rec["command"] != want) {
			t.Errorf("json:\n%s", out)
		}
	}
}

// TestResumeSuggestion: an interrupted replay's resume line carries the
// token and the selection's lists, not the time range the token holds.
func TestResumeSuggestion(t *testing.T) {
	cfg := config.DefaultReplayConfig()
	err := config.Load(config.Command{Name: "replay"}, &cfg, []string{"--postgres-dsn", "postgres://h/db", "--kafka-brokers", "k:9092",
		"--since", "2026-11-24", "--aggregate-type", "order", "--replay-id", "r1", "--rate", "100"}, envMap(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	line := resumeSuggestion(cfg, "TOKEN").line()
	if line != "walrelay replay --resume=TOKEN --kafka-brokers=k:9092 --aggregate-type=order --rate=100" {
		t.Errorf("resume line %s", line)
	}
}

func TestProgressBar(t *testing.T) {
	rp := operator.ReplayProgress{Total: 1000, Acked: 240, Filtered: 10}
	got := bar(rp, 125, 6*time.Second)
	if !strings.HasPrefix(got, "replay [#######.......................] 250/1000  25% 125 rows/s ETA 6s") {
		t.Errorf("bar %q", got)
	}
	if got := bar(operator.ReplayProgress{}, 0, -1); !strings.Contains(got, "0/0   0% 0 rows/s ETA --") {
		t.Errorf("empty bar %q", got)
	}

	// Log lines carry the resume token, the rate and the ETA.
	var stderr bytes.Buffer
	cfg := config.DefaultReplayConfig()
	c := newCall("replay", &cfg, streams{stdout: io.Discard, stderr: &stderr})
	p := newReplayProgress(c, cfg)
	if p.mode != config.ProgressLog || p.interval != cfg.ProgressInterval {
		t.Fatalf("not a terminal: mode %s every %v, want log lines every %v", p.mode, p.interval, cfg.ProgressInterval)
	}
	p.report(operator.ReplayProgress{Table: "public.outbox", Total: 100, Acked: 10, ResumeToken: "T1"})
	p.lastAt = p.lastAt.Add(-time.Second)
	p.report(operator.ReplayProgress{Table: "public.outbox", Total: 100, Acked: 60, ResumeToken: "T2"})
	p.finish()
	lines := logLines(t, stderr.String(), "replay progress")
	if len(lines) != 2 || lines[1]["resume_token"] != "T2" || lines[1]["acked"] != 60.0 || lines[1]["eta"] == nil {
		t.Errorf("progress lines %v", lines)
	}
	c.terminal = true
	if p := newReplayProgress(c, cfg); p.mode != config.ProgressBar || p.interval != barInterval {
		t.Errorf("terminal: mode %s every %v, want the bar", p.mode, p.interval)
	}
}

// TestReplayAndRedriveUsage: both commands list their own settings, run's
// mapping and Kafka settings, and refuse what they cannot do before any
// connection.
func TestReplayAndRedriveUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"replay", "-h"}, []string{"Usage: walrelay replay", "-since-last-delivered", "-resume", "-aggregate-type", "-topic", "-kafka-brokers", "-created-at-column", "walrelay run -h"}},
		{[]string{"dlq", "redrive", "-h"}, []string{"Usage: walrelay dlq redrive", "-reason", "-intended-topic", "-redrive-group", "-dlq-topic", "-kafka-brokers"}},
		{[]string{"help", "dlq", "redrive"}, []string{"Usage: walrelay dlq redrive"}},
	} {
		code, out := mainOut(nil, c.args...)
		if code != ExitOK {
			t.Errorf("%v: exit %d", c.args, code)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v does not show %s", c.args, w)
			}
		}
		if listed(out, "-linger") || listed(out, "-pprof") {
			t.Errorf("%v lists run's tuning settings", c.args)
		}
	}
	dsn := []string{"--postgres-dsn", "postgres://u@127.0.0.1:1/db", "--kafka-brokers", "127.0.0.1:1"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{append([]string{"replay", "--since-last-delivered", "--since", "1d"}, dsn...), "since-last-delivered"},
		{append([]string{"replay", "--progress", "loud"}, dsn...), "progress"},
		{append([]string{"dlq", "redrive", "--reason", "gremlins"}, dsn...), "reason"},
	} {
		code, out := mainOut(nil, c.args...)
		if code != ExitConfig || !strings.Contains(out, c.want) {
			t.Errorf("%v: exit %d, want %d naming %s:\n%s", c.args, code, ExitConfig, c.want, out)
		}
	}
}

// TestReplayOfMissingTableSaysTheFix: replay of a table that does not exist fails
// with one line that says what to do.
func TestReplayOfMissingTableSaysTheFix(t *testing.T) {
	dsn, _ := testDatabase(t)
	code, out, errOut := runMain("replay", "--postgres-dsn", dsn, "--kafka-brokers", "127.0.0.1:1", "--table", "public.nope",
		"--since", "1h", "--dry-run", "--log-format", "text")
	if code != ExitFailure || !strings.Contains(errOut, "public.nope does not exist; fix:") || !strings.Contains(errOut, "walrelay migrate") ||
		strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
		t.Errorf("replay --table public.nope: exit %d, want %d and one line with the fix\n%s%s", code, ExitFailure, out, errOut)
	}
}
