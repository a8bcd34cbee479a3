package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/walrelay/walrelay/test/pgtest"
)

func TestMainUsageAndExitCodes(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		env      map[string]string
		code     int
		inOutput string
	}{
		{"no command", nil, nil, ExitConfig, "Usage:"},
		{"unknown command", []string{"frobnicate"}, nil, ExitConfig, `unknown command "frobnicate"`},
		{"version", []string{"version"}, nil, ExitOK, "walrelay"},
		{"help", []string{"help"}, nil, ExitOK, "walrelay run"},
		{"run without dsn", []string{"run", "--kafka-brokers", "k:9092"}, nil, ExitConfig, "postgres-dsn"},
		{"run help", []string{"run", "-h"}, nil, ExitOK, "-postgres-dsn"},
		{"migrate without dsn", []string{"migrate"}, nil, ExitConfig, "postgres-dsn"},
		{"migrate bad table", []string{"migrate", "--postgres-dsn", "postgres://u@127.0.0.1:1/db", "--table", "a.b.c"}, nil, ExitConfig, "table"},
		{"status unreachable", []string{"status", "--postgres-dsn", "postgres://u@127.0.0.1:1/db?connect_timeout=2"}, nil, ExitFailure, "check the host and port in the Postgres DSN"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := Main(context.Background(), tc.args, envMap(tc.env), &out, &errOut)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stdout %q stderr %q", code, tc.code, out.String(), errOut.String())
			}
			if all := out.String() + errOut.String(); !strings.Contains(all, tc.inOutput) {
				t.Fatalf("output does not mention %q: %s", tc.inOutput, all)
			}
		})
	}
}

// TestSubcommandHelpAndBadFlags: `walrelay <cmd> -h` prints that command's
// usage on stdout and exits 0; a bad flag prints its error once and a
// one-line hint, not the usage.
func TestSubcommandHelpAndBadFlags(t *testing.T) {
	tests := []struct {
		cmd  string
		flag string // a flag only this command's usage lists
	}{
		{"run", "-max-buffered-bytes"},
		{"doctor", "-kafka-brokers"},
		{"migrate", "-partitioned"},
		{"status", "-slot"},
		{"prune", "-older-than"},
		{"cutover", "-from-slot"},
		{"replay", "-since-last-delivered"},
	}
	for _, tc := range tests {
		t.Run(tc.cmd, func(t *testing.T) {
			for _, h := range []string{"-h", "--help"} {
				var out, errOut bytes.Buffer
				code := Main(context.Background(), []string{tc.cmd, h}, envMap(nil), &out, &errOut)
				if code != ExitOK || errOut.Len() != 0 {
					t.Fatalf("%s %s: exit %d, stderr %q; want 0 and nothing on stderr", tc.cmd, h, code, errOut.String())
				}
				usage := out.String()
				listed := strings.Contains(usage, "\n  "+tc.flag+" ") || strings.Contains(usage, "\n  "+tc.flag+"\n")
				if !strings.HasPrefix(usage, "Usage: walrelay "+tc.cmd+" ") || !listed {
					t.Fatalf("%s %s: stdout is not this command's usage listing %s:\n%s", tc.cmd, h, tc.flag, usage)
				}
			}
			for _, bad := range [][]string{{"--no-such-flag"}, {"stray-argument"}} {
				var out, errOut bytes.Buffer
				code := Main(context.Background(), append([]string{tc.cmd}, bad...), envMap(nil), &out, &errOut)
				if code != ExitConfig {
					t.Fatalf("%s %v: exit %d, want %d", tc.cmd, bad, code, ExitConfig)
				}
				want := "run 'walrelay " + tc.cmd + " -h' for the flags\n"
				lines := strings.Split(strings.TrimSuffix(errOut.String(), "\n"), "\n")
				if out.Len() != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "walrelay "+tc.cmd+": ") ||
					!strings.Contains(lines[0], strings.TrimLeft(bad[0], "-")) || lines[1]+"\n" != want {
					t.Fatalf("%s %v: want one error line naming %q and the hint %q; stdout %q stderr:\n%s", tc.cmd, bad, bad[0], want, out.String(), errOut.String())
				}
			}
		})
	}
}

func TestDoctorAndStatus(t *testing.T) {
	dsn := pgtest.DSN(t)
	pg := pgtest.Connect(t, dsn)
	pg.Exec("DROP TABLE IF EXISTS public.doctor_outbox")
	t.Cleanup(func() { pg.Exec("DROP TABLE IF EXISTS public.doctor_outbox") })
	run := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := Main(context.Background(), args, envMap(nil), &out, &errOut)
		return code, out.String() + errOut.String()
	}
	// Table missing and broker unreachable: doctor reports both with fixes.
	code, out := run("doctor", "--postgres-dsn", dsn, "--kafka-brokers", "127.0.0.1:1", "--table", "public.doctor_outbox", "--kafka-timeout", "2s")
	if code != ExitFailure || !strings.Contains(out, "FAIL table") || !strings.Contains(out, "walrelay migrate") || !strings.Contains(out, "FAIL kafka") {
		t.Fatalf("doctor: exit %d\n%s", code, out)
	}
	if code, out := run("migrate", "--postgres-dsn", dsn, "--table", "public.doctor_outbox"); code != ExitOK {
		t.Fatalf("migrate: %d %s", code, out)
	}
	code, out = run("doctor", "--postgres-dsn", dsn, "--kafka-brokers", "127.0.0.1:1", "--table", "public.doctor_outbox", "--kafka-timeout", "2s")
	if !strings.Contains(out, "ok   table") || !strings.Contains(out, "will create it") || !strings.Contains(out, "ok   server") {
		t.Fatalf("doctor after migrate: %s", out)
	}
	if code, out := run("status", "--postgres-dsn", dsn, "--slot", "no_such_slot_here"); code != ExitOK || !strings.Contains(out, "walrelay run will create it") {
		t.Fatalf("status of a missing slot: %d %s", code, out)
	}
	// Exactly-once: doctor checks the transaction coordinator (a kfake
	// broker here) without fencing anything.
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	code, out = run("doctor", "--postgres-dsn", dsn, "--kafka-brokers", cluster.ListenAddrs()[0], "--table", "public.doctor_outbox",
		"--delivery", "exactly-once", "--slot", "doctor_eos")
	if !strings.Contains(out, `ok   exactly-once transactional id "walrelay-doctor_eos"`) || !strings.Contains(out, "read_committed") {
		t.Fatalf("doctor --delivery exactly-once: exit %d\n%s", code, out)
	}
}
