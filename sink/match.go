package sink

import (
	"maps"
	"slices"
	"strings"
)

// Matches reports whether topic is one the template can render: its literal
// parts in place and each placeholder standing for one or more characters
// of a topic name. A fixed template matches its topic only.
func (t Template) Matches(topic string) bool {
	if ValidateTopic(topic) != nil {
		return false
	}
	return matchSegs(t.segs, topic)
}

func matchSegs(segs []segment, s string) bool {
	if len(segs) == 0 {
		return s == ""
	}
	if segs[0].kind == segLiteral {
		rest, ok := strings.CutPrefix(s, segs[0].lit)
		return ok && matchSegs(segs[1:], rest)
	}
	// A placeholder takes at least one character; try every length, the
	// literals after it decide (templates are short).
	for i := 1; i <= len(s); i++ {
		if matchSegs(segs[1:], s[i:]) {
			return true
		}
	}
	return false
}

// Templates returns the topic templates of the configuration, the default
// one first, then those of TableTopics by table name, for reading back what
// the sink produced.
func (c Config) Templates() ([]Template, error) {
	c.setDefaults()
	t, err := ParseTemplate(c.Topic)
	if err != nil {
		return nil, err
	}
	out := []Template{t}
	for _, table := range slices.Sorted(maps.Keys(c.TableTopics)) {
		t, err := ParseTemplate(c.TableTopics[table])
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// DeadLetterTopic returns the configured dead-letter topic (the default when
// unset).
func (c Config) DeadLetterTopic() string {
	c.setDefaults()
	return c.DLQTopic
}
