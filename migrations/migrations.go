// Package migrations holds walrelay's SQL migrations: plain, idempotent SQL
// files, applied in name order by `walrelay migrate`.
//
// Each file is written against the default table public.outbox, so it can be
// applied with psql as it is; Render substitutes another table.
package migrations

import (
	"embed"
	"io/fs"
	"sort"
	"strings"
)

//go:embed *.sql
var files embed.FS

// DefaultTable is the table name the files are written against.
const DefaultTable = "public.outbox"

// Migration is one SQL file.
type Migration struct {
	Name string
	SQL  string
}

// All returns the migrations in the order they apply.
func All() ([]Migration, error) {
	names, err := fs.Glob(files, "*.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	out := make([]Migration, 0, len(names))
	for _, n := range names {
		b, err := files.ReadFile(n)
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Name: n, SQL: string(b)})
	}
	return out, nil
}

// Render returns m's SQL for the outbox table quotedTable (an already quoted,
// schema-qualified identifier such as "billing"."outbox").
func (m Migration) Render(quotedTable string) string {
	return strings.ReplaceAll(m.SQL, DefaultTable, quotedTable)
}
