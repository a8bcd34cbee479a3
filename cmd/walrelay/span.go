package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walrelay/walrelay/cmd/walrelay/internal/config"
	"github.com/walrelay/walrelay/relay"
	"github.com/walrelay/walrelay/replication"
)

// printSpans prints each outbox table's retained span for walrelay status:
// its oldest row (by the time column), how long ago that was, and the row
// estimate: how far back a replay or a recovery can reach.
func printSpans(ctx context.Context, conn *pgconn.PgConn, cfg config.StatusConfig, w io.Writer) error {
	var now time.Time
	res := conn.ExecParams(ctx, "SELECT (extract(epoch FROM now()) * 1000000)::int8", nil, nil, nil, nil).Read()
	if res.Err != nil {
		return fmt.Errorf("read the server clock: %w", res.Err)
	}
	us, err := strconv.ParseInt(string(res.Rows[0][0]), 10, 64)
	if err != nil {
		return fmt.Errorf("read the server clock: %w", err)
	}
	now = time.UnixMicro(us).UTC()
	for _, t := range cfg.Tables {
		tn, err := replication.ParseTable(t)
		if err != nil {
			return err
		}
		sp, err := relay.ReadOutboxSpan(ctx, conn, tn.Schema, tn.Name, cfg.CreatedAtColumn)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UndefinedTable {
			fmt.Fprintf(w, "%-20s %s (does not exist)\n", "outbox_table", tn)
			continue
		}
		if err != nil {
			return err
		}
		oldest, span := "(empty: nothing to replay)", "0s"
		if !sp.Empty {
			oldest = sp.Oldest.Format(time.RFC3339)
			span = now.Sub(sp.Oldest).Round(time.Second).String()
		}
		rows := strconv.FormatInt(sp.Rows, 10)
		if !sp.RowsKnown {
			rows = "unknown (never analyzed)"
		}
		fmt.Fprintf(w, "%-20s %s\n", "outbox_table", sp.Table)
		fmt.Fprintf(w, "%-20s %s\n", "oldest_row", oldest)
		fmt.Fprintf(w, "%-20s %s\n", "retained_span", span)
		fmt.Fprintf(w, "%-20s %s\n", "rows_estimate", rows)
	}
	return nil
}
