// Package fieldref spells the fields that the libraries' errors name
// (Fields() []string: "sink.Config.Brokers"), for the command to map to its
// settings.
package fieldref

// Of returns each of names prefixed with typ and a dot: Of("sink.Config",
// "Brokers") is ["sink.Config.Brokers"].
func Of(typ string, names ...string) []string {
	fields := make([]string, len(names))
	for i, n := range names {
		fields[i] = typ + "." + n
	}
	return fields
}
