package operator

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walrelay/walrelay/sink"
)

// TestStoredCause: a dead letter whose row is gone goes back as stored only
// after a refusal of Kafka's whose record holds everything; a value problem
// (unsupported_value included: the decoder's unreadable value as well as an
// envelope value) or an omitted payload is dead-lettered again with why.
func TestStoredCause(t *testing.T) {
	omitted := &kgo.Record{Headers: []kgo.RecordHeader{{Key: sink.HeaderDLQPayloadOmitted, Value: []byte("true")}}}
	for _, tc := range []struct {
		reason string
		rec    *kgo.Record
		send   bool
	}{
		{string(sink.ReasonTopicRefused), &kgo.Record{}, true},
		{string(sink.ReasonTopicRefused), omitted, false},
		{string(sink.ReasonUnsupportedValue), &kgo.Record{}, false},
		{string(sink.ReasonNullAggregateID), &kgo.Record{}, false},
	} {
		err := storedCause(tc.rec, tc.reason, nil)
		if (err == nil) != tc.send {
			t.Errorf("reason %s (headers %v): cause %v, want sent as stored %v", tc.reason, tc.rec.Headers, err, tc.send)
		}
	}
}
