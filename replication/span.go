package replication

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// OutboxSpan is what an outbox table holds: how far back a replay can
// reach.
type OutboxSpan struct {
	Table string
	// Oldest is the oldest row's time column (zero when the table is
	// empty).
	Oldest time.Time
	Empty  bool
	// Rows is Postgres' estimate of the rows (pg_class.reltuples, over the
	// partitions); RowsKnown is false before the table was ever analyzed.
	Rows      int64
	RowsKnown bool
}

// ReadOutboxSpan reads table's (schema.name) span over conn: the oldest
// row by timeCol (cheap with an index on it, or for a table partitioned by
// it; otherwise a scan) and the row estimate. The relay exports it as
// metrics, walrelay status prints it.
func ReadOutboxSpan(ctx context.Context, conn *pgconn.PgConn, schema, name, timeCol string) (OutboxSpan, error) {
	quoted := pgx.Identifier{schema, name}.Sanitize()
	tc := pgx.Identifier{timeCol}.Sanitize()
	sp := OutboxSpan{Table: schema + "." + name}
	q := fmt.Sprintf(`SELECT (SELECT (extract(epoch FROM %[1]s::timestamptz) * 1000000)::int8 FROM %[2]s ORDER BY %[1]s LIMIT 1),
		(SELECT coalesce(sum(greatest(c.reltuples, 0)), 0)::int8 FROM pg_class c
		  WHERE c.oid = to_regclass($1) OR c.oid IN (SELECT relid FROM pg_partition_tree(to_regclass($1)))),
		(SELECT bool_or(c.reltuples >= 0) FROM pg_class c
		  WHERE c.relkind = 'r' AND (c.oid = to_regclass($1) OR c.oid IN (SELECT relid FROM pg_partition_tree(to_regclass($1)))))`, tc, quoted)
	res := conn.ExecParams(ctx, q, [][]byte{[]byte(quoted)}, nil, nil, nil).Read()
	var pgErr *pgconn.PgError
	if errors.As(res.Err, &pgErr) && pgErr.Code == "42703" { // undefined_column: only timeCol is named
		return sp, &TimeColumnError{Table: sp.Table, Column: timeCol}
	}
	if res.Err != nil {
		return sp, fmt.Errorf("read the span of outbox table %s: %w", sp.Table, res.Err)
	}
	row := res.Rows[0]
	if row[0] == nil {
		sp.Empty = true
	} else {
		us, err := strconv.ParseInt(string(row[0]), 10, 64)
		if err != nil {
			return sp, fmt.Errorf("outbox table %s: oldest row time %q: %w", sp.Table, row[0], err)
		}
		sp.Oldest = time.UnixMicro(us).UTC()
	}
	n, err := strconv.ParseInt(string(row[1]), 10, 64)
	if err != nil {
		return sp, fmt.Errorf("outbox table %s: row estimate %q: %w", sp.Table, row[1], err)
	}
	sp.Rows, sp.RowsKnown = n, string(row[2]) == "t"
	return sp, nil
}

// ServerTime reads the server's clock through q: the reference of a span's
// age, whatever the local clock says.
func ServerTime(ctx context.Context, q Querier) (time.Time, error) {
	rows, err := q.queryRows(ctx, "SELECT (extract(epoch FROM now()) * 1000000)::int8")
	if err != nil {
		return time.Time{}, fmt.Errorf("read the server clock: %w", err)
	}
	if len(rows) != 1 || len(rows[0]) != 1 {
		return time.Time{}, fmt.Errorf("read the server clock: unexpected result")
	}
	us, err := strconv.ParseInt(string(rows[0][0]), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("read the server clock: %w", err)
	}
	return time.UnixMicro(us).UTC(), nil
}

// DefaultTimeColumn is the outbox table's time column by default, the one
// walrelay migrate creates (and adds to a table that lacks it, such as
// Debezium's outbox table).
const DefaultTimeColumn = "created_at"

// TimeColumnError is an outbox table without the time column that the
// safety net (status' span, replay, prune) selects rows by (Type ""), or
// with one that is not a timestamp. walrelay run relays such a table all
// the same. Its text ends with the one step that fixes it.
type TimeColumnError struct {
	Table, Column string
	Type          string // the column's type when it is not a timestamp
}

func (e *TimeColumnError) Error() string {
	if e.Type != "" {
		return fmt.Sprintf("column %q of outbox table %s is %s, not a timestamp; fix: name the table's timestamp column as its time column", e.Column, e.Table, e.Type)
	}
	add := fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s timestamptz NOT NULL DEFAULT now()", e.Table, pgx.Identifier{e.Column}.Sanitize())
	if e.Column == DefaultTimeColumn {
		add = "walrelay migrate of table " + e.Table + " adds it (" + DefaultTimeColumn + " timestamptz NOT NULL DEFAULT now()"
	} else {
		add += " adds it ("
	}
	return fmt.Sprintf("outbox table %s has no column %q, which status, replay and prune select rows by (Debezium's outbox table has none); fix: %s: instant on Postgres 11+, rows already there get the time of the change, Debezium's outbox router ignores the column), or name the table's timestamp column as its time column",
		e.Table, e.Column, add)
}

// Fields names the field that chooses the time column.
func (e *TimeColumnError) Fields() []string { return []string{"replication.TimeColumnError.Column"} }

// CheckTimeColumn reads from the catalog whether table (schema.name) has
// the time column timeCol, of a timestamp type (or date): nil when it has,
// a *TimeColumnError when not; exists is false when the table does not
// exist (the table check reports that). Unlike ReadOutboxSpan, it reads no
// row.
func CheckTimeColumn(ctx context.Context, conn *pgconn.PgConn, schema, name, timeCol string) (exists bool, err error) {
	quoted := pgx.Identifier{schema, name}.Sanitize()
	res := conn.ExecParams(ctx, `SELECT to_regclass($1) IS NOT NULL,
		(SELECT a.atttypid::regtype::text FROM pg_attribute a
		  WHERE a.attrelid = to_regclass($1) AND a.attname = $2 AND a.attnum > 0 AND NOT a.attisdropped)`,
		[][]byte{[]byte(quoted), []byte(timeCol)}, nil, nil, nil).Read()
	if res.Err != nil {
		return false, fmt.Errorf("read the columns of outbox table %s.%s: %w", schema, name, res.Err)
	}
	row := res.Rows[0]
	switch typ := string(row[1]); {
	case string(row[0]) != "t":
		return false, nil
	case row[1] == nil:
		return true, &TimeColumnError{Table: schema + "." + name, Column: timeCol}
	case typ != "timestamp with time zone" && typ != "timestamp without time zone" && typ != "date":
		return true, &TimeColumnError{Table: schema + "." + name, Column: timeCol, Type: typ}
	}
	return true, nil
}
