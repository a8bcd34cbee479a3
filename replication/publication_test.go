package replication

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walrelay/walrelay/test/pgtest"
)

// TestPublicationWithoutInsertsRefused: an existing publication that would not carry
// every outbox insert whole (inserts not published, a row filter, a column list without
// a mapped column, the table missing, a partitioned outbox published under its
// partitions' names) is refused with a fix, by Open and by Diagnose alike; publications
// that carry them (FOR ALL TABLES included) are accepted. Before this check only a
// missing table was refused: the others started and silently dropped events.
func TestPublicationWithoutInsertsRefused(t *testing.T) {
	// The shared database with names of its own: CREATE DATABASE writes megabytes of
	// WAL, which other packages' tests running at the same time would see.
	dsn := pgtest.DSN(t)
	var rnd [3]byte
	_, _ = rand.Read(rnd[:])
	n := "pubcheck_" + hex.EncodeToString(rnd[:])
	ctx := context.Background()
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(ctx) }) // after the drops below
	exec := func(sql string) {
		t.Helper()
		sql = strings.ReplaceAll(strings.ReplaceAll(sql, `"p"`, `"`+n+`"`), "public.", "public."+n+"_")
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	t.Cleanup(func() {
		for _, sql := range []string{`DROP PUBLICATION IF EXISTS "p"`, `DROP TABLE IF EXISTS public.outbox, public.other, public.pbox`} {
			exec(sql)
		}
	})
	exec(`CREATE TABLE public.outbox (id uuid PRIMARY KEY, aggregate_type text NOT NULL, aggregate_id text NOT NULL,
		event_type text NOT NULL, payload jsonb, headers jsonb NOT NULL DEFAULT '{}', created_at timestamptz NOT NULL DEFAULT now())`)
	exec(`CREATE TABLE public.other (id int PRIMARY KEY)`)
	exec(`CREATE TABLE public.pbox (id uuid, aggregate_type text, aggregate_id text, event_type text, payload jsonb,
		headers jsonb, created_at timestamptz NOT NULL) PARTITION BY RANGE (created_at)`)
	exec(`CREATE TABLE public.pbox_default PARTITION OF public.pbox DEFAULT`)
	mapped := []string{"id", "aggregate_type", "aggregate_id", "event_type", "payload", "headers"}

	tests := []struct {
		name   string
		create string // CREATE PUBLICATION p ...
		table  string
		want   []string // in the problem and fix; nil: accepted
	}{
		{"publish update only", "FOR TABLE public.outbox WITH (publish = 'update, delete')", "public.outbox",
			[]string{"does not publish inserts", `ALTER PUBLICATION "p" SET (publish = 'insert')`}},
		{"row filter", "FOR TABLE public.outbox WHERE (aggregate_type <> 'internal')", "public.outbox",
			[]string{"row filter", "internal", `ALTER PUBLICATION "p" DROP TABLE "public"."outbox"; ALTER PUBLICATION "p" ADD TABLE "public"."outbox"`}},
		{"column list without payload", "FOR TABLE public.outbox (id, aggregate_type, aggregate_id, event_type, headers)", "public.outbox",
			[]string{"column list", `"payload"`, `ADD TABLE "public"."outbox"`}},
		{"table missing", "FOR TABLE public.other", "public.outbox",
			[]string{"does not include table public.outbox", `ALTER PUBLICATION "p" ADD TABLE "public"."outbox";`}},
		{"partitioned outbox without publish_via_partition_root", "FOR TABLE public.pbox", "public.pbox",
			[]string{"partitions' names", "publish_via_partition_root = true"}},
		{"column list with every mapped column", "FOR TABLE public.outbox (id, aggregate_type, aggregate_id, event_type, payload, headers)", "public.outbox", nil},
		{"publish insert and more", "FOR TABLE public.outbox WITH (publish = 'insert, update')", "public.outbox", nil},
		{"FOR ALL TABLES", "FOR ALL TABLES", "public.outbox", nil},
		{"partitioned outbox via its root", "FOR TABLE public.pbox WITH (publish_via_partition_root = true)", "public.pbox", nil},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exec(`DROP PUBLICATION IF EXISTS "p"`)
			exec(`CREATE PUBLICATION "p" ` + tt.create)
			slot := n + "_" + string(rune('a'+i))
			table := strings.Replace(tt.table, "public.", "public."+n+"_", 1)
			cfg := Config{DSN: dsn, Slot: slot, Publication: n, Tables: []string{table},
				Columns: map[string][]string{table: mapped}, NoCreateSlot: true}
			c, err := Open(ctx, cfg)
			openErr := err
			var pe *PrereqError
			if tt.want == nil {
				// Accepted: the next check is the (missing) slot.
				if !errors.As(err, &pe) || pe.Check != "slot" {
					t.Fatalf("Open: %v, want the publication accepted (and the missing slot refused)", err)
				}
			} else {
				if c != nil {
					_ = c.Close(ctx)
				}
				if !errors.As(err, &pe) || pe.Check != "publication" {
					t.Fatalf("Open: %v, want a publication PrereqError", err)
				}
				for _, w := range tt.want {
					w = strings.ReplaceAll(strings.ReplaceAll(w, `"p"`, `"`+n+`"`), `"public"."`, `"public"."`+n+"_")
					w = strings.ReplaceAll(w, "table public.", "table public."+n+"_")
					if !strings.Contains(err.Error(), w) {
						t.Errorf("Open error %q does not contain %q", err, w)
					}
				}
				t.Logf("refused: %v", err)
			}
			findings, err := Diagnose(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			var pub *Finding
			for i := range findings {
				if findings[i].Check == "publication" {
					pub = &findings[i]
				}
			}
			switch {
			case pub == nil:
				t.Fatalf("Diagnose: no publication finding in %+v", findings)
			case tt.want == nil && !pub.OK:
				t.Errorf("Diagnose: %s, want ok", pub.Note)
			case tt.want != nil && (pub.OK || pub.Note != openErr.Error()):
				t.Errorf("Diagnose: ok=%v %q, want the same fix as Open", pub.OK, pub.Note)
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
