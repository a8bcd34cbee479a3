package config

import (
	"slices"
	"time"

	"github.com/walrelay/walrelay/operator"
	"github.com/walrelay/walrelay/sink"
)

// RedriveConfig is what `walrelay dlq redrive` needs: every setting of
// walrelay run (the tables, mapping, routing, Kafka, security and the
// dead-letter topic, so that a redriven event is the record run makes), and
// the selection of dead letters.
type RedriveConfig struct {
	Config
	// Reasons and IntendedTopics select dead letters by their
	// walrelay.dlq.reason and walrelay.dlq.topic headers; Since and Until
	// by their timestamp (Since <= t < Until).
	Reasons, IntendedTopics []string
	Since, Until            time.Time
	// Group is the consumer group whose committed offsets remember what
	// was redriven.
	Group  string
	DryRun bool
}

// DefaultRedriveConfig returns the redrive configuration used when nothing
// is set.
func DefaultRedriveConfig() RedriveConfig {
	return RedriveConfig{Config: Defaults(), Group: operator.DefaultRedriveGroup}
}

func (c *RedriveConfig) settings() []setting {
	g := inGroup(GroupRedrive)
	return append(c.Config.settings(),
		g("reason", "redrive only dead letters of these reasons (walrelay.dlq.reason: topic_refused, too_large, ...), comma-separated", listVal{&c.Reasons}),
		g("intended-topic", "redrive only dead letters meant for these topics (walrelay.dlq.topic), comma-separated", listVal{&c.IntendedTopics}),
		g("since", "redrive only dead letters whose timestamp (the event's commit time) is at or after this time: RFC 3339, a date (UTC) or an age (36h, 3d)", timeVal{&c.Since}),
		g("until", "redrive only dead letters whose timestamp is before this time (same forms as since)", timeVal{&c.Until}),
		g("redrive-group", "consumer group whose committed offsets remember what was redriven", stringVal{&c.Group}),
		g("dry-run", "list the dead letters that would be redriven and where to; send and commit nothing", boolVal{&c.DryRun}),
	)
}

// Validate reports the first value dlq redrive refuses, as a *Error.
func (c RedriveConfig) Validate() error {
	if err := c.Config.Validate(); err != nil {
		return err
	}
	reasons := sink.DeadLetterReasons()
	for _, r := range c.Reasons {
		if !slices.Contains(reasons, sink.DeadLetterReason(r)) {
			return invalid("reason", "%q is not a dead-letter reason (one of %v)", r, reasons)
		}
	}
	for _, t := range c.IntendedTopics {
		if err := sink.ValidateTopic(t); err != nil {
			return invalid("intended-topic", "%v", err)
		}
	}
	switch {
	case !c.Since.IsZero() && !c.Until.IsZero() && !c.Since.Before(c.Until):
		return invalid("until", "%s is not after since (%s)", c.Until.Format(time.RFC3339Nano), c.Since.Format(time.RFC3339Nano))
	case c.Group == "":
		return invalid("redrive-group", "required")
	}
	return nil
}
