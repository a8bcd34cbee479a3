package config

import (
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/walrelay/walrelay/operator"
)

// Progress displays of a replay (--progress).
const (
	ProgressAuto = "auto" // a bar on a terminal, log lines otherwise
	ProgressBar  = "bar"
	ProgressLog  = "log"
	ProgressNone = "none"
)

// ReplayConfig is what `walrelay replay` needs: every setting of walrelay
// run (the same tables, mapping, routing, Kafka, security and delivery, so
// that a replayed record is the one run made), the selection, and how the
// replay runs.
type ReplayConfig struct {
	Config
	// Since and Until bound the time column (CreatedAtColumn): Since <= t
	// < Until; zero: unbounded.
	Since, Until time.Time
	// EventIDs, AggregateTypes, AggregateIDs and EventTypes select rows by
	// the mapped columns (any of a list; every list given must match).
	EventIDs, AggregateTypes, AggregateIDs, EventTypes []string
	// DryRun counts, spans and routes the selected rows; sends nothing.
	DryRun bool
	// Rate caps the rows sent per second (0: no cap).
	Rate float64
	// Resume is the resume token an interrupted replay printed.
	Resume string
	// ReplayID marks the records (walrelay.replay header); default a new id.
	ReplayID string
	// SinceLastDelivered is the recovery after a lost slot: the start is
	// the last event delivered to Kafka less RecoveryMargin, and the new
	// slot is created before the replay reads.
	SinceLastDelivered bool
	RecoveryMargin     time.Duration
	// Progress is auto, bar, log or none; ProgressInterval the time between
	// two progress log lines.
	Progress         string
	ProgressInterval time.Duration
}

// DefaultReplayConfig returns the replay configuration used when nothing is
// set.
func DefaultReplayConfig() ReplayConfig {
	return ReplayConfig{Config: Defaults(), RecoveryMargin: operator.DefaultRecoveryMargin, Progress: ProgressAuto, ProgressInterval: 10 * time.Second}
}

func (c *ReplayConfig) settings() []setting {
	return append(c.Config.settings(), c.replaySettings()...)
}

// inGroup returns a maker of the settings of group.
func inGroup(group string) func(name, usage string, v flag.Value) setting {
	return func(name, usage string, v flag.Value) setting {
		return setting{name: name, group: group, usage: usage, value: v}
	}
}

func (c *ReplayConfig) replaySettings() []setting {
	g := inGroup(GroupReplay)
	return []setting{
		g("since", "replay rows whose created-at-column is at or after this time: RFC 3339 (2026-11-24T00:00:00Z), a date (2026-11-24, UTC) or an age (36h, 3d: that long ago)", timeVal{&c.Since}),
		g("until", "replay rows whose created-at-column is before this time (same forms as since)", timeVal{&c.Until}),
		g("event-id", "replay only these events (id column), comma-separated", listVal{&c.EventIDs}),
		g("aggregate-type", "replay only these aggregate types, comma-separated", listVal{&c.AggregateTypes}),
		g("aggregate-id", "replay only these aggregate ids, comma-separated", listVal{&c.AggregateIDs}),
		g("event-type", "replay only these event types, comma-separated", listVal{&c.EventTypes}),
		g("dry-run", "count the selected rows, their time span and topics; send nothing", boolVal{&c.DryRun}),
		g("rate", "most rows sent per second (0: no limit)", floatVal{&c.Rate}),
		g("resume", "go on with an interrupted replay: the resume token it printed (with the same selection settings)", stringVal{&c.Resume}),
		g("replay-id", "the walrelay.replay header of the replayed records (default replay-<time>-<random>)", stringVal{&c.ReplayID}),
		g("since-last-delivered", "recovery after a lost slot: replay every row since the last event delivered to Kafka less recovery-margin, creating the new slot first", boolVal{&c.SinceLastDelivered}),
		g("recovery-margin", "with since-last-delivered: how far before the last delivered event to start (the longest transaction writing outbox rows, and records in flight when walrelay stopped)", ageVal{&c.RecoveryMargin}),
		g("progress", "auto (a bar on a terminal, log lines otherwise), bar, log or none", stringVal{&c.Progress}),
		g("progress-interval", "time between two progress log lines (each carries the resume token)", durVal{&c.ProgressInterval}),
	}
}

// Validate reports the first value replay refuses, as a *Error.
func (c ReplayConfig) Validate() error {
	if err := c.Config.Validate(); err != nil {
		return err
	}
	selection := len(c.EventIDs) + len(c.AggregateTypes) + len(c.AggregateIDs) + len(c.EventTypes)
	switch {
	case !c.Since.IsZero() && !c.Until.IsZero() && !c.Since.Before(c.Until):
		return invalid("until", "%s is not after since (%s)", c.Until.Format(time.RFC3339Nano), c.Since.Format(time.RFC3339Nano))
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return invalid("rate", "must be 0 (no limit) or a positive number of rows per second")
	case c.Resume != "" && c.ReplayID != "":
		return invalid("replay-id", "the resume token carries the replay's id; give no other")
	case c.SinceLastDelivered && (!c.Since.IsZero() || !c.Until.IsZero()):
		return invalid("since-last-delivered", "the recovery starts at the last delivered event and replays everything after it; give no since or until")
	case c.SinceLastDelivered && selection > 0:
		return invalid("since-last-delivered", "the recovery replays every row since the last delivered event; a selection by id or type would leave the others out")
	case c.RecoveryMargin < 0:
		return invalid("recovery-margin", "must not be negative")
	case c.Progress != ProgressAuto && c.Progress != ProgressBar && c.Progress != ProgressLog && c.Progress != ProgressNone:
		return invalid("progress", "must be auto, bar, log or none, got %q", c.Progress)
	case c.ProgressInterval <= 0:
		return invalid("progress-interval", "must be positive")
	}
	return nil
}

// timeVal is a point in time: RFC 3339 (with or without fractions of a
// second), a date or date and time without a zone (UTC), or an age (36h,
// 3d) before now.
type timeVal struct{ p *time.Time }

func (v timeVal) String() string {
	if v.p == nil || v.p.IsZero() {
		return ""
	}
	return v.p.UTC().Format(time.RFC3339Nano)
}

func (v timeVal) Set(s string) error {
	t, err := parseTime(s, time.Now())
	if err != nil {
		return err
	}
	*v.p = t
	return nil
}

func parseTime(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	for _, layout := range []string{"2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999", "2006-01-02T15:04", "2006-01-02 15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	if d, err := parseAge(s); err == nil && d > 0 {
		return now.Add(-d).UTC(), nil
	}
	return time.Time{}, fmt.Errorf("%q is not a time: RFC 3339 (2026-11-24T10:00:00Z), a date (2026-11-24, UTC) or an age (36h, 3d)", s)
}

// setYAML takes a YAML timestamp (an unquoted 2026-11-24) as it is, and
// anything else as its text.
func (v timeVal) setYAML(y any) error {
	if t, ok := y.(time.Time); ok {
		*v.p = t.UTC()
		return nil
	}
	if y == nil {
		*v.p = time.Time{}
		return nil
	}
	return v.Set(fmt.Sprint(y))
}

// floatVal is a non-negative number.
type floatVal struct{ p *float64 }

func (v floatVal) String() string {
	if v.p == nil {
		return ""
	}
	return strconv.FormatFloat(*v.p, 'g', -1, 64)
}

func (v floatVal) Set(s string) error {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return fmt.Errorf("%q is not a number", s)
	}
	*v.p = f
	return nil
}
