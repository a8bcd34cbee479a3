package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/walrelay/walrelay/cmd/walrelay/internal/config"
)

// A command that ends with something left to do (a lost slot to recover, an
// interrupted replay to resume) prints the command line that does it, with
// the settings this run had: every setting that differs from its default
// and that the other command needs, the --config file, and never a secret.

// suggestion is a command line for the operator to run next.
type suggestion struct {
	why   string   // "recover with", "resume with"
	words []string // walrelay <command> and its own flags
	flags []string // the settings carried over
	// leftOut are the secrets this run was given directly (not by file),
	// which the line leaves out.
	leftOut []string
}

// newSuggestion returns the command line words + the settings of s (with
// defaults def) that keep accepts.
func newSuggestion(why string, words []string, s, def config.Settings, keep func(key, group string) bool) suggestion {
	flags, leftOut := config.CommandLine(s, def, keep)
	return suggestion{why: why, words: words, flags: flags, leftOut: leftOut}
}

// carried keeps the settings that say what to read and where to send it,
// not how this process logs or serves (the General and Service groups), and
// none of skip.
func carried(skip ...string) func(key, group string) bool {
	return func(key, group string) bool {
		return group != config.GroupGeneral && group != config.GroupService && !slices.Contains(skip, key)
	}
}

func (s suggestion) line() string {
	return strings.Join(append(append([]string{"walrelay"}, s.words...), s.flags...), " ")
}

// note says how to give the secrets the line leaves out ("" when none).
func (s suggestion) note() string {
	if len(s.leftOut) == 0 {
		return ""
	}
	return config.WithSettings("the line leaves out what this run was given as a secret: give it the same way, in the environment or a file", s.leftOut)
}

// print writes the suggestion: plain lines on a text log, a log record
// otherwise (where a supervisor's log shows it beside the error).
func (s suggestion) print(c *call) {
	if !c.plain {
		attrs := []any{"command", s.line()}
		if n := s.note(); n != "" {
			attrs = append(attrs, "note", n)
		}
		c.log.Error(s.why, attrs...)
		return
	}
	fmt.Fprintf(c.stderr, "walrelay %s: %s:\n  %s\n", c.name, s.why, s.line())
	if n := s.note(); n != "" {
		fmt.Fprintf(c.stderr, "  (%s)\n", n)
	}
}

// recoverySuggestion is the recovery after a lost slot of run's
// configuration cfg: a replay since the last delivered event, with cfg's
// settings (always naming the slot).
func recoverySuggestion(cfg config.Config) suggestion {
	def := config.Defaults()
	words := []string{"replay", "--since-last-delivered"}
	if cfg.Slot == def.Slot {
		words = append(words, "--slot="+cfg.Slot)
	}
	return newSuggestion("recover with", words, &cfg, &def, carried("create-slot", "accept-slot-loss", "on-slot-lost"))
}
