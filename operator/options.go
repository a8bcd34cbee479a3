package operator

import (
	"fmt"
	"strings"
)

// OptionError is an option a tool cannot use; Option names the field of its
// options type (two or more: "ShutdownTimeout, KafkaTimeout").
type OptionError struct {
	Option string
	Err    error
}

func (e *OptionError) Error() string { return fmt.Sprintf("option %s: %v", e.Option, e.Err) }
func (e *OptionError) Unwrap() error { return e.Err }

// optionKeys are the settings of walrelay's configuration behind the
// options fields that OptionError names.
var optionKeys = map[string][]string{
	"DSN":              {"postgres-dsn"},
	"Table":            {"table"},
	"Decoder":          {"table"},
	"MaxInFlight":      {"max-in-flight"},
	"ShutdownTimeout":  {"shutdown-timeout"},
	"KafkaTimeout":     {"kafka-timeout"},
	"ExactlyOnce":      {"transactional-id", "txn-commit-interval", "txn-max-records"},
	"Rate":             {"rate"},
	"Selection":        {"since", "until"},
	"TimeColumn":       {"created-at-column"},
	"Margin":           {"recovery-margin"},
	"RecoveryMargin":   {"recovery-margin"},
	"OlderThan":        {"older-than"},
	"BatchSize":        {"batch-size"},
	"Replication.Slot": {"slot"},
}

// SettingKeys returns the keys of the settings behind the fields that
// Option names.
func (e *OptionError) SettingKeys() []string {
	var keys []string
	for _, f := range strings.Split(e.Option, ", ") {
		keys = append(keys, optionKeys[f]...)
	}
	return keys
}
