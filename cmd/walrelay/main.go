// Command walrelay relays transactional-outbox events from Postgres logical
// replication to Kafka. See README.md.
//
// The command only parses, calls and prints: main.go lists the commands
// (commands) and cli.go runs one (Main: settings through
// internal/config, exit codes); each command is a function that calls
// relay.Run or one of the operator package's tools and prints what it did
// (commands.go: run, status, doctor, migrate; replay.go, redrive.go,
// prune_cmd.go, cutover_cmd.go, fromdebezium.go). It holds no SQL.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
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

// commands are walrelay's commands, in the order its usage lists them. Each
// is a name and usage (spec), its settings with their defaults, and what it
// does with them; config.Load reads the settings of every one the same way.
func commands() []command {
	return []command{
		newCommand(config.Command{Name: "run", Usage: runUsage},
			"[flags]", "stream outbox inserts to Kafka (the service)", config.Defaults, run),
		newCommand(config.Command{Name: "migrate", Usage: migrateUsage},
			"[flags]", "create the outbox table and the walrelay.emit function (idempotent)", config.DefaultMigrateConfig, migrateCommand),
		newCommand(config.Command{Name: "doctor", Usage: doctorUsage, Groups: doctorGroups, More: doctorMore},
			"[flags]", "check Postgres and Kafka prerequisites and say how to fix each", config.Defaults, doctorCommand),
		newCommand(config.Command{Name: "status", Usage: statusUsage},
			"[flags]", "show the slot's position, lag and retained WAL, and the outbox tables' retained span", config.DefaultStatusConfig, statusCommand),
		newCommand(config.Command{Name: "prune", Usage: pruneUsage},
			"[flags]", "delete (or drop partitions of) outbox rows older than --older-than", config.DefaultPruneConfig, pruneCommand),
		newCommand(config.Command{Name: "replay", Usage: replayUsage, Groups: replayGroups, More: replayMore},
			"[flags]", "re-publish outbox rows kept in the table; --since-last-delivered recovers after a lost slot", config.DefaultReplayConfig, replayCommand),
		newCommand(config.Command{Name: "dlq redrive", Usage: redriveUsage, Groups: redriveGroups, More: redriveMore},
			"[flags]", "send dead-lettered events to their topics once the cause is gone", config.DefaultRedriveConfig, redriveCommand),
		newCommand(config.Command{Name: "cutover", Usage: cutoverUsage},
			"[flags]", "take over from Debezium's outbox connector without a gap (--from-slot)", config.DefaultCutoverConfig, cutoverCommand),
		newCommand(config.Command{Name: "config from-debezium", Usage: fromDebeziumUsage},
			"<file>", "print the walrelay YAML equivalent to a Debezium outbox connector's configuration", config.DefaultFromDebeziumConfig, fromDebeziumCommand),
		newCommand(config.Command{Name: "version", Usage: versionUsage},
			"", "print the version", func() config.NoSettings { return config.NoSettings{} }, version),
	}
}

// usage is what walrelay prints without a command, or for help.
func usage(cmds []command) string {
	var b strings.Builder
	b.WriteString("walrelay relays transactional-outbox events from Postgres logical replication to Kafka.\n\nUsage:\n")
	width := len("help [command]")
	for _, c := range cmds {
		width = max(width, len(c.spec.Name)+1+len(c.args))
	}
	for _, c := range cmds {
		fmt.Fprintf(&b, "  walrelay %-*s   %s\n", width, strings.TrimSpace(c.spec.Name+" "+c.args), c.summary)
	}
	fmt.Fprintf(&b, "  walrelay %-*s   %s\n", width, "help [command]", "print this, or the usage of a command")
	b.WriteString(`
Run 'walrelay <command> -h' for its settings. Every command reads them the
same way: a flag --name, the environment variable WALRELAY_NAME (upper case,
_ for -), or the key name (with _ for -) of the YAML file given by --config or
WALRELAY_CONFIG, in that order of precedence. One file may serve every
command: each ignores the keys of the others' settings.
`)
	return b.String()
}

// Main runs the walrelay command line and returns the exit code. Logs and
// errors go to stderr: as text when stderr is a terminal, else as JSON
// (--log-format overrides).
func Main(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	return execute(ctx, commands(), args, getenv, streams{stdout: stdout, stderr: stderr, terminal: isTerminal(stderr)})
}

