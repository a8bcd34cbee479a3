package sink

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/walrelay/walrelay/decoder"
)

// Each decoder poison and each sink refusal that dead-letters an event maps
// to its reason; any other poison is undecodable, and an empty key is its
// own reason.
func TestDeadLetterReasonOf(t *testing.T) {
	for _, tc := range []struct {
		ev   *decoder.Event
		want DeadLetterReason
	}{
		{&decoder.Event{Poison: fmt.Errorf("x: %w", decoder.ErrNullAggregateID)}, ReasonNullAggregateID},
		{&decoder.Event{Poison: fmt.Errorf("x: %w", decoder.ErrBadHeaders), AggregateID: []byte("a")}, ReasonBadHeaders},
		{&decoder.Event{Poison: fmt.Errorf("x: %w", decoder.ErrBadPartition), AggregateID: []byte("a")}, ReasonBadPartition},
		{&decoder.Event{Poison: fmt.Errorf("something else"), AggregateID: []byte("a")}, ReasonUndecodable},
		{&decoder.Event{}, ReasonEmptyAggregateID},
	} {
		if got, _ := PoisonOf(tc.ev); got != tc.want {
			t.Errorf("PoisonOf(%v) = %q, want %q", tc.ev.Poison, got, tc.want)
		}
	}
	for _, tc := range []struct {
		err  error
		want DeadLetterReason
	}{
		{ErrTooLarge, ReasonTooLarge},
		{ErrInvalidTopic, ReasonInvalidTopic},
		{ErrTopicRefused, ReasonTopicRefused},
		{ErrNoSuchPartition, ReasonBadPartition},
		{ErrSchemaMismatch, ReasonSchemaMismatch},
	} {
		err := &ProduceError{Topic: "t", Err: tc.err}
		if got, ok := RefusalReason(err); !ok || got != tc.want {
			t.Errorf("RefusalReason(%v) = %q, %v; want %q", err, got, ok, tc.want)
		}
	}
	if _, ok := RefusalReason(&ProduceError{Topic: "t", Err: ErrTopicNotAuthorized}); ok {
		t.Error("an unauthorized topic dead-letters its events; it must stop walrelay")
	}
}

// The operator docs list exactly the reasons walrelay dead-letters with.
func TestDeadLetterReasonsDocumented(t *testing.T) {
	var want []string
	for _, r := range deadLetterReasons {
		want = append(want, string(r.reason))
	}
	slices.Sort(want)
	code := regexp.MustCompile("`([a-z_]+)`")
	for _, doc := range []struct{ file, marker string }{
		{"../docs/operations.md", "walrelay_dead_letters_total{reason}"},
		{"../docs/outbox-contract.md", "`walrelay.dlq.reason`: one of"},
	} {
		b, err := os.ReadFile(doc.file)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		i := strings.Index(text, doc.marker)
		if i < 0 {
			t.Fatalf("%s: no %q", doc.file, doc.marker)
		}
		para := text[i+len(doc.marker):]
		if j := strings.Index(para, ";\n- "); j >= 0 {
			para = para[:j]
		}
		if j := strings.Index(para, "\n|"); j >= 0 {
			para = para[:j]
		}
		var got []string
		for _, m := range code.FindAllStringSubmatch(para, -1) {
			got = append(got, m[1])
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s lists the dead-letter reasons %v, want %v", doc.file, got, want)
		}
	}
}
