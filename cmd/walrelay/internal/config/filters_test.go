package config

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/walrelay/walrelay/decoder"
)

// TestFilterSettings: the filter flags (and variables) reach the decoder's filter of every
// table given with --table and of tableless events; a table of the YAML key tables has its
// own filter; a malformed pattern is refused naming its setting.
func TestFilterSettings(t *testing.T) {
	cfg := mustLoad(t, []string{"--table", "a.outbox,b.outbox", "--message-prefix", "walrelay.outbox",
		"--include-event-types", "Order*, Invoice?", "--exclude-aggregate-types", "test_*"},
		map[string]string{"WALRELAY_EXCLUDE_EVENT_TYPES": "*Deleted"})
	dc, err := cfg.Decoder()
	if err != nil {
		t.Fatal(err)
	}
	want := decoder.Filter{IncludeEventTypes: []string{"Order*", "Invoice?"}, ExcludeEventTypes: []string{"*Deleted"},
		ExcludeAggregateTypes: []string{"test_*"}}
	for _, tb := range dc.Tables {
		if !equalFilter(tb.Filter, want) {
			t.Errorf("table %s.%s filter %+v, want %+v", tb.Schema, tb.Name, tb.Filter, want)
		}
	}
	if !equalFilter(dc.MessageFilter, want) {
		t.Errorf("tableless filter %+v, want %+v", dc.MessageFilter, want)
	}
	if err := dc.Validate(); err != nil {
		t.Fatalf("decoder refuses the filters: %v", err)
	}
	opts, err := cfg.Relay(nil)
	if err != nil || !equalFilter(opts.Decoder.Tables[0].Filter, want) {
		t.Fatalf("relay options filter %+v (%v)", opts.Decoder.Tables[0].Filter, err)
	}

	yml := filepath.Join(t.TempDir(), "w.yaml")
	if err := os.WriteFile(yml, []byte(`
postgres_dsn: postgres://u@h/db
kafka_brokers: k:9092
message_prefix: walrelay.outbox
exclude_event_types: [Heartbeat]
tables:
  - name: billing.outbox
    filter:
      include_aggregate_types: [invoice, payment]
      exclude_event_types: ["*Draft"]
  - name: shipping.outbox
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err = loadRun([]string{"--config", yml}, envMap(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	dc, _ = cfg.Decoder()
	if got := dc.Tables[0].Filter; !equalFilter(got, decoder.Filter{IncludeAggregateTypes: []string{"invoice", "payment"}, ExcludeEventTypes: []string{"*Draft"}}) {
		t.Errorf("billing filter %+v", got)
	}
	if got := dc.Tables[1].Filter; !equalFilter(got, decoder.Filter{}) {
		t.Errorf("shipping has no filter of its own, got %+v", got)
	}
	if got := dc.MessageFilter; !equalFilter(got, decoder.Filter{ExcludeEventTypes: []string{"Heartbeat"}}) {
		t.Errorf("tableless filter %+v", got)
	}

	var ce *Error
	if _, err := loadRun(append(slices.Clone(minimalArgs), "--exclude-aggregate-types", "ok,[bad"), envMap(nil), io.Discard); !errors.As(err, &ce) ||
		ce.Key != "exclude-aggregate-types" || !strings.Contains(err.Error(), `"[bad"`) {
		t.Errorf("malformed flag pattern: %v", err)
	}
	if err := os.WriteFile(yml, []byte("postgres_dsn: postgres://u@h/db\nkafka_brokers: k:9092\ntables:\n  - name: a.outbox\n    filter: {include_event_types: [\"x[\"]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadRun([]string{"--config", yml}, envMap(nil), io.Discard); !errors.As(err, &ce) || ce.Key != "tables" ||
		!strings.Contains(err.Error(), "a.outbox: filter include_event_types") {
		t.Errorf("malformed table pattern: %v", err)
	}
	if err := os.WriteFile(yml, []byte("postgres_dsn: postgres://u@h/db\nkafka_brokers: k:9092\ntables:\n  - name: a.outbox\n    filter: {include_types: [x]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadRun([]string{"--config", yml}, envMap(nil), io.Discard); err == nil || !strings.Contains(err.Error(), "include_types") {
		t.Errorf("unknown filter key: %v", err)
	}
}

func equalFilter(a, b decoder.Filter) bool {
	return slices.Equal(a.IncludeEventTypes, b.IncludeEventTypes) && slices.Equal(a.ExcludeEventTypes, b.ExcludeEventTypes) &&
		slices.Equal(a.IncludeAggregateTypes, b.IncludeAggregateTypes) && slices.Equal(a.ExcludeAggregateTypes, b.ExcludeAggregateTypes)
}
