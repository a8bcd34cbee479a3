package relay

import "strings"

// Errors that a change of settings fixes implement
//
//	interface{ SettingKeys() []string }
//
// returning the keys of walrelay's settings involved (as its configuration
// spells them: "kafka-brokers", "on-poison"), the main one first. The
// messages say the fix in words; a program that embeds Run renders the keys
// as its own settings, and the walrelay command as flags and environment
// variables. The libraries' errors do the same (replication.SettingError and
// PrereqError, sink.SettingError and SecurityError).

// settingsError is err, which a change of the settings keys fixes.
type settingsError struct {
	err  error
	keys []string
}

func (e *settingsError) Error() string         { return e.err.Error() }
func (e *settingsError) Unwrap() error         { return e.err }
func (e *settingsError) SettingKeys() []string { return e.keys }

// optionKeys are the settings of the Options fields that OptionError names.
var optionKeys = map[string][]string{
	"MaxInFlight":                {"max-in-flight"},
	"OnPoison":                   {"on-poison"},
	"StandbyRetryInterval":       {"standby-retry-interval"},
	"ShutdownTimeout":            {"shutdown-timeout"},
	"KafkaTimeout":               {"kafka-timeout"},
	"HeartbeatInterval":          {"heartbeat-interval"},
	"SlotMetricsInterval":        {"slot-metrics-interval"},
	"Decoder":                    {"table"},
	"ExactlyOnce":                {"transactional-id", "checkpoint-topic"},
	"ExactlyOnce.CommitInterval": {"txn-commit-interval"},
	"ExactlyOnce.MaxRecords":     {"txn-max-records"},
	"OutboxSpan":                 {"outbox-span-interval", "outbox-retention-target"},
	"OutboxSpan.TimeColumn":      {"created-at-column"},
}

// SettingKeys returns the keys of the settings behind the Options fields
// that Option names ("ShutdownTimeout, KafkaTimeout" names two).
func (e *OptionError) SettingKeys() []string {
	var keys []string
	for _, f := range strings.Split(e.Option, ", ") {
		keys = append(keys, optionKeys[f]...)
	}
	return keys
}
