package sink_test

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/sink"
)

func TestParseTemplate(t *testing.T) {
	long249 := strings.Repeat("t", 249)
	long250 := strings.Repeat("t", 250)
	for _, tc := range []struct {
		name    string
		src     string
		wantErr string // substring of the error; "" means valid
		invalid bool   // the error wraps ErrInvalidTopic
	}{
		{name: "default", src: "outbox.event.{aggregate_type}"},
		{name: "aggregate type only", src: "{aggregate_type}"},
		{name: "event type only", src: "{event_type}"},
		{name: "table only", src: "{table}"},
		{name: "all placeholders", src: "{table}.{aggregate_type}-{event_type}"},
		{name: "adjacent placeholders", src: "{aggregate_type}{event_type}"},
		{name: "placeholder repeated", src: "{table}.{table}"},
		{name: "fixed topic", src: "orders"},
		{name: "fixed topic all legal characters", src: "a.B_c-9"},
		{name: "fixed topic 249 characters", src: long249},

		{name: "empty", src: "", wantErr: "empty"},
		{name: "unknown placeholder", src: "outbox.{aggregate}", wantErr: "unknown placeholder {aggregate}"},
		{name: "placeholder is case sensitive", src: "{AGGREGATE_TYPE}", wantErr: "unknown placeholder"},
		{name: "placeholder with spaces", src: "{ table }", wantErr: "unknown placeholder"},
		{name: "empty placeholder", src: "x.{}", wantErr: "unknown placeholder {}"},
		{name: "nested brace", src: "{{table}}", wantErr: "unknown placeholder {{table}"},
		{name: "unclosed brace", src: "outbox.{aggregate_type", wantErr: "unclosed '{'"},
		{name: "lone open brace", src: "{", wantErr: "unclosed '{'"},
		{name: "unclosed after placeholder", src: "{table}.{", wantErr: "unclosed '{'"},
		{name: "stray close brace", src: "outbox}", wantErr: "stray '}'"},
		{name: "stray close brace before placeholder", src: "a}.{table}", wantErr: "stray '}'"},
		{name: "stray close brace after placeholder", src: "{table}}", wantErr: "stray '}'"},
		{name: "illegal literal beside a placeholder", src: "out box.{aggregate_type}", wantErr: "invalid topic name", invalid: true},
		{name: "fixed topic bad character", src: "my topic", wantErr: "topic template", invalid: true},
		{name: "fixed topic slash", src: "a/b", wantErr: "topic template", invalid: true},
		{name: "fixed topic dot", src: ".", wantErr: "topic template", invalid: true},
		{name: "fixed topic dot dot", src: "..", wantErr: "topic template", invalid: true},
		{name: "fixed topic 250 characters", src: long250, wantErr: "250 characters", invalid: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmpl, err := sink.ParseTemplate(tc.src)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("ParseTemplate(%q): %v", tc.src, err)
				}
				if got := tmpl.String(); got != tc.src {
					t.Errorf("String() = %q, want %q", got, tc.src)
				}
				return
			}
			if err == nil {
				t.Fatalf("ParseTemplate(%q) succeeded, want error containing %q", tc.src, tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseTemplate(%q) error %q does not contain %q", tc.src, err, tc.wantErr)
			}
			if got := errors.Is(err, sink.ErrInvalidTopic); got != tc.invalid {
				t.Errorf("errors.Is(%v, ErrInvalidTopic) = %v, want %v", err, got, tc.invalid)
			}
		})
	}
}

