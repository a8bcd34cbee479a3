package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
)

// setting binds one configuration key to its flag, env var and YAML key.
type setting struct {
	name  string // flag name; env WALRELAY_<NAME_UPPER>; yaml <name with _>
	usage string
	value flag.Value
}

func (s setting) env() string { return EnvName(s.name) }

// EnvName is the environment variable of the setting key: WALRELAY_ and the
// key in upper case with _ for -.
func EnvName(key string) string {
	return "WALRELAY_" + strings.ToUpper(strings.ReplaceAll(key, "-", "_"))
}

// usageKey is the Error.Key of a command line walrelay cannot parse.
const usageKey = "flags"

// Error is a configuration value walrelay refuses, naming the key and where
// it can be set.
type Error struct {
	Key    string
	Source string // flag, env, yaml file, or "" when the combination is wrong
	Err    error
}

func (e *Error) Error() string {
	if e.Key == usageKey {
		return fmt.Sprintf("invalid command line: %v", e.Err)
	}
	where := fmt.Sprintf("--%s / %s", e.Key, EnvName(e.Key))
	if e.Source != "" {
		return fmt.Sprintf("invalid config %s (from %s): %v; set %s", e.Key, e.Source, e.Err, where)
	}
	return fmt.Sprintf("invalid config %s: %v; set %s", e.Key, e.Err, where)
}

func (e *Error) Unwrap() error { return e.Err }

// invalid returns the *Error for key with a formatted reason.
func invalid(key, format string, a ...any) *Error {
	return &Error{Key: key, Err: fmt.Errorf(format, a...)}
}

// UsageError returns the *Error of a command line that cannot be parsed.
func UsageError(err error) error { return &Error{Key: usageKey, Err: err} }

// IsUsage reports whether err is a command line that cannot be parsed (an
// unknown flag, a bad flag value, a stray argument), as opposed to a setting
// that parses but is refused.
func IsUsage(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Key == usageKey
}

// ParseFlags parses args into fs without printing anything on an error (the
// caller reports it once); -h prints fs.Usage to help and returns
// flag.ErrHelp. A stray argument is an error.
func ParseFlags(fs *flag.FlagSet, args []string, help io.Writer) error {
	usage := fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.Usage = usage
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(help)
		if usage != nil {
			usage()
		} else {
			fs.PrintDefaults()
		}
		return err
	case err != nil:
		return UsageError(err)
	case fs.NArg() > 0:
		return UsageError(fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	return nil
}

// newFlagSet returns the flag set of a command whose -h prints usage, then
// the flags.
func newFlagSet(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	return fs
}

// ParseFlagsEnv parses args into fs like ParseFlags, then sets every flag
// the command line left unset from its WALRELAY_* variable (EnvName of the
// flag's name), so the command line wins over the environment. The
// environment is read only after parsing: what -h prints as a flag's default
// is the built-in default, never a value from the environment, which may be a
// secret (a DSN with its password).
func ParseFlagsEnv(fs *flag.FlagSet, args []string, getenv func(string) string, help io.Writer) error {
	if err := ParseFlags(fs, args, help); err != nil {
		return err
	}
	set := setFlags(fs)
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if v := getenv(EnvName(f.Name)); v != "" && !set[f.Name] && err == nil {
			if e := f.Value.Set(v); e != nil {
				err = &Error{Key: f.Name, Source: "env " + EnvName(f.Name), Err: e}
			}
		}
	})
	return err
}

// setFlags reports the flags the command line set.
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// load sets settings from the flags in args, then the environment under them
// (name and usage are the command's, for -h). The caller validates.
func load(name, usage string, settings []setting, args []string, getenv func(string) string, help io.Writer) error {
	fs := newFlagSet(name, usage)
	for _, s := range settings {
		fs.Var(s.value, s.name, s.usage+" (env "+s.env()+")")
	}
	return ParseFlagsEnv(fs, args, getenv, help)
}

// ReadSecretFile sets *dst to the contents of path (without trailing
// newlines) when path is set; key names the secret's setting. Setting a
// secret both directly and by file is an error.
func ReadSecretFile(key, path string, dst *string) error {
	if path == "" {
		return nil
	}
	if *dst != "" {
		return invalid(key+"-file", "both --%s and --%s-file are set; keep one", key, key)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return &Error{Key: key + "-file", Err: err}
	}
	if *dst = strings.TrimRight(string(b), "\r\n"); *dst == "" {
		return invalid(key+"-file", "%s is empty", path)
	}
	return nil
}

// ParseLevel reads a log level: debug, info, warn or error.
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("%q is not debug, info, warn or error", s)
	}
	return l, nil
}
