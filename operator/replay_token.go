package operator

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// replayToken is where an interrupted replay resumes: every selected row of
// the tables before Table, and every selected row of Table whose order
// value is below From, was acknowledged by Kafka. It travels as the
// base64url text of its JSON.
type replayToken struct {
	V     int    `json:"v"`
	ID    string `json:"id"`    // the replay's id, kept by the resumed replay
	Sel   string `json:"sel"`   // fingerprint of the selection's lists, the tables and the time column
	Table int    `json:"table"` // index in the configured tables
	// Since and Until are the selection's time range (RFC 3339, "" for
	// unbounded): a resumed replay keeps them, also when they were derived
	// (since the last delivered event).
	Since string `json:"since,omitempty"`
	Until string `json:"until,omitempty"`
	// From is the order value (the time column's text) to resume at,
	// inclusive; "" resumes at the table's first selected row.
	From string `json:"from,omitempty"`
	Done int64  `json:"done"` // rows acknowledged before, for the summary
}

const replayTokenVersion = 1

// ErrBadResumeToken: a resume token that is not one, or not of this
// replay's selection.
var ErrBadResumeToken = errors.New("invalid resume token")

func (t replayToken) String() string {
	b, _ := json.Marshal(t) // cannot fail
	return base64.RawURLEncoding.EncodeToString(b)
}

func parseReplayToken(s string) (replayToken, error) {
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return replayToken{}, fmt.Errorf("%w: %v", ErrBadResumeToken, err)
	}
	var t replayToken
	if err := json.Unmarshal(b, &t); err != nil {
		return replayToken{}, fmt.Errorf("%w: %v", ErrBadResumeToken, err)
	}
	if t.V != replayTokenVersion || t.ID == "" || t.Sel == "" || t.Table < 0 {
		return replayToken{}, fmt.Errorf("%w: version %d, or fields missing", ErrBadResumeToken, t.V)
	}
	return t, nil
}

// fingerprint identifies a selection's lists over tables ordered by
// timeColumn (the time range travels in the token itself): a token resumes
// only the replay it came from.
func (s ReplaySelection) fingerprint(tables []string, timeColumn string) string {
	h := sha256.New()
	field := func(name string, vs ...string) {
		fmt.Fprintf(h, "%s=%d:", name, len(vs))
		for _, v := range vs {
			fmt.Fprintf(h, "%d:%s;", len(v), v)
		}
	}
	sorted := func(vs []string) []string { return slices.Sorted(slices.Values(vs)) }
	field("tables", tables...)
	field("time", timeColumn)
	field("ids", sorted(s.IDs)...)
	field("aggregate_types", sorted(s.AggregateTypes)...)
	field("aggregate_ids", sorted(s.AggregateIDs)...)
	field("event_types", sorted(s.EventTypes)...)
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// tokenTime formats a selection bound for the token; "" for unbounded.
func tokenTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// parseTokenTime reads a bound written by tokenTime.
func parseTokenTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: time %q: %v", ErrBadResumeToken, s, err)
	}
	return t, nil
}
