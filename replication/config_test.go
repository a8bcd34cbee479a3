package replication

import (
	"errors"
	"strings"
	"testing"
)

func TestParseTable(t *testing.T) {
	tests := []struct {
		in      string
		want    TableName
		quoted  string
		wantErr bool
	}{
		{"outbox", TableName{"public", "outbox"}, `"public"."outbox"`, false},
		{"billing.outbox", TableName{"billing", "outbox"}, `"billing"."outbox"`, false},
		{`we"ird.Out Box`, TableName{`we"ird`, "Out Box"}, `"we""ird"."Out Box"`, false},
		{"a.b.c", TableName{}, "", true},
		{".outbox", TableName{}, "", true},
		{"public.", TableName{}, "", true},
		{"", TableName{}, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseTable(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if got != tc.want || got.Quoted() != tc.quoted {
				t.Fatalf("got %+v quoted %s, want %+v %s", got, got.Quoted(), tc.want, tc.quoted)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{DSN: "postgres://u@h/db", Slot: "walrelay", Publication: "walrelay", Tables: []string{"public.outbox"}}
	tests := []struct {
		name   string
		mutate func(*Config)
		key    string // SettingError.Setting; "" means valid
	}{
		{"valid", func(*Config) {}, ""},
		{"no dsn", func(c *Config) { c.DSN = "" }, "DSN"},
		{"bad dsn", func(c *Config) { c.DSN = "postgres://u@h:port/db" }, "DSN"},
		{"upper case slot", func(c *Config) { c.Slot = "Walrelay" }, "Slot"},
		{"long publication", func(c *Config) { c.Publication = string(make([]byte, 64)) }, "Publication"},
		{"bad table", func(c *Config) { c.Tables = []string{"a.b.c"} }, "Tables"},
		{"negative interval", func(c *Config) { c.StatusInterval = -1 }, "StatusInterval"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mutate(&c)
			err := c.Validate()
			if tc.key == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var se *SettingError
			if !errors.As(err, &se) || se.Setting != tc.key || !strings.HasPrefix(err.Error(), tc.key+": ") {
				t.Fatalf("err = %v, want a *SettingError for %q", err, tc.key)
			}
			if fields := se.Fields(); len(fields) != 1 || fields[0] != "replication.Config."+tc.key {
				t.Errorf("Fields() = %q, want [replication.Config.%s]", fields, tc.key)
			}
		})
	}
}
