// Package migrations holds walrelay's SQL migrations: plain, idempotent SQL
// files, applied in name order by `walrelay migrate`.
//
// Each file is written against the default table public.outbox, so it can be
// applied with psql as it is; Render substitutes another table everywhere the
// text public.outbox occurs, function bodies included.
//
// All returns the default set: the outbox table (001), the walrelay.emit
// function (002) and the time column created_at added to an outbox table
// that lacks it, such as Debezium's (003). Partitioned returns the optional daily-partitioned outbox
// table and its partition functions; apply it before All, which then finds
// the table and leaves it as it is.
package migrations

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strings"
)

//go:embed *.sql partitioned/*.sql
var files embed.FS

// EmitFile is the migration that creates walrelay.emit, which writes
// walrelay's column names: walrelay migrate leaves it out for an existing
// table with other names (Debezium's outbox table).
const EmitFile = "002_emit.sql"

// DefaultTable is the table name the files are written against.
const DefaultTable = "public.outbox"

// LockKey is the advisory lock (pg_advisory_xact_lock) the migrations take to
// serialize concurrent `walrelay migrate` runs against one database.
const LockKey int64 = 8315672063421710848

// CreateSchema returns SQL that creates the schema quotedSchema (an already
// quoted identifier) when missing, under LockKey, to run as one implicit
// transaction before the files: CREATE TABLE does not create its schema.
func CreateSchema(quotedSchema string) string {
	return fmt.Sprintf("SELECT pg_advisory_xact_lock(%d); CREATE SCHEMA IF NOT EXISTS %s", LockKey, quotedSchema)
}

// Migration is one SQL file.
type Migration struct {
	Name string // file name, relative to this directory
	SQL  string
}

// All returns the default migrations in the order they apply.
func All() ([]Migration, error) { return load("*.sql") }

// Partitioned returns the migrations that create the outbox table
// partitioned by day (PARTITION BY RANGE (created_at), primary key
// (id, created_at), a default partition) and the functions
// walrelay.outbox_create_partitions and walrelay.outbox_drop_partitions.
// They are not part of All. To use them, apply Partitioned and then All to
// the same table; the publication must then be created with
// publish_via_partition_root = true.
func Partitioned() ([]Migration, error) { return load("partitioned/*.sql") }

func load(pattern string) ([]Migration, error) {
	names, err := fs.Glob(files, pattern)
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
