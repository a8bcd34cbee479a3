package replication

import (
	"context"
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
