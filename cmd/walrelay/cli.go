package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/walrelay/walrelay/cmd/walrelay/internal/config"
)

// Exit codes of the walrelay command.
const (
	ExitOK      = 0
	ExitFailure = 1 // runtime failure or missing prerequisite
	ExitConfig  = 2 // invalid configuration or usage
)

// badFlags prints a command-line error once, then where to find the flags.
func badFlags(stderr io.Writer, cmd string, err error) int {
	var ce *config.Error
	if errors.As(err, &ce) && config.IsUsage(err) {
		err = ce.Err
	}
	fmt.Fprintf(stderr, "walrelay %s: %v\nrun 'walrelay %s -h' for the flags\n", cmd, err, cmd)
	return ExitConfig
}

func newLogger(w io.Writer, level, format string) *slog.Logger {
	l, err := config.ParseLevel(level)
	if err != nil {
		l = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: l}
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}
