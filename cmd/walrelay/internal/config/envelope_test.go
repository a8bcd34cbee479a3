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
	"github.com/walrelay/walrelay/sink"
)

// TestEnvelopeSettings: --envelope and --expand-json-payload reach the decoder's envelope
// columns and the sink's JSON values of the tables of --table; a table of tables: has its
// own; header columns take a header name; what the decoder refuses names the setting.
func TestEnvelopeSettings(t *testing.T) {
	cfg := mustLoad(t, []string{"--columns", "debezium", "--envelope", "type:eventType, aggregateid", "--expand-json-payload",
		"--header-columns", "tenant:tenantId,trace"}, nil)
	dc, err := cfg.Decoder()
	if err != nil {
		t.Fatal(err)
	}
	c := dc.Tables[0].Columns
	if !slices.Equal(c.Envelope, []decoder.EnvelopeColumn{{Column: "type", Name: "eventType"}, {Column: "aggregateid"}}) {
		t.Errorf("envelope columns %+v", c.Envelope)
	}
	if !slices.Equal(c.HeaderColumns, []string{"tenant", "trace"}) || !slices.Equal(c.HeaderNames, []string{"tenantId", ""}) {
		t.Errorf("header columns %v named %v", c.HeaderColumns, c.HeaderNames)
	}
	if got := cfg.Sink().JSONValues; len(got) != 1 || got["public.outbox"] != (sink.JSONValue{ExpandPayload: true}) {
		t.Errorf("sink JSON values %+v", got)
	}
	if got := cfg.Replication().Columns["public.outbox"]; !slices.Contains(got, "aggregateid") || !slices.Contains(got, "type") {
		t.Errorf("publication columns %v", got)
	}
	if got := mustLoad(t, nil, nil).Sink().JSONValues; got != nil {
		t.Errorf("no envelope: JSON values %+v, want none", got)
	}

	yml := filepath.Join(t.TempDir(), "w.yaml")
	if err := os.WriteFile(yml, []byte(`
postgres_dsn: postgres://u@h/db
kafka_brokers: k:9092
tables:
  - name: a.outbox
    columns: debezium
    envelope: [type:eventType, id]
  - name: b.outbox
    expand_json_payload: true
  - name: c.outbox
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err = loadRun([]string{"--config", yml}, envMap(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	dc, _ = cfg.Decoder()
	if got := dc.Tables[0].Columns.Envelope; !slices.Equal(got, []decoder.EnvelopeColumn{{Column: "type", Name: "eventType"}, {Column: "id"}}) {
		t.Errorf("a.outbox envelope %+v", got)
	}
	want := map[string]sink.JSONValue{"a.outbox": {}, "b.outbox": {ExpandPayload: true}}
	if got := cfg.Sink().JSONValues; len(got) != 2 || got["a.outbox"] != want["a.outbox"] || got["b.outbox"] != want["b.outbox"] {
		t.Errorf("sink JSON values %+v, want %+v", got, want)
	}

	var ce *Error
	for _, bad := range []struct {
		args []string
		key  string
		msg  string
	}{
		{[]string{"--envelope", "type:"}, "envelope", `envelope column "type:"`},
		{[]string{"--envelope", "type:payload"}, "envelope", `envelope field "payload" is the payload's`},
		{[]string{"--envelope", "id,id"}, "envelope", `envelope field "id" named twice`},
		{[]string{"--header-columns", ":x"}, "header-columns", `header column ":x"`},
	} {
		_, err := loadRun(append(slices.Clone(minimalArgs), bad.args...), envMap(nil), io.Discard)
		if !errors.As(err, &ce) || ce.Key != bad.key || !strings.Contains(err.Error(), bad.msg) {
			t.Errorf("%v: %v, want key %s and %q", bad.args, err, bad.key, bad.msg)
		}
	}
}
