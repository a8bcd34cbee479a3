package decoder

import (
	"errors"
	"testing"
)

// A table's Filter publishes an event when its type and aggregate type each
// match an include pattern (or there is none) and no exclude pattern; the
// others come out as KindFiltered with the reason, the event still readable.
// An undecodable event is never filtered.
func TestDecodeFiltered(t *testing.T) {
	row := func(aggType, evType string, aggID tv) []tv {
		return outboxRow(txt("00000000-0000-4000-8000-000000000001"), txt(aggType), aggID,
			txt(evType), txt(`{"id": 1}`), txt("{}"), txt("2026-11-21 05:40:01.123456+00"))
	}
	for _, tc := range []struct {
		name   string
		filter Filter
		row    []tv
		kind   Kind
		reason string
	}{
		{"no filter", Filter{}, row("order", "OrderCreated", txt("o-1")), KindEvent, ""},
		{"included type", Filter{IncludeEventTypes: []string{"Order*"}}, row("order", "OrderCreated", txt("o-1")), KindEvent, ""},
		{"type not included", Filter{IncludeEventTypes: []string{"Order*"}}, row("order", "InvoiceSent", txt("o-1")), KindFiltered, ReasonFilteredEventType},
		{"excluded type", Filter{ExcludeEventTypes: []string{"*Debug", "Internal?"}}, row("order", "InternalX", txt("o-1")), KindFiltered, ReasonFilteredEventType},
		{"exclude wins over include", Filter{IncludeEventTypes: []string{"*"}, ExcludeEventTypes: []string{"OrderCreated"}}, row("order", "OrderCreated", txt("o-1")), KindFiltered, ReasonFilteredEventType},
		{"aggregate type not included", Filter{IncludeAggregateTypes: []string{"order", "invoice"}}, row("customer", "Created", txt("c-1")), KindFiltered, ReasonFilteredAggregateType},
		{"aggregate type class", Filter{IncludeAggregateTypes: []string{"[io]*"}}, row("invoice", "Created", txt("i-1")), KindEvent, ""},
		{"excluded aggregate type", Filter{ExcludeAggregateTypes: []string{"audit"}}, row("audit", "Seen", txt("a-1")), KindFiltered, ReasonFilteredAggregateType},
		{"an undecodable event is not filtered", Filter{ExcludeAggregateTypes: []string{"audit"}}, row("audit", "Seen", null()), KindEvent, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Tables[0].Filter = tc.filter
			d, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var out Output
			mustDecode(t, d, 0, encRelation(relOutbox, "public", "outbox", outboxCols...), &out)
			mustDecode(t, d, walBase, encBegin(walBase+0x1000, commitTime, 700), &out)
			mustDecode(t, d, walBase+0x10, encInsert(relOutbox, tc.row...), &out)
			if out.Kind != tc.kind || out.Reason != tc.reason {
				t.Fatalf("kind %v reason %q, want %v %q", out.Kind, out.Reason, tc.kind, tc.reason)
			}
			if out.Event.EventType == "" || out.Event.AggregateType == "" {
				t.Fatalf("event not readable: %+v", out.Event)
			}
			if tc.kind == KindFiltered && out.Table != "public.outbox" {
				t.Fatalf("table %q, want public.outbox", out.Table)
			}
			if tc.name == "an undecodable event is not filtered" && !errors.Is(out.Event.Poison, ErrNullAggregateID) {
				t.Fatalf("poison %v, want ErrNullAggregateID", out.Event.Poison)
			}
		})
	}
}

// Tableless events are filtered by Config.MessageFilter.
func TestDecodeMessageFiltered(t *testing.T) {
	cfg := testConfig()
	cfg.MessageFilter = Filter{IncludeEventTypes: []string{"Keep"}}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out Output
	mustDecode(t, d, walBase, encBegin(walBase+0x1000, commitTime, 700), &out)
	for _, tc := range []struct {
		evType string
		kind   Kind
	}{{"Keep", KindEvent}, {"Drop", KindFiltered}} {
		msg := `{"id": "1", "aggregate_type": "a", "aggregate_id": "k", "event_type": "` + tc.evType + `", "payload": {}}`
		mustDecode(t, d, walBase+0x10, encMessage(true, walBase+0x10, "walrelay.outbox", []byte(msg)), &out)
		if out.Kind != tc.kind {
			t.Fatalf("tableless %s: kind %v, want %v", tc.evType, out.Kind, tc.kind)
		}
	}
}

// A malformed pattern is refused when the decoder is made.
func TestFilterPatternValidated(t *testing.T) {
	cfg := testConfig()
	cfg.Tables[0].Filter = Filter{ExcludeEventTypes: []string{"[a-"}}
	_, err := New(cfg)
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "filter" {
		t.Fatalf("New with a malformed pattern: %v, want a ConfigError on filter", err)
	}
	cfg = testConfig()
	cfg.MessageFilter = Filter{IncludeAggregateTypes: []string{"\\"}}
	if _, err := New(cfg); !errors.As(err, &ce) || ce.Field != "filter" {
		t.Fatalf("New with a malformed message filter pattern: %v, want a ConfigError on filter", err)
	}
}
