package config

import (
	"fmt"
	"strings"

	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/sink"
)

// Envelope shapes the record values of the tables given with --table as
// Debezium's outbox router writes them through Kafka Connect's JsonConverter
// (schemas.enable=false): columns placed in the value beside the payload
// (table.fields.additional.placement=column:envelope:name) and the JSON
// payload written as JSON (table.expand.json.payload). A table of the YAML
// key tables has its own (TableSpec.Envelope, TableSpec.ExpandJSONPayload).
type Envelope struct {
	// EnvelopeColumns are "column" or "column:name", in order.
	EnvelopeColumns   []string
	ExpandJSONPayload bool
}

func (e *Envelope) envelopeSettings() []setting {
	return []setting{
		{name: "envelope", group: GroupTables, value: listVal{&e.EnvelopeColumns},
			usage: "columns placed in the record value beside the payload, column[:name], comma-separated: the value becomes " +
				`{"payload":...,"name":value,...} as Debezium's outbox router writes it with ` +
				"table.fields.additional.placement=column:envelope:name and the JsonConverter (the tables of --table)"},
		{name: "expand-json-payload", group: GroupTables, value: boolVal{&e.ExpandJSONPayload},
			usage: "write a JSON payload as the JSON it holds, as Debezium's table.expand.json.payload=true does with the " +
				"JsonConverter (compact; null fields and empty arrays left out); without it an envelope carries the payload as a JSON string (the tables of --table)"},
	}
}

// splitNamed splits "column" or "column:name" entries into the columns and
// their names ("" when not given).
func splitNamed(entries []string, what string) (cols, names []string, err error) {
	for _, e := range entries {
		col, name, named := strings.Cut(e, ":")
		col, name = strings.TrimSpace(col), strings.TrimSpace(name)
		if col == "" || named && name == "" {
			return nil, nil, fmt.Errorf("%s %q: want column or column:name", what, e)
		}
		cols, names = append(cols, col), append(names, name)
	}
	return cols, names, nil
}

// envelopeColumns returns the envelope columns of "column[:name]" entries.
func envelopeColumns(entries []string) ([]decoder.EnvelopeColumn, error) {
	cols, names, err := splitNamed(entries, "envelope column")
	if err != nil {
		return nil, err
	}
	var out []decoder.EnvelopeColumn
	for i, c := range cols {
		out = append(out, decoder.EnvelopeColumn{Column: c, Name: names[i]})
	}
	return out, nil
}

// jsonValue is the sink's JSONValue of a table with these settings, nil
// when its values are the payload as stored.
func jsonValue(envelope []decoder.EnvelopeColumn, expand bool) *sink.JSONValue {
	if len(envelope) == 0 && !expand {
		return nil
	}
	return &sink.JSONValue{ExpandPayload: expand}
}