func TestTemplateRender(t *testing.T) {
	ev := &decoder.Event{
		Table:         "public.outbox",
		TableName:     "outbox",
		AggregateType: "order",
		EventType:     "OrderCreated",
	}
	with := func(f func(e *decoder.Event)) *decoder.Event {
		e := *ev
		f(&e)
		return &e
	}
	for _, tc := range []struct {
		name    string
		tmpl    string
		ev      *decoder.Event
		want    string
		invalid bool
	}{
		{name: "aggregate type", tmpl: "outbox.event.{aggregate_type}", ev: ev, want: "outbox.event.order"},
		{name: "event type", tmpl: "events.{event_type}", ev: ev, want: "events.OrderCreated"},
		{name: "table uses TableName, not schema-qualified Table", tmpl: "cdc.{table}", ev: ev, want: "cdc.outbox"},
		{name: "all placeholders", tmpl: "{table}.{aggregate_type}.{event_type}", ev: ev, want: "outbox.order.OrderCreated"},
		{name: "fixed topic ignores the event", tmpl: "all-events", ev: with(func(e *decoder.Event) { e.AggregateType = "bad type" }), want: "all-events"},
		{name: "message event has no table", tmpl: "cdc.{table}.{aggregate_type}", ev: with(func(e *decoder.Event) { e.Table, e.TableName = "", "" }), want: "cdc..order"},
		{name: "249 characters", tmpl: "{aggregate_type}", ev: with(func(e *decoder.Event) { e.AggregateType = strings.Repeat("a", 249) }), want: strings.Repeat("a", 249)},

		{name: "bad character", tmpl: "outbox.event.{aggregate_type}", ev: with(func(e *decoder.Event) { e.AggregateType = "order/v1" }), invalid: true},
		{name: "space", tmpl: "outbox.event.{aggregate_type}", ev: with(func(e *decoder.Event) { e.AggregateType = "order v1" }), invalid: true},
		{name: "non-ASCII letter", tmpl: "outbox.event.{aggregate_type}", ev: with(func(e *decoder.Event) { e.AggregateType = "ordér" }), invalid: true},
		{name: "NUL byte", tmpl: "outbox.event.{aggregate_type}", ev: with(func(e *decoder.Event) { e.AggregateType = "a\x00" }), invalid: true},
		{name: "too long (250)", tmpl: "outbox.event.{aggregate_type}", ev: with(func(e *decoder.Event) { e.AggregateType = strings.Repeat("a", 250-len("outbox.event.")) }), invalid: true},
		{name: "dot", tmpl: "{aggregate_type}", ev: with(func(e *decoder.Event) { e.AggregateType = "." }), invalid: true},
		{name: "dot dot", tmpl: "{aggregate_type}", ev: with(func(e *decoder.Event) { e.AggregateType = ".." }), invalid: true},
		{name: "empty result", tmpl: "{table}", ev: with(func(e *decoder.Event) { e.TableName = "" }), invalid: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmpl, err := sink.ParseTemplate(tc.tmpl)
			if err != nil {
				t.Fatalf("ParseTemplate(%q): %v", tc.tmpl, err)
			}
			got, err := tmpl.Render(tc.ev)
			if tc.invalid {
				if !errors.Is(err, sink.ErrInvalidTopic) {
					t.Fatalf("Render = %q, %v; want an error wrapping ErrInvalidTopic", got, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Render: %v", err)
			}
			if got != tc.want {
				t.Errorf("Render = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestValidateTopic(t *testing.T) {
	for _, tc := range []struct {
		topic string
		ok    bool
	}{
		{"a", true},
		{"outbox.event.order", true},
		{"Orders_v2-eu", true},
		{"0123456789", true},
		{"_", true},
		{"-", true},
		{"...", true},
		{"a..b", true},
		{strings.Repeat("x", 249), true},

		{"", false},
		{".", false},
		{"..", false},
		{strings.Repeat("x", 250), false},
		{"a b", false},
		{"a/b", false},
		{"a:b", false},
		{"a+b", false},
		{"a{b}", false},
		{"a\x00", false},
		{"a\n", false},
		{"é", false},
		{"\xff", false},
	} {
		name := tc.topic
		if len(name) > 20 {
			name = name[:10] + "…"
		}
		t.Run(name, func(t *testing.T) {
			err := sink.ValidateTopic(tc.topic)
			if tc.ok && err != nil {
				t.Fatalf("ValidateTopic(%q) = %v, want nil", tc.topic, err)
			}
			if !tc.ok && !errors.Is(err, sink.ErrInvalidTopic) {
				t.Fatalf("ValidateTopic(%q) = %v, want an error wrapping ErrInvalidTopic", tc.topic, err)
			}
		})
	}
}

// legalTopic is an oracle written independently of ValidateTopic: Kafka's
// topic rule, [a-zA-Z0-9._-]{1,249} and not "." or "..".
func legalTopic(s string) bool {
	if len(s) == 0 || len(s) > 249 || s == "." || s == ".." {
		return false
	}
	return strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == ""
}

// checkRender asserts the routing property for one aggregate type: Render
// returns exactly the expected name when it is legal, and an ErrInvalidTopic
// error (with no name) otherwise. It never returns an illegal name.
func checkRender(t *testing.T, tmpl sink.Template, prefix, aggType string) {
	t.Helper()
	got, err := tmpl.Render(&decoder.Event{AggregateType: aggType})
	want := prefix + aggType
	if err != nil {
		if !errors.Is(err, sink.ErrInvalidTopic) {
			t.Fatalf("Render(%q): error %v does not wrap ErrInvalidTopic", aggType, err)
		}
		if got != want {
			t.Fatalf("Render(%q) returned %q with its error, want the invalid name %q (for messages and dead-letter headers)", aggType, got, want)
		}
		if legalTopic(want) {
			t.Fatalf("Render(%q) rejected legal topic %q: %v", aggType, want, err)
		}
		return
	}
	if got != want {
		t.Fatalf("Render(%q) = %q, want %q", aggType, got, want)
	}
	if !legalTopic(got) {
		t.Fatalf("Render(%q) returned illegal topic %q", aggType, got)
	}
	if err := sink.ValidateTopic(got); err != nil {
		t.Fatalf("Render(%q) returned %q, which ValidateTopic rejects: %v", aggType, got, err)
	}
}

// randomAggregateType draws strings that are mostly legal, with illegal
// bytes, multi-byte runes, invalid UTF-8, "." / ".." and lengths around the
// 249-character limit mixed in.
func randomAggregateType(r *rand.Rand) string {
	const legal = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
	illegal := []string{" ", "/", ":", "+", "{", "}", "\x00", "\n", "\t", "é", "€", "\xff", "😀", "\\", "*"}
	switch r.IntN(10) {
	case 0:
		return []string{"", ".", "..", "...", "_", "-"}[r.IntN(6)]
	case 1: // around the length limit once the prefix is added
		return strings.Repeat("a", 230+r.IntN(30))
	}
	n := r.IntN(40)
	if r.IntN(5) == 0 {
		n = r.IntN(300)
	}
	var b strings.Builder
	bad := r.IntN(3) == 0
	for range n {
		if bad && r.IntN(8) == 0 {
			b.WriteString(illegal[r.IntN(len(illegal))])
			continue
		}
		b.WriteByte(legal[r.IntN(len(legal))])
	}
	return b.String()
}

// TestRenderProperty: for any aggregate type, Render either returns a name
// that passes ValidateTopic or an ErrInvalidTopic error, never a name Kafka
// would refuse.
func TestRenderProperty(t *testing.T) {
	for _, prefix := range []string{"", "outbox.event.", "x."} {
		tmpl, err := sink.ParseTemplate(prefix + sink.PlaceholderAggregateType)
		if err != nil {
			t.Fatal(err)
		}
		t.Run("prefix="+prefix, func(t *testing.T) {
			// Fixed seeds keep failures reproducible; FuzzRenderTopic
			// explores further with go test -fuzz.
			r := rand.New(rand.NewPCG(1, uint64(len(prefix))))
			var valid, invalid int
			for range 20000 {
				agg := randomAggregateType(r)
				checkRender(t, tmpl, prefix, agg)
				if legalTopic(prefix + agg) {
					valid++
				} else {
					invalid++
				}
			}
			// The generator must exercise both outcomes.
			if valid < 1000 || invalid < 1000 {
				t.Fatalf("generator is lopsided: %d valid, %d invalid", valid, invalid)
			}
		})
	}
}

func FuzzRenderTopic(f *testing.F) {
	for _, s := range []string{"order", "", ".", "..", "a/b", "é", "\xff", strings.Repeat("a", 236), strings.Repeat("a", 237)} {
		f.Add(s)
	}
	tmpl, err := sink.ParseTemplate("outbox.event." + sink.PlaceholderAggregateType)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, agg string) {
		checkRender(t, tmpl, "outbox.event.", agg)
	})
}
