package replication

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
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
		{"no dsn", func(c *Config) { c.DSN = "" }, "postgres-dsn"},
		{"bad dsn", func(c *Config) { c.DSN = "postgres://u@h:port/db" }, "postgres-dsn"},
		{"upper case slot", func(c *Config) { c.Slot = "Walrelay" }, "slot"},
		{"long publication", func(c *Config) { c.Publication = string(make([]byte, 64)) }, "publication"},
		{"bad table", func(c *Config) { c.Tables = []string{"a.b.c"} }, "table"},
		{"negative interval", func(c *Config) { c.StatusInterval = -1 }, "status-interval"},
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
		})
	}
}

func TestIsRetryable(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"prerequisite", &PrereqError{Check: "wal_level"}, false},
		{"slot in use", fmt.Errorf("start: %w", ErrSlotInUse), true},
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, true},
		{"connection failure", &pgconn.PgError{Code: "08006"}, true},
		{"too many connections", &pgconn.PgError{Code: "53300"}, true},
		{"undefined table", &pgconn.PgError{Code: "42P01"}, false},
		{"EOF", fmt.Errorf("receive: %w", io.ErrUnexpectedEOF), true},
		{"net", &net.OpError{Op: "read", Err: errors.New("connection reset")}, true},
		{"canceled", context.Canceled, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsRetryable(tc.err); got != tc.want {
				t.Fatalf("IsRetryable(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// TestMixedCasePublicationNameArg: pgoutput splits publication_names as SQL identifiers
// (folding unquoted ones to lower case, splitting at commas), so the name is quoted as
// an identifier inside the string literal.
func TestMixedCasePublicationNameArg(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"walrelay", `publication_names '"walrelay"'`},
		{"WalRelay_Pub", `publication_names '"WalRelay_Pub"'`},
		{`a "b", c's`, `publication_names '"a ""b"", c''s"'`},
	} {
		if got := publicationNamesArg(tc.in); got != tc.want {
			t.Errorf("publicationNamesArg(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// TestNewUserErrorsExplained: connection failures a new setup meets come back as a
// *PrereqError whose fix names what to do; others are wrapped unchanged.
func TestNewUserErrorsExplained(t *testing.T) {
	cfg := &pgconn.Config{User: "App User", Database: "shop"}
	tests := []struct {
		name, code, msg string
		replication     bool
		fix             string // "" when not explained
	}{
		{"wrong password", "28P01", `password authentication failed for user "App User"`, true, "check the user and password"},
		{"no hba entry", "28000", `no pg_hba.conf entry for host "10.0.0.1", user "App User", database "shop"`, true, "host shop App User <address>/32"},
		{"no login", "28000", `role "App User" is not permitted to log in`, false, `ALTER ROLE "App User" WITH LOGIN`},
		{"no replication", "42501", "must be superuser or replication role to start walsender", true, `ALTER ROLE "App User" WITH REPLICATION`},
		{"42501 on a plain connection", "42501", "permission denied for database shop", false, ""},
		{"no database", "3D000", `database "shop" does not exist`, true, "check the database name"},
		{"too many connections", "53300", "sorry, too many clients already", true, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pgErr := &pgconn.PgError{Severity: "FATAL", Code: tc.code, Message: tc.msg}
			err := ExplainConnect(fmt.Errorf("failed to connect: %w", pgErr), cfg, tc.replication)
			var pe *PrereqError
			if tc.fix == "" {
				if errors.As(err, &pe) {
					t.Fatalf("got a PrereqError %v, want the error unchanged", err)
				}
			} else if !errors.As(err, &pe) || !strings.Contains(pe.Fix, tc.fix) {
				t.Fatalf("got %v, want a PrereqError whose fix contains %q", err, tc.fix)
			}
			var got *pgconn.PgError
			if !errors.As(err, &got) || got.Code != tc.code {
				t.Errorf("the PgError is not kept in %v", err)
			}
		})
	}
}

func TestFailoverSlotSQL(t *testing.T) {
	for _, tc := range []struct{ slot, want string }{
		{"walrelay", `CREATE_REPLICATION_SLOT "walrelay" LOGICAL pgoutput (SNAPSHOT 'nothing', FAILOVER true)`},
		{"orders_1", `CREATE_REPLICATION_SLOT "orders_1" LOGICAL pgoutput (SNAPSHOT 'nothing', FAILOVER true)`},
	} {
		t.Run(tc.slot, func(t *testing.T) {
			if got := failoverSlotSQL(tc.slot); got != tc.want {
				t.Errorf("failoverSlotSQL(%q) = %s, want %s", tc.slot, got, tc.want)
			}
		})
	}
}
