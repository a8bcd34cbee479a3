package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/walrelay/walrelay/cmd/walrelay/internal/config"
)

// Exit codes of the walrelay command.
const (
	ExitOK      = 0
	ExitFailure = 1 // runtime failure or missing prerequisite
	ExitConfig  = 2 // invalid configuration or usage
)

// command is one walrelay command: its name and -h text (spec), its line in
// walrelay's usage, its settings, and what it does with them. A new command
// is one newCommand in commands() with a configuration type in package config.
type command struct {
	spec     config.Command
	args     string // what follows the name in walrelay's usage
	summary  string // the rest of its line there
	settings func() config.Settings
	run      func(ctx context.Context, s config.Settings, c *call) int
}

// newCommand returns the command that loads a T (defaults gives its default
// values) with config.Load and passes it to run.
func newCommand[T any, P interface {
	*T
	config.Settings
}](spec config.Command, args, summary string, defaults func() T, run func(context.Context, T, *call) int) command {
	return command{
		spec: spec, args: args, summary: summary,
		settings: func() config.Settings { v := defaults(); return P(&v) },
		run:      func(ctx context.Context, s config.Settings, c *call) int { return run(ctx, *s.(P), c) },
	}
}

// exec loads the command's settings from args, the environment and the
// --config file, reports what it refuses, and runs the command.
func (cmd command) exec(ctx context.Context, args []string, getenv func(string) string, out streams) int {
	s := cmd.settings()
	err := config.Load(cmd.spec, s, args, getenv, out.stdout)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return ExitOK
	case config.IsUsage(err):
		return badFlags(out.stderr, cmd.spec.Name, err)
	}
	c := newCall(cmd.spec.Name, s, out)
	if err != nil {
		c.invalid(err)
		return ExitConfig
	}
	return cmd.run(ctx, s, c)
}

// streams are where walrelay writes; terminal says stderr is a terminal.
type streams struct {
	stdout, stderr io.Writer
	terminal       bool
}

// isTerminal reports whether w is a terminal: an *os.File on a character
// device (/dev/null is one too, where the format matters to no one). Pipes,
// files and sockets (journald, container logs) are not.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// call is one run of a command: where it writes, its logger, and how it
// reports what ends it.
type call struct {
	name           string
	stdout, stderr io.Writer
	log            *slog.Logger
	// plain: the log format is text, and what ends the command is one plain
	// line "walrelay <command>: ..." rather than a log record.
	plain bool
	// terminal: stderr is a terminal (a progress bar may redraw there).
	terminal bool
}

// newCall returns the call of the command name with the log settings of s:
// --log-format json or text, or auto (the default, and while a bad value is
// reported): text on a terminal, else json.
func newCall(name string, s config.Settings, out streams) *call {
	lg := config.Logging{LogLevel: "info", LogFormat: config.LogAuto}
	if l, ok := s.(interface{ Log() config.Logging }); ok {
		lg = l.Log()
	}
	format := lg.LogFormat
	if format != config.LogJSON && format != config.LogText {
		format = config.LogJSON
		if out.terminal {
			format = config.LogText
		}
	}
	level, err := config.ParseLevel(lg.LogLevel)
	if err != nil {
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewJSONHandler(out.stderr, opts)
	if format == config.LogText {
		h = slog.NewTextHandler(out.stderr, opts)
	}
	return &call{name: name, stdout: out.stdout, stderr: out.stderr, log: slog.New(h), plain: format == config.LogText, terminal: out.terminal}
}

// invalid reports a configuration the command refuses.
func (c *call) invalid(err error) {
	if c.plain {
		fmt.Fprintf(c.stderr, "walrelay %s: invalid configuration: %s\n", c.name, config.Explain(err))
		return
	}
	c.log.Error("invalid configuration", "error", config.Explain(err))
}

// failed reports err, which ended the command: an ERROR record msg with
// attrs, or in plain text one line with the attrs after the error.
func (c *call) failed(msg string, err error, attrs ...any) {
	if !c.plain {
		c.log.Error(msg, append([]any{"error", config.Explain(err)}, attrs...)...)
		return
	}
	line := fmt.Sprintf("walrelay %s: %s", c.name, config.Explain(err))
	var kv []string
	for i := 0; i+1 < len(attrs); i += 2 {
		kv = append(kv, fmt.Sprintf("%v=%v", attrs[i], attrs[i+1]))
	}
	if len(kv) > 0 {
		line += " (" + strings.Join(kv, " ") + ")"
	}
	fmt.Fprintln(c.stderr, line)
}

// result reports err, if any, and returns the exit code: ExitConfig for a
// setting the command refuses (a *config.Error), ExitFailure for another
// failure (msg and attrs as failed).
func (c *call) result(msg string, err error, attrs ...any) int {
	var ce *config.Error
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ce):
		c.invalid(err)
		return ExitConfig
	}
	c.failed(msg, err, attrs...)
	return ExitFailure
}

// badFlags prints a command-line error once, then where to find the flags.
func badFlags(stderr io.Writer, cmd string, err error) int {
	var ce *config.Error
	if errors.As(err, &ce) && config.IsUsage(err) {
		err = ce.Err
	}
	return badArgs(stderr, cmd, err, "run 'walrelay "+cmd+" -h' for the flags")
}

// badArgs prints the error of a command line (cmd is its command), then
// hint: how to use it.
func badArgs(stderr io.Writer, cmd string, err error, hint string) int {
	fmt.Fprintf(stderr, "walrelay %s: %v\n%s\n", cmd, err, hint)
	return ExitConfig
}
