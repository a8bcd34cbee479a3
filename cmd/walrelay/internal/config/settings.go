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

// setting binds one configuration key to a field of a command's
// configuration: the flag --<name>, the environment variable EnvName(name)
// and the YAML key YAMLKey(name) of the --config file.
type setting struct {
	name  string
	group string // heading -h lists it under
	usage string
	value flag.Value
	// secretOf names the secret this setting is the file of: the file's
	// contents become that setting's value (see ReadSecretFile).
	secretOf string
	// yamlOnly: only a key of the --config file (no flag, no environment
	// variable); value implements yamlValue.
	yamlOnly bool
}

// yamlValue is a setting's value that the --config file sets from YAML
// (a list of maps, say) rather than from a string.
type yamlValue interface {
	setYAML(v any) error
}

// EnvName is the environment variable of the setting key: WALRELAY_ and the
// key in upper case with _ for -.
func EnvName(key string) string {
	return "WALRELAY_" + strings.ToUpper(strings.ReplaceAll(key, "-", "_"))
}

// YAMLKey is the key of the setting in the --config file: the setting key
// with _ for - (the file may also spell it with -).
func YAMLKey(key string) string { return strings.ReplaceAll(key, "-", "_") }

// usageKey is the Error.Key of a command line walrelay cannot parse;
// configKey the key of the --config file itself.
const (
	usageKey  = "flags"
	configKey = "config"
)

// Error is a configuration value walrelay refuses: Key names the setting,
// Source where the value came from, Err why. Its message starts with the key;
// Explain adds where the setting is set (SettingKeys).
type Error struct {
	Key    string
	Source string // "env WALRELAY_X", the --config file's path, or "" (a flag, or the combination is wrong)
	Err    error
	// Also are more settings the refusal concerns (a library error that
	// named several), after Key.
	Also []string
}

func (e *Error) Error() string {
	switch {
	case e.Key == usageKey:
		return fmt.Sprintf("invalid command line: %v", e.Err)
	case e.Key == configKey && e.Source != "":
		return fmt.Sprintf("config file %s: %v", e.Source, e.Err)
	case e.Key == configKey:
		return fmt.Sprintf("config file: %v", e.Err)
	case e.Source != "":
		return fmt.Sprintf("%s (from %s): %v", e.Key, e.Source, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.Key, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// SettingKeys names the setting refused; none for a command line that does
// not parse, or for the --config file itself (its message names the file).
func (e *Error) SettingKeys() []string {
	if e.Key == usageKey || e.Key == configKey {
		return nil
	}
	return append([]string{e.Key}, e.Also...)
}

// keyedError returns lib, a library error that refused a setting, as an
// *Error with cause as its reason, naming the settings lib names
// (SettingKeys, first the main one), or fallback when it names none.
func keyedError(lib error, fallback string, cause error) *Error {
	if keys := keysOf(lib); len(keys) > 0 {
		return &Error{Key: keys[0], Also: keys[1:], Err: cause}
	}
	return &Error{Key: fallback, Err: cause}
}

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
	if err := parseFlags(fs, args, help); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return UsageError(fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	return nil
}

// parseFlags is ParseFlags up to the first argument that is not a flag
// (fs.Args() holds it and what follows).
func parseFlags(fs *flag.FlagSet, args []string, help io.Writer) error {
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
	}
	return nil
}

// ReadSecretFile sets *dst to the contents of path (without trailing
// newlines) when path is set; key names the secret's setting. Setting a
// secret both directly and by file is an error.
func ReadSecretFile(key, path string, dst *string) error {
	if path == "" {
		return nil
	}
	if *dst != "" {
		return invalid(key+"-file", "both %s and %s-file are set (by a flag, the environment or the config file); keep one", key, key)
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
