package replication

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestNewUserErrorsExplained: connection failures a new setup meets come back as a
// *PrereqError whose fix names what to do; others are wrapped unchanged.
func TestNewUserErrorsExplained(t *testing.T) {
	cfg := &pgconn.Config{User: "App User", Database: "shop"}
	tests := []struct {
		name, code, msg string
		replication     bool
		fix             string // "" when not explained
		settings        []string
	}{
		{"wrong password", "28P01", `password authentication failed for user "App User"`, true, "check the user and password in the Postgres DSN", []string{"DSN"}},
		{"no hba entry", "28000", `no pg_hba.conf entry for host "10.0.0.1", user "App User", database "shop"`, true, "host shop App User <address>/32", nil},
		{"no login", "28000", `role "App User" is not permitted to log in`, false, `ALTER ROLE "App User" WITH LOGIN`, nil},
		{"no replication", "42501", "must be superuser or replication role to start walsender", true, `ALTER ROLE "App User" WITH REPLICATION`, nil},
		{"42501 on a plain connection", "42501", "permission denied for database shop", false, "", nil},
		{"no database", "3D000", `database "shop" does not exist`, true, "check the database name in the Postgres DSN", []string{"DSN"}},
		{"too many connections", "53300", "sorry, too many clients already", true, "", nil},
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
			} else if !slices.Equal(pe.Config, tc.settings) {
				t.Errorf("Config = %q, want %q", pe.Config, tc.settings)
			}
			var got *pgconn.PgError
			if !errors.As(err, &got) || got.Code != tc.code {
				t.Errorf("the PgError is not kept in %v", err)
			}
		})
	}
}
