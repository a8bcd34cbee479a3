package config

import (
	"errors"
	"strings"
)

// settingKeyer is an error that names the settings it concerns by key, first
// the main one: the command's own *Error (the libraries name their fields
// instead, fields.go). The command renders keys as flags, variables and
// file keys.
type settingKeyer interface {
	SettingKeys() []string
}

// Explain returns err's message followed by where each setting that err, or
// an error it wraps, names (SettingKeys) is set, e.g.
//
//	slot: "My-Slot" may contain only ... (setting: --slot / WALRELAY_SLOT / slot in --config)
//
// It returns "" for nil.
func Explain(err error) string {
	if err == nil {
		return ""
	}
	return WithSettings(err.Error(), SettingKeys(err))
}

// SettingKeys returns the setting keys err and the errors it wraps name,
// each once, in the order met: err first, then what it wraps, depth first
// (Unwrap() error and Unwrap() []error, as errors.Join makes).
func SettingKeys(err error) []string {
	var keys []string
	seen := map[string]bool{}
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		for _, key := range keysOf(e) {
			if key != "" && !seen[key] {
				seen[key] = true
				keys = append(keys, key)
			}
		}
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		case interface{ Unwrap() []error }:
			for _, inner := range u.Unwrap() {
				walk(inner)
			}
		}
	}
	walk(err)
	// An error that says As(&fielder) or As(&settingKeyer) without being
	// one in the chain.
	var f fielder
	var k settingKeyer
	switch {
	case len(keys) > 0:
	case errors.As(err, &f):
		keys = keysOf(f.(error))
	case errors.As(err, &k):
		keys = append(keys, k.SettingKeys()...)
	}
	return keys
}

// WithSettings returns msg followed by where each of keys is set:
//
//	msg (setting: --slot / WALRELAY_SLOT / slot in --config)
//	msg (settings: --sasl-username / WALRELAY_SASL_USERNAME / sasl_username in --config; WALRELAY_SASL_PASSWORD, or a file: --sasl-password-file / WALRELAY_SASL_PASSWORD_FILE / sasl_password_file in --config)
//
// A secret (a setting with a file twin) is offered as its environment
// variable or its file, never as a flag that ps would show. A key no command
// has is named as it is. msg alone when keys is empty.
func WithSettings(msg string, keys []string) string {
	if len(keys) == 0 {
		return msg
	}
	known := knownSettings()
	files := map[string]string{} // secret → its file setting
	for _, st := range known {
		if st.secretOf != "" {
			files[st.secretOf] = st.name
		}
	}
	parts := make([]string, len(keys))
	for i, k := range keys {
		st, ok := known[k]
		switch {
		case !ok:
			parts[i] = k
		case k == configKey:
			parts[i] = "--config / " + EnvName(k)
		case st.yamlOnly:
			parts[i] = YAMLKey(k) + " in --config"
		case files[k] != "":
			parts[i] = EnvName(k) + ", or a file: " + forms(files[k])
		default:
			parts[i] = forms(k)
		}
	}
	label := "setting"
	if len(keys) > 1 {
		label = "settings"
	}
	return msg + " (" + label + ": " + strings.Join(parts, "; ") + ")"
}

// forms is the flag, environment variable and --config key of key.
func forms(key string) string {
	return "--" + key + " / " + EnvName(key) + " / " + YAMLKey(key) + " in --config"
}
