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

// Fields returns the fields that Option names, as operator.<field> (the
// field of the tool's options type): a program maps them to its own
// settings, as the walrelay command does.
func (e *OptionError) Fields() []string {
	var fields []string
	for _, f := range strings.Split(e.Option, ", ") {
		fields = append(fields, "operator."+f)
	}
	return fields
}
