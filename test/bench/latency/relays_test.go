package main

import (
	"strings"
	"testing"
)

func TestInsertStatement(t *testing.T) {
	tests := []struct {
		name      string
		r         relayOptions
		want      []string // substrings
		wantErr   string
		aggCols   [2]string
		defaultSQ bool // equals insertSQL
	}{
		{name: "default", r: relayOptions{table: "public.outbox", columns: "default"}, defaultSQ: true,
			aggCols: [2]string{"aggregate_type", "aggregate_id"}},
		{name: "default other table", r: relayOptions{table: "app.events", columns: "default"},
			want: []string{`INSERT INTO "app"."events" (aggregate_type, aggregate_id, event_type, payload)`}, aggCols: [2]string{"aggregate_type", "aggregate_id"}},
		{name: "debezium", r: relayOptions{table: "public.outbox", columns: "debezium"},
			want:    []string{`INSERT INTO "public"."outbox" (id, aggregatetype, aggregateid, type, payload)`, "gen_random_uuid(), $1, s::text, 'LatencyEvent'"},
			aggCols: [2]string{"aggregatetype", "aggregateid"}},
		{name: "table without schema", r: relayOptions{table: "outbox", columns: "default"}, wantErr: "want schema.name"},
		{name: "unknown columns", r: relayOptions{table: "public.outbox", columns: "other"}, wantErr: "default or debezium"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.r.insertStatement()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.defaultSQ && got != strings.Replace(insertSQL, "public.outbox", `"public"."outbox"`, 1) {
				t.Errorf("got %q, want the default statement on \"public\".\"outbox\"", got)
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("statement %q lacks %q", got, w)
				}
			}
			if a, b := tt.r.outboxColumns(); a != tt.aggCols[0] || b != tt.aggCols[1] {
				t.Errorf("outboxColumns() = %s, %s, want %s, %s", a, b, tt.aggCols[0], tt.aggCols[1])
			}
		})
	}
}

func TestRelaysBehind(t *testing.T) {
	a, b := &relay{c: &consumer{}}, &relay{c: &consumer{}}
	a.c.unique.Store(10)
	b.c.unique.Store(9)
	if !relaysBehind([]*relay{a, b}, 10) {
		t.Error("relaysBehind: b has 9 of 10, want true")
	}
	b.c.unique.Store(10)
	if relaysBehind([]*relay{a, b}, 10) {
		t.Error("relaysBehind: both have 10 of 10, want false")
	}
	if relaysBehind(nil, 10) {
		t.Error("relaysBehind(nil) = true, want false")
	}
}
