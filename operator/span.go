package operator

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walrelay/walrelay/replication"
)

// TableSpan is an outbox table's retained span, or Missing when the table
// does not exist.
type TableSpan struct {
	replication.OutboxSpan
	Name    replication.TableName
	Missing bool
}

// ReadOutboxSpans reads the server's clock (Now, the reference of the
// spans' age) and the retained span of each of tables (schema.name) by the
// time column timeCol, over conn: how far back a replay or a recovery can
// reach. On an error it returns the spans read before it.
func ReadOutboxSpans(ctx context.Context, conn *pgconn.PgConn, tables []string, timeCol string) (now time.Time, spans []TableSpan, err error) {
	if now, err = replication.ServerTime(ctx, replication.NewQuerier(conn)); err != nil {
		return now, nil, err
	}
	for _, t := range tables {
		tn, err := replication.ParseTable(t)
		if err != nil {
			return now, spans, err
		}
		sp, err := replication.ReadOutboxSpan(ctx, conn, tn.Schema, tn.Name, timeCol)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UndefinedTable {
			spans = append(spans, TableSpan{Name: tn, Missing: true})
			continue
		}
		if err != nil {
			return now, spans, err
		}
		spans = append(spans, TableSpan{OutboxSpan: sp, Name: tn})
	}
	return now, spans, nil
}
