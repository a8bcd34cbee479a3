package decoder

import (
	"fmt"
	"path"
)

// Filter publishes only some of a table's events; the others are read past
// as KindFiltered (the caller counts them, and their transactions are
// confirmed like any other). Patterns are path.Match globs: '*' matches any
// run of characters except '/', '?' one character, [a-z] a class, '\\'
// escapes. An event is published when its type matches one of
// IncludeEventTypes (or that list is empty) and none of ExcludeEventTypes,
// and the same holds for its aggregate type. An event that cannot be
// decoded (Event.Poison) is never filtered: it is dead-lettered or stops
// walrelay as usual.
type Filter struct {
	IncludeEventTypes     []string
	ExcludeEventTypes     []string
	IncludeAggregateTypes []string
	ExcludeAggregateTypes []string
}

// Reasons reported with KindFiltered.
const (
	ReasonFilteredEventType     = "event_type"
	ReasonFilteredAggregateType = "aggregate_type"
)

// filterOf returns f, or nil when it filters nothing (the hot path's test).
func filterOf(f *Filter) *Filter {
	if f.isZero() {
		return nil
	}
	return f
}

func (f *Filter) isZero() bool {
	return len(f.IncludeEventTypes)+len(f.ExcludeEventTypes)+len(f.IncludeAggregateTypes)+len(f.ExcludeAggregateTypes) == 0
}

// validate reports the first malformed pattern.
func (f *Filter) validate() error {
	for _, list := range [][]string{f.IncludeEventTypes, f.ExcludeEventTypes, f.IncludeAggregateTypes, f.ExcludeAggregateTypes} {
		for _, p := range list {
			if _, err := path.Match(p, ""); err != nil {
				return fmt.Errorf("filter pattern %q: %w", p, err)
			}
		}
	}
	return nil
}

// drops returns why ev is filtered out, "" when it is published.
func (f *Filter) drops(ev *Event) string {
	if !passes(ev.EventType, f.IncludeEventTypes, f.ExcludeEventTypes) {
		return ReasonFilteredEventType
	}
	if !passes(ev.AggregateType, f.IncludeAggregateTypes, f.ExcludeAggregateTypes) {
		return ReasonFilteredAggregateType
	}
	return ""
}

func passes(s string, include, exclude []string) bool {
	if len(include) > 0 && !matchesAny(s, include) {
		return false
	}
	return !matchesAny(s, exclude)
}

func matchesAny(s string, patterns []string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, s); ok { // patterns were validated
			return true
		}
	}
	return false
}
