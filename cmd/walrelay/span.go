package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walrelay/walrelay/cmd/walrelay/internal/config"
	"github.com/walrelay/walrelay/operator"
)

// printSpans prints each outbox table's retained span for walrelay status:
// its oldest row (by the time column), how long ago that was, and the row
// estimate: how far back a replay or a recovery can reach.
func printSpans(ctx context.Context, conn *pgconn.PgConn, cfg config.StatusConfig, w io.Writer) error {
	now, spans, err := operator.ReadOutboxSpans(ctx, conn, cfg.Tables, cfg.CreatedAtColumn)
	for _, sp := range spans {
		if sp.Missing {
			fmt.Fprintf(w, "%-20s %s (does not exist)\n", "outbox_table", sp.Name)
			continue
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
	return err
}