// execute runs the command of cmds that args name, with the terminal test
// done.
func execute(ctx context.Context, cmds []command, args []string, getenv func(string) string, out streams) int {
	if len(args) == 0 {
		fmt.Fprint(out.stderr, usage(cmds))
		return ExitConfig
	}
	switch args[0] {
	case "help", "-h", "--help":
		return help(ctx, cmds, args[1:], getenv, out)
	case "--version", "-version":
		args = append([]string{"version"}, args[1:]...)
	}
	if c, rest, ok := find(cmds, args); ok {
		return c.exec(ctx, rest, getenv, out)
	}
	if g := group(cmds, args[:1]); len(g) > 0 {
		var names []string
		for _, c := range g {
			names = append(names, "walrelay "+c.spec.Name)
		}
		return badArgs(out.stderr, args[0], errors.New("missing its sub-command: "+strings.Join(names, ", ")), "run 'walrelay help "+args[0]+"' for its usage")
	}
	fmt.Fprintf(out.stderr, "unknown command %q\n\n%s", args[0], usage(cmds))
	return ExitConfig
}

// group returns the commands of several words (config from-debezium, dlq
// redrive) whose first words are args.
func group(cmds []command, args []string) []command {
	var out []command
	for _, c := range cmds {
		words := strings.Fields(c.spec.Name)
		if len(args) > 0 && len(args) < len(words) && slices.Equal(words[:len(args)], args) {
			out = append(out, c)
		}
	}
	return out
}

// find returns the command of cmds whose name (one word, or several as in
// "dlq redrive") args start with, and the rest of args.
func find(cmds []command, args []string) (command, []string, bool) {
	for _, c := range cmds {
		words := strings.Fields(c.spec.Name)
		if len(args) >= len(words) && slices.Equal(args[:len(words)], words) {
			return c, args[len(words):], true
		}
	}
	return command{}, nil, false
}

// help is `walrelay help [command]`: walrelay's usage, or the command's.
func help(ctx context.Context, cmds []command, args []string, getenv func(string) string, out streams) int {
	if len(args) == 0 {
		fmt.Fprint(out.stdout, usage(cmds))
		return ExitOK
	}
	const hint = "run 'walrelay help' for the commands"
	c, rest, ok := find(cmds, args)
	if g := group(cmds, args); !ok && len(g) == 1 { // help config: config from-debezium's
		c, rest, ok = g[0], nil, true
	}
	switch {
	case !ok:
		return badArgs(out.stderr, "help", fmt.Errorf("no command %q", strings.Join(args, " ")), hint)
	case len(rest) > 0:
		return badArgs(out.stderr, "help", fmt.Errorf("unexpected argument %q (help takes one command)", rest[0]), hint)
	}
	return c.exec(ctx, []string{"-h"}, getenv, out)
}

// version is `walrelay version`.
func version(_ context.Context, _ config.NoSettings, c *call) int {
	v, rev := relay.BuildVersion()
	fmt.Fprintln(c.stdout, "walrelay", v, "revision", rev, runtime.Version())
	return ExitOK
}

const versionUsage = `Usage: walrelay version

Prints walrelay's version, its VCS revision and the Go version it was built with.
`

const runUsage = `Usage: walrelay run [flags]

Streams outbox inserts from Postgres logical replication to Kafka (the service).
Only the Postgres DSN and the Kafka brokers are required.
`

const doctorUsage = `Usage: walrelay doctor [flags]

Checks the Postgres and Kafka prerequisites of 'walrelay run' (and the schema
registry, with schema rules) with the same settings, without changing anything,
and prints one line per check with the fix.
Exit codes: 0 all checks pass, 1 a check failed, 2 invalid usage or configuration.
`

// doctorGroups are the settings doctor's checks use; -h lists those.
var doctorGroups = []string{config.GroupGeneral, config.GroupPostgres, config.GroupTables, config.GroupKafka,
	config.GroupSecurity, config.GroupDelivery, config.GroupSchema}

const doctorMore = `doctor also takes every other setting of walrelay run (see 'walrelay run -h'), so
a run command line or config file works with doctor in its place, and it refuses
a value run would refuse.`

const migrateUsage = `Usage: walrelay migrate [flags]

Creates the outbox table and the walrelay.emit function (idempotent).
`

const statusUsage = `Usage: walrelay status [flags]

Shows the replication slot's position, lag and retained WAL, and each outbox
table's retained span: its oldest row (by created-at-column), how long ago
that was, and Postgres' row estimate. The span is how far back walrelay
replay, and a recovery after a lost slot, can reach.
`
