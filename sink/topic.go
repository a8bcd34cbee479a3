package sink

import (
	"errors"
	"fmt"
	"strings"

	"github.com/walrelay/walrelay/decoder"
)

// ErrInvalidTopic reports a topic name Kafka would refuse.
var ErrInvalidTopic = errors.New("invalid topic name")

// maxTopicLen is Kafka's limit on topic name length.
const maxTopicLen = 249

// Placeholders a topic template may use.
const (
	PlaceholderAggregateType = "{aggregate_type}"
	PlaceholderEventType     = "{event_type}"
	PlaceholderTable         = "{table}"
)

type segKind uint8

const (
	segLiteral segKind = iota
	segAggregateType
	segEventType
	segTable
)

type segment struct {
	kind segKind
	lit  string
}

// Template renders a topic name from an event. The zero value is not usable;
// build one with ParseTemplate. Safe for concurrent use.
type Template struct {
	src   string
	segs  []segment
	fixed bool
}

// ParseTemplate parses a topic template such as "outbox.event.{aggregate_type}".
// Placeholders are {aggregate_type}, {event_type} and {table} (the table name
// without schema). A template without placeholders names one fixed topic,
// which must itself be a valid topic name.
func ParseTemplate(src string) (Template, error) {
	t := Template{src: src}
	rest := src
	for rest != "" {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			t.segs = append(t.segs, segment{kind: segLiteral, lit: rest})
			break
		}
		if i > 0 {
			t.segs = append(t.segs, segment{kind: segLiteral, lit: rest[:i]})
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return Template{}, fmt.Errorf("topic template %q: unclosed '{'", src)
		}
		ph := rest[i : i+j+1]
		switch ph {
		case PlaceholderAggregateType:
			t.segs = append(t.segs, segment{kind: segAggregateType})
		case PlaceholderEventType:
			t.segs = append(t.segs, segment{kind: segEventType})
		case PlaceholderTable:
			t.segs = append(t.segs, segment{kind: segTable})
		default:
			return Template{}, fmt.Errorf("topic template %q: unknown placeholder %s (use %s, %s or %s)",
				src, ph, PlaceholderAggregateType, PlaceholderEventType, PlaceholderTable)
		}
		rest = rest[i+j+1:]
	}
	if len(t.segs) == 0 {
		return Template{}, fmt.Errorf("topic template is empty")
	}
	for _, s := range t.segs {
		if s.kind != segLiteral {
			continue
		}
		if strings.ContainsAny(s.lit, "}") {
			return Template{}, fmt.Errorf("topic template %q: stray '}'", src)
		}
		if err := validTopicChars(s.lit); err != nil {
			return Template{}, fmt.Errorf("topic template %q: %w", src, err)
		}
	}
	t.fixed = len(t.segs) == 1 && t.segs[0].kind == segLiteral
	if t.fixed {
		if err := ValidateTopic(t.segs[0].lit); err != nil {
			return Template{}, fmt.Errorf("topic template: %w", err)
		}
	}
	return t, nil
}

// String returns the template source.
func (t Template) String() string { return t.src }

// Render returns the topic for ev, or an error wrapping ErrInvalidTopic when
// the result is not a valid Kafka topic name; the invalid name is returned
// with the error, for messages and dead-letter headers.
func (t Template) Render(ev *decoder.Event) (string, error) {
	if t.fixed {
		return t.segs[0].lit, nil
	}
	var b strings.Builder
	for _, s := range t.segs {
		switch s.kind {
		case segLiteral:
			b.WriteString(s.lit)
		case segAggregateType:
			b.WriteString(ev.AggregateType)
		case segEventType:
			b.WriteString(ev.EventType)
		case segTable:
			b.WriteString(ev.TableName)
		}
	}
	topic := b.String()
	return topic, ValidateTopic(topic)
}

// ValidateTopic applies Kafka's rules for topic names: 1 to 249 characters
// of ASCII letters, digits, '.', '_' and '-', and not "." or "..".
func ValidateTopic(topic string) error {
	if topic == "" {
		return fmt.Errorf("%w: empty", ErrInvalidTopic)
	}
	if len(topic) > maxTopicLen {
		return fmt.Errorf("%w: %d characters, at most %d", ErrInvalidTopic, len(topic), maxTopicLen)
	}
	if topic == "." || topic == ".." {
		return fmt.Errorf("%w: %q", ErrInvalidTopic, topic)
	}
	return validTopicChars(topic)
}

func validTopicChars(topic string) error {
	for i := 0; i < len(topic); i++ {
		c := topic[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %q has character %q (allowed: letters, digits, '.', '_', '-')", ErrInvalidTopic, topic, c)
		}
	}
	return nil
}
