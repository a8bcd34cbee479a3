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
	"github.com/walrelay/walrelay/replication"
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

// checkTimeColumns prints doctor's line per outbox table on its time column
// (created-at-column): ok, or a WARN with the step that adds it. The relay
// runs without it; status, replay and prune need it.
func checkTimeColumns(ctx context.Context, cfg config.Config, w io.Writer) {
	tables := cfg.Replication().Tables
	if len(tables) == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := replication.Connect(cctx, cfg.PostgresDSN, cfg.PasswordSource())
	if err != nil {
		return // the postgres check reported it
	}
	defer conn.Close(context.Background())
	for _, t := range tables {
		tn, err := replication.ParseTable(t)
		exists := false
		if err == nil {
			exists, err = replication.CheckTimeColumn(cctx, conn, tn.Schema, tn.Name, cfg.CreatedAtColumn)
		}
		switch {
		case err != nil:
			fmt.Fprintf(w, "WARN %-11s %s\n", "time-column", err)
			continue
		case !exists:
			continue // the table check reported it
		}
		fmt.Fprintf(w, "ok   %-11s %s.%s: status, replay and prune select rows by it\n", "time-column", t, cfg.CreatedAtColumn)
	}
}
