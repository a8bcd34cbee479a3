package config

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

// TestParseFlagsEnv: a flag wins over its WALRELAY_* variable, the variable
// fills a flag the command line left unset, a bad variable is a *Error naming
// it, and -h shows the built-in defaults, never the environment's values.
func TestParseFlagsEnv(t *testing.T) {
	env := envMap(map[string]string{
		"WALRELAY_POSTGRES_DSN": "postgres://u:env-secret@h/db",
		"WALRELAY_SLOT":         "from_env",
		"WALRELAY_TIMEOUT":      "7s",
	})
	newFS := func() (*flag.FlagSet, *string, *string, *time.Duration) {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		dsn := fs.String("postgres-dsn", "", "dsn")
		slot := fs.String("slot", "walrelay", "slot")
		timeout := fs.Duration("timeout", time.Minute, "timeout")
		return fs, dsn, slot, timeout
	}
	fs, dsn, slot, timeout := newFS()
	if err := ParseFlagsEnv(fs, []string{"--slot", "from_flag"}, env, io.Discard); err != nil {
		t.Fatal(err)
	}
	if *dsn != "postgres://u:env-secret@h/db" || *slot != "from_flag" || *timeout != 7*time.Second {
		t.Errorf("got dsn %q slot %q timeout %s; want the env DSN, the flag's slot, the env timeout", *dsn, *slot, *timeout)
	}

	fs, _, _, _ = newFS()
	err := ParseFlagsEnv(fs, nil, envMap(map[string]string{"WALRELAY_TIMEOUT": "soon"}), io.Discard)
	var ce *Error
	if !errors.As(err, &ce) || ce.Key != "timeout" || ce.Source != "env WALRELAY_TIMEOUT" || IsUsage(err) {
		t.Errorf("bad env value: %v; want a *Error for timeout from env WALRELAY_TIMEOUT", err)
	}

	fs, _, _, _ = newFS()
	var help strings.Builder
	if err := ParseFlagsEnv(fs, []string{"-h"}, env, &help); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	if strings.Contains(help.String(), "env-secret") || strings.Contains(help.String(), "from_env") ||
		!strings.Contains(help.String(), `(default "walrelay")`) {
		t.Errorf("-h must show the built-in defaults only:\n%s", help.String())
	}
}
