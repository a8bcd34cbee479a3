package relay

import "strings"

// Errors that a change of the options fixes implement
//
//	interface{ Fields() []string }
//
// returning the fields involved as "package.Type.Field"
// (relay.Options.MaxInFlight, sink.Config.Brokers), the main one first. The
// messages say the fix in words; a program that embeds Run maps the fields
// to its own settings, as the walrelay command maps them to its flags,
// environment variables and file keys. The libraries' errors do the same
// (replication.SettingError and PrereqError, operator.OptionError).

// fieldsError is err, which a change of fields fixes.
type fieldsError struct {
	err    error
	fields []string
}

func (e *fieldsError) Error() string    { return e.err.Error() }
func (e *fieldsError) Unwrap() error    { return e.err }
func (e *fieldsError) Fields() []string { return e.fields }

// Fields returns the Options fields that Option names ("ShutdownTimeout,
// KafkaTimeout" names two), as relay.Options.<field>.
func (e *OptionError) Fields() []string {
	var fields []string
	for _, f := range strings.Split(e.Option, ", ") {
		fields = append(fields, "relay.Options."+f)
	}
	return fields
}
