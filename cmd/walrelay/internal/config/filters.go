package config

import (
	"fmt"
	"path"

	"github.com/walrelay/walrelay/decoder"
)

// Filters publish only some events, by event type and aggregate type
// (decoder.Filter): globs, an event is published when its type matches one of
// the include patterns (or there are none) and none of the exclude patterns,
// and the same for its aggregate type. The settings apply to the tables given
// with --table and to tableless events; a table of the YAML key tables has
// its own (TableSpec.Filter).
type Filters struct {
	IncludeEventTypes     []string `yaml:"include_event_types"`
	ExcludeEventTypes     []string `yaml:"exclude_event_types"`
	IncludeAggregateTypes []string `yaml:"include_aggregate_types"`
	ExcludeAggregateTypes []string `yaml:"exclude_aggregate_types"`
}

// filterKeys are the keys of the filter settings, in the order of filterLists.
var filterKeys = []string{"include-event-types", "exclude-event-types", "include-aggregate-types", "exclude-aggregate-types"}

func (f *Filters) lists() []*[]string {
	return []*[]string{&f.IncludeEventTypes, &f.ExcludeEventTypes, &f.IncludeAggregateTypes, &f.ExcludeAggregateTypes}
}

func (f *Filters) filterSettings() []setting {
	usage := []string{
		"publish only events whose event type matches one of these globs (* ? [a-z]), comma-separated; others are counted in walrelay_events_filtered_total and read past",
		"never publish events whose event type matches one of these globs, comma-separated",
		"publish only events whose aggregate type matches one of these globs, comma-separated",
		"never publish events whose aggregate type matches one of these globs, comma-separated",
	}
	ss := make([]setting, len(filterKeys))
	for i, l := range f.lists() {
		ss[i] = setting{name: filterKeys[i], group: GroupTables, value: listVal{l},
			usage: usage[i] + " (the tables of --table and tableless events; each table of tables: has its own filter)"}
	}
	return ss
}

// decoder returns the filter as the decoder takes it.
func (f Filters) decoder() decoder.Filter {
	return decoder.Filter{IncludeEventTypes: f.IncludeEventTypes, ExcludeEventTypes: f.ExcludeEventTypes,
		IncludeAggregateTypes: f.IncludeAggregateTypes, ExcludeAggregateTypes: f.ExcludeAggregateTypes}
}

// badPattern returns the index (in filterKeys order) of the first list with
// a malformed pattern and why; -1 when every pattern is well-formed.
func (f Filters) badPattern() (int, error) {
	for i, l := range f.lists() {
		for _, p := range *l {
			if _, err := path.Match(p, ""); err != nil {
				return i, fmt.Errorf("pattern %q: %w", p, err)
			}
		}
	}
	return -1, nil
}

// validateFilters checks the patterns of the filter settings and of each
// table's filter in the YAML key tables.
func (c Config) validateFilters() error {
	if i, err := c.Filters.badPattern(); i >= 0 {
		return &Error{Key: filterKeys[i], Err: err}
	}
	for _, sp := range c.TableSpecs {
		if i, err := sp.Filter.badPattern(); i >= 0 {
			return invalid("tables", "%s: filter %s: %v", sp.Name, YAMLKey(filterKeys[i]), err)
		}
	}
	return nil
}
