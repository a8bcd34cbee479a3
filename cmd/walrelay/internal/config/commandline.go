package config

import (
	"regexp"
	"strings"
)

// configFiler is a configuration that remembers the --config file Load
// read, for CommandLine.
type configFiler interface {
	setConfigFile(path string)
	ConfigFile() string
}

// ConfigFile is the --config file Load read ("" when none).
func (c *Config) ConfigFile() string { return c.file }

func (c *Config) setConfigFile(path string) { c.file = path }

// CommandLine returns the flags that set s's settings to their values where
// they differ from def's (the command's defaults), for the settings keep
// accepts (by key and group), in the order -h lists them, each one word
// --key=value quoted for a POSIX shell; first --config with the file Load
// read, if any, since a setting only the file holds (tables) has no flag.
// It is what a command prints when it tells the operator to run another
// command with the settings this one had.
//
// A secret (postgres-dsn, sasl-password) is never written out: its file
// setting is, when the secret came from one, otherwise its key is in
// leftOut, for the caller to say how to give it (the environment, or a
// file).
func CommandLine(s, def Settings, keep func(key, group string) bool) (flags, leftOut []string) {
	if f, ok := s.(configFiler); ok && f.ConfigFile() != "" {
		flags = append(flags, "--config="+shellQuote(f.ConfigFile()))
	}
	defaults := map[string]string{}
	for _, st := range def.settings() {
		defaults[st.name] = st.value.String()
	}
	all := s.settings()
	fileOf := map[string]string{} // secret → its file's value
	for _, st := range all {
		if st.secretOf != "" {
			fileOf[st.secretOf] = st.value.String()
		}
	}
	for _, st := range all {
		v := st.value.String()
		if st.yamlOnly || v == defaults[st.name] || !keep(st.name, st.group) {
			continue
		}
		if file, secret := fileOf[st.name]; secret {
			if file == "" {
				leftOut = append(leftOut, st.name)
			}
			continue
		}
		flags = append(flags, "--"+st.name+"="+shellQuote(v))
	}
	return flags, leftOut
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_./:,@%+=-]+$`)

// shellQuote returns s as one word of a POSIX shell.
func shellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
