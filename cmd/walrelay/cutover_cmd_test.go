package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walrelay/walrelay/cmd/walrelay/internal/config"
)

func TestLoadCutoverConfig(t *testing.T) {
	dsn := "postgres://u@127.0.0.1:5432/db"
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantKey string // ConfigError key; "" for success
		check   func(t *testing.T, c config.CutoverConfig)
	}{
		{name: "defaults", args: []string{"--postgres-dsn", dsn, "--from-slot", "debezium"},
			check: func(t *testing.T, c config.CutoverConfig) {
				if c.Slot != "walrelay" || c.Publication != "walrelay" || !c.Nudge || c.Timeout != 10*time.Minute || !c.CreatePublication {
					t.Errorf("defaults: %+v", c)
				}
			}},
		{name: "env", args: []string{"--from-slot", "debezium"}, env: map[string]string{"WALRELAY_POSTGRES_DSN": dsn, "WALRELAY_SLOT": "wr"},
			check: func(t *testing.T, c config.CutoverConfig) {
				if c.PostgresDSN != dsn || c.Slot != "wr" {
					t.Errorf("env not applied: %+v", c)
				}
			}},
		{name: "drop with start lsn", args: []string{"--postgres-dsn", dsn, "--from-slot", "debezium", "--drop-from-slot", "--start-lsn", "1/2A"},
			check: func(t *testing.T, c config.CutoverConfig) {
				if !c.DropFromSlot || c.StartLSN != pglogrepl.LSN(1<<32|0x2A) {
					t.Errorf("drop flags: %+v", c)
				}
			}},
		{name: "dsn required", args: []string{"--from-slot", "debezium"}, wantKey: "postgres-dsn"},
		{name: "from-slot required", args: []string{"--postgres-dsn", dsn}, wantKey: "from-slot"},
		{name: "from-slot is walrelay's own", args: []string{"--postgres-dsn", dsn, "--from-slot", "walrelay"}, wantKey: "from-slot"},
		{name: "bad timeout", args: []string{"--postgres-dsn", dsn, "--from-slot", "d", "--timeout", "0"}, wantKey: "timeout"},
		{name: "start-lsn without drop", args: []string{"--postgres-dsn", dsn, "--from-slot", "d", "--start-lsn", "0/1"}, wantKey: "start-lsn"},
		{name: "bad lsn", args: []string{"--postgres-dsn", dsn, "--from-slot", "d", "--drop-from-slot", "--start-lsn", "x"}, wantKey: "flags"},
		{name: "bad slot name", args: []string{"--postgres-dsn", dsn, "--from-slot", "d", "--slot", "Bad-Slot"}, wantKey: "slot"},
		{name: "stray argument", args: []string{"--postgres-dsn", dsn, "--from-slot", "d", "extra"}, wantKey: "flags"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := config.DefaultCutoverConfig()
			err := config.Load(config.Command{Name: "cutover"}, &c, tc.args, envMap(tc.env), io.Discard)
			if tc.wantKey == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				tc.check(t, c)
				return
			}
			var ce *config.Error
			if !errors.As(err, &ce) || ce.Key != tc.wantKey {
				t.Fatalf("error %v, want a ConfigError for %q", err, tc.wantKey)
			}
		})
	}
}

func TestCutoverHelp(t *testing.T) {
	var out bytes.Buffer
	c := config.DefaultCutoverConfig()
	err := config.Load(config.Command{Name: "cutover", Usage: cutoverUsage}, &c, []string{"-h"}, envMap(nil), &out)
	if !errors.Is(err, flag.ErrHelp) || !strings.Contains(out.String(), "--drop-from-slot") || !strings.Contains(out.String(), "from-slot") {
		t.Fatalf("help: err %v, output %q", err, out.String())
	}
	var stdout, stderr bytes.Buffer
	if code := Main(t.Context(), []string{"cutover"}, envMap(nil), &stdout, &stderr); code != ExitConfig {
		t.Fatalf("cutover without flags: exit %d, want %d (stderr %s)", code, ExitConfig, stderr.String())
	}
}
