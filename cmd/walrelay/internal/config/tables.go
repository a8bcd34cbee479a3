package config

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/replication"
	"github.com/walrelay/walrelay/sink"
)

// TableSpec is one outbox table with its own mapping and routing (the YAML
// key tables).
type TableSpec struct {
	// Name is schema.table.
	Name string `yaml:"name"`
	// Columns is the preset: default or debezium.
	Columns string `yaml:"columns"`
	// ColumnMap overrides single columns: role → column name.
	ColumnMap map[string]string `yaml:"column_map"`
	// Topic is the topic template; default the top-level topic.
	Topic string `yaml:"topic"`
	// HeaderColumns are more columns copied into record headers.
	HeaderColumns []string `yaml:"header_columns"`
	// Filter publishes only some of the table's events (filters.go).
	Filter Filters `yaml:"filter"`
	// Envelope are columns placed in the record value beside the payload,
	// "column" or "column:name"; ExpandJSONPayload writes a JSON payload as
	// JSON (envelope.go).
	Envelope          []string `yaml:"envelope"`
	ExpandJSONPayload bool     `yaml:"expand_json_payload"`
}

// columnRoles are the keys of a column map.
var columnRoles = []string{"id", "aggregate_type", "aggregate_id", "event_type", "payload", "headers", "timestamp", "partition"}

// tablesVal is the YAML key tables.
type tablesVal struct{ p *[]TableSpec }

func (v tablesVal) String() string {
	if v.p == nil {
		return ""
	}
	names := make([]string, len(*v.p))
	for i, t := range *v.p {
		names[i] = t.Name
	}
	return strings.Join(names, ",")
}

func (v tablesVal) Set(string) error {
	return errors.New("is a list of tables, only in the --config file")
}

func (v tablesVal) setYAML(y any) error {
	specs, err := tableSpecsFromYAML(y)
	if err == nil {
		*v.p = specs
	}
	return err
}

func tableSpecsFromYAML(v any) ([]TableSpec, error) {
	var specs []TableSpec
	if err := strictYAML(v, &specs); err != nil {
		var uk *unknownKeyError
		if errors.As(err, &uk) {
			return nil, err
		}
		return nil, fmt.Errorf("must be a list of {name, columns, column_map, header_columns, topic, filter, envelope, expand_json_payload}: %w", err)
	}
	if len(specs) == 0 {
		return nil, errors.New("is empty")
	}
	return specs, nil
}

// resolvedTable is one outbox table ready for the stages.
type resolvedTable struct {
	name    replication.TableName
	columns decoder.Columns
	topic   string
	filter  decoder.Filter
	value   *sink.JSONValue // nil: the payload as stored
}

// tables resolves the outbox tables from TableSpecs, or from --table,
// --columns and the column flags.
func (c Config) tables() ([]resolvedTable, error) {
	specs := c.TableSpecs
	if len(specs) == 0 {
		for _, t := range c.Tables {
			specs = append(specs, TableSpec{Name: t, Columns: c.Columns, ColumnMap: c.ColumnMap, HeaderColumns: c.HeaderColumns, Filter: c.Filters,
				Envelope: c.EnvelopeColumns, ExpandJSONPayload: c.ExpandJSONPayload})
		}
	}
	out := make([]resolvedTable, 0, len(specs))
	seen := map[replication.TableName]bool{}
	for _, sp := range specs {
		tn, err := replication.ParseTable(sp.Name)
		if err != nil {
			return nil, err
		}
		if seen[tn] {
			return nil, fmt.Errorf("%s listed twice", tn)
		}
		seen[tn] = true
		cols, err := columnPreset(sp.Columns)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", tn, err)
		}
		if cols, err = applyColumnMap(cols, sp.ColumnMap); err != nil {
			return nil, fmt.Errorf("%s: %w", tn, err)
		}
		if cols.HeaderColumns, cols.HeaderNames, err = splitNamed(sp.HeaderColumns, "header column"); err != nil {
			return nil, fmt.Errorf("%s: %w", tn, err)
		}
		if cols.Envelope, err = envelopeColumns(sp.Envelope); err != nil {
			return nil, fmt.Errorf("%s: %w", tn, err)
		}
		topic := sp.Topic
		if topic == "" {
			topic = c.Topic
		}
		out = append(out, resolvedTable{name: tn, columns: cols, topic: topic, filter: sp.Filter.decoder(), value: jsonValue(cols.Envelope, sp.ExpandJSONPayload)})
	}
	return out, nil
}

func applyColumnMap(cols decoder.Columns, m map[string]string) (decoder.Columns, error) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, role := range keys {
		col := m[role]
		if col == "" {
			continue
		}
		if col == "none" {
			col = ""
		}
		var p *string
		switch role {
		case "id":
			p = &cols.ID
		case "aggregate_type":
			p = &cols.AggregateType
		case "aggregate_id":
			p = &cols.AggregateID
		case "event_type":
			p = &cols.EventType
		case "payload":
			p = &cols.Payload
		case "headers":
			p = &cols.Headers
		case "timestamp":
			p = &cols.Timestamp
		case "partition":
			p = &cols.Partition
		default:
			return cols, fmt.Errorf("unknown column role %q (use %s)", role, strings.Join(columnRoles, ", "))
		}
		if col == "" && role != "headers" && role != "timestamp" && role != "partition" {
			return cols, fmt.Errorf("column %s is required and cannot be none", role)
		}
		*p = col
	}
	return cols, nil
}
