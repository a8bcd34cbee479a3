// Command walrelay relays transactional-outbox events from Postgres logical
// replication to Kafka. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/walrelay/walrelay/cmd/walrelay/internal/config"
	"github.com/walrelay/walrelay/relay"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Main(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `walrelay relays transactional-outbox events from Postgres logical replication to Kafka.

Usage:
  walrelay run     [flags]   stream outbox inserts to Kafka (the service)
  walrelay migrate [flags]   create the outbox table and the walrelay.emit function (idempotent)
  walrelay doctor  [flags]   check Postgres and Kafka prerequisites and say how to fix each
  walrelay status  [flags]   show the slot's position, lag and retained WAL
  walrelay prune   [flags]   delete (or drop partitions of) outbox rows older than --older-than
  walrelay cutover [flags]   take over from Debezium's outbox connector without a gap (--from-slot)
  walrelay version

Run 'walrelay <command> -h' for the flags. Every flag can also be set as
WALRELAY_<FLAG_IN_UPPER_SNAKE_CASE> or as a key in the --config YAML file.
`

// Main runs the walrelay command line and returns the exit code.
func Main(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return ExitConfig
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "run", "doctor":
		cfg, err := config.Load("walrelay "+cmd, commandUsage[cmd], rest, getenv, stdout)
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		if config.IsUsage(err) {
			return badFlags(stderr, cmd, err)
		}
		log := newLogger(stderr, cfg.LogLevel, cfg.LogFormat)
		if err != nil {
			log.Error("invalid configuration", "error", err.Error())
			return ExitConfig
		}
		if cmd == "doctor" {
			return doctor(ctx, cfg, stdout)
		}
		return run(ctx, cfg, log)
	case "migrate", "status":
		fs := flag.NewFlagSet("walrelay "+cmd, flag.ContinueOnError)
		fs.Usage = func() {
			fmt.Fprint(fs.Output(), commandUsage[cmd])
			fs.PrintDefaults()
		}
		// Built-in defaults only: the environment is applied after parsing, so
		// -h never shows a value from it (see config.ParseFlagsEnv).
		dsn := fs.String("postgres-dsn", "", "Postgres connection (env WALRELAY_POSTGRES_DSN)")
		dsnFile := fs.String("postgres-dsn-file", "", "file holding the Postgres DSN (env WALRELAY_POSTGRES_DSN_FILE)")
		table := fs.String("table", "public.outbox", "outbox table, schema.name (env WALRELAY_TABLE)")
		slot := fs.String("slot", "walrelay", "replication slot (env WALRELAY_SLOT)")
		var partitioned *bool
		if cmd == "migrate" {
			partitioned = fs.Bool("partitioned", false,
				"create the outbox partitioned by day (see migrations/partitioned) (env WALRELAY_PARTITIONED)")
		}
		err := config.ParseFlagsEnv(fs, rest, getenv, stdout)
		switch {
		case errors.Is(err, flag.ErrHelp):
			return ExitOK
		case config.IsUsage(err):
			return badFlags(stderr, cmd, err)
		}
		log := newLogger(stderr, "info", "json")
		if err == nil {
			err = config.ReadSecretFile("postgres-dsn", *dsnFile, dsn)
		}
		if err != nil {
			log.Error("invalid configuration", "error", err.Error())
			return ExitConfig
		}
		if *dsn == "" {
			log.Error("invalid configuration", "error", (&config.Error{Key: "postgres-dsn", Err: errors.New("required")}).Error())
			return ExitConfig
		}
		if cmd == "migrate" {
			err = migrate(ctx, *dsn, *table, *partitioned, log)
		} else {
			err = status(ctx, *dsn, *slot, stdout)
		}
		if err != nil {
			log.Error(cmd+" failed", "error", err.Error())
			return ExitFailure
		}
		return ExitOK
	case "prune":
		return pruneCommand(ctx, rest, getenv, stdout, stderr)
	case "cutover":
		return cutoverCommand(ctx, rest, getenv, stdout, stderr)
	case "version", "--version", "-version":
		v, rev := relay.BuildVersion()
		fmt.Fprintln(stdout, "walrelay", v, "revision", rev, runtime.Version())
		return ExitOK
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return ExitOK
	}
	fmt.Fprintf(stderr, "unknown command %q\n\n%s", cmd, usage)
	return ExitConfig
}

// commandUsage is what `walrelay <command> -h` prints above the flags.
var commandUsage = map[string]string{
	"run": `Usage: walrelay run [flags]

Streams outbox inserts from Postgres logical replication to Kafka (the service).

Flags (each also as WALRELAY_<FLAG_IN_UPPER_SNAKE_CASE> or a key in the --config file):
`,
	"doctor": `Usage: walrelay doctor [flags]

Checks the Postgres and Kafka prerequisites of 'walrelay run' with the same
settings, without changing anything, and prints one line per check with the fix.
Exit codes: 0 all checks pass, 1 a check failed, 2 invalid usage.

Flags (each also as WALRELAY_<FLAG_IN_UPPER_SNAKE_CASE> or a key in the --config file):
`,
	"migrate": `Usage: walrelay migrate [flags]

Creates the outbox table and the walrelay.emit function (idempotent).

Flags:
`,
	"status": `Usage: walrelay status [flags]

Shows the replication slot's position, lag and retained WAL.

Flags:
`,
}
