package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walrelay/walrelay/cmd/walrelay/internal/config"
	"github.com/walrelay/walrelay/replication"
)

// partitionLockTimeout bounds how long dropping a partition waits for its
// lock on the outbox table; inserts queue behind a waiting DROP.
const partitionLockTimeout = "10s"

const pruneUsage = `Usage: walrelay prune --older-than AGE [flags]

Deletes outbox rows whose created_at is older than AGE, --batch-size rows per
transaction, until none is left. For a table partitioned by day (the optional
migrations/partitioned file), it drops the daily partitions whose day ended
before the cutoff with walrelay.outbox_drop_partitions, then deletes the old
rows of the default partition.

Pruning only deletes rows. Each row's event went into the WAL when the row was
inserted, and walrelay reads events from the WAL, not from the table: deleting
a row neither retracts its event nor sends it again. The rows are kept for
inspection and as the only copy to re-send from should the replication slot be
lost; this is why AGE must be at least 1h (a younger row may not have reached
Kafka yet).

AGE is a Go duration (90m, 72h) or days (3d, 1d12h). On a large plain table,
an index on the created_at column keeps each batch cheap.

Exit codes: 0 done, 1 failure (batches already committed stay deleted),
2 invalid usage or configuration.
`

// pruneCommand is `walrelay prune`.
func pruneCommand(ctx context.Context, cfg config.PruneConfig, c *call) int {
	res, err := Prune(ctx, cfg, c.log)
	if err != nil {
		return c.result("prune failed", err, "table", cfg.Table, "rows", res.Rows, "partitions", len(res.Partitions))
	}
	fmt.Fprintln(c.stdout, res.String())
	return ExitOK
}

// PruneResult is what a prune did, or would do with DryRun.
type PruneResult struct {
	Table       string    // schema.name
	Cutoff      time.Time // rows created before it go
	Partitioned bool
	// Partitions are the daily partitions dropped (or to drop), oldest
	// first; PartitionRows their row counts, only with DryRun.
	Partitions    []string
	PartitionRows []int64
	// DefaultPartition is the partitioned table's default partition, if any.
	DefaultPartition string
	// Rows is the number of rows deleted (or to delete) from the plain
	// table or the default partition.
	Rows   int64
	DryRun bool
}

// String is the one-line summary prune prints.
func (r PruneResult) String() string {
	cutoff := r.Cutoff.UTC().Format(time.RFC3339)
	if !r.Partitioned {
		if r.DryRun {
			return fmt.Sprintf("would prune %d rows older than %s from %s (dry run, nothing deleted)", r.Rows, cutoff, r.Table)
		}
		return fmt.Sprintf("pruned %d rows older than %s from %s", r.Rows, cutoff, r.Table)
	}
	parts := make([]string, len(r.Partitions))
	for i, p := range r.Partitions {
		parts[i] = p
		if r.DryRun && i < len(r.PartitionRows) {
			parts[i] = fmt.Sprintf("%s: %d rows", p, r.PartitionRows[i])
		}
	}
	list := ""
	if len(parts) > 0 {
		list = " (" + strings.Join(parts, ", ") + ")"
	}
	def := "no default partition"
	if r.DefaultPartition != "" {
		def = fmt.Sprintf("%d rows from the default partition %s", r.Rows, r.DefaultPartition)
	}
	if r.DryRun {
		return fmt.Sprintf("would drop %d partitions%s and prune %s, older than %s, from %s (dry run, nothing deleted)",
			len(r.Partitions), list, def, cutoff, r.Table)
	}
	return fmt.Sprintf("dropped %d partitions%s and pruned %s, older than %s, from %s",
		len(r.Partitions), list, def, cutoff, r.Table)
}

// Prune deletes the rows of cfg.Table older than cfg.OlderThan (see
// `walrelay prune -h`), logging each batch to log, on a connection of its
// own; it may run concurrently with anything, walrelay included. The cutoff
// is taken from the server's clock. Every batch commits on its own: after an
// error, or when ctx is cancelled (which aborts the batch in progress), the
// result counts what was already done. Invalid configuration is reported as
// a *config.Error.
func Prune(ctx context.Context, cfg config.PruneConfig, log *slog.Logger) (PruneResult, error) {
	res := PruneResult{Table: cfg.Table, DryRun: cfg.DryRun}
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	tn, _ := replication.ParseTable(cfg.Table)
	res.Table = tn.String()

	pcfg, err := pgx.ParseConfig(cfg.PostgresDSN)
	if err != nil {
		return res, &config.Error{Key: "postgres-dsn", Err: err}
	}
	if _, ok := pcfg.RuntimeParams["application_name"]; !ok {
		pcfg.RuntimeParams["application_name"] = "walrelay prune"
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	conn, err := pgx.ConnectConfig(cctx, pcfg)
	cancel()
	if err != nil {
		return res, replication.ExplainConnect(err, &pcfg.Config, false)
	}
	defer conn.Close(context.Background())

	var (
		kind    string
		colType *string
		defNsp  *string
		defRel  *string
	)
	err = conn.QueryRow(ctx, `
		SELECT c.relkind::text,
		       (SELECT a.atttypid::regtype::text FROM pg_attribute a
		         WHERE a.attrelid = c.oid AND a.attname = $2 AND a.attnum > 0 AND NOT a.attisdropped),
		       dn.nspname, d.relname
		  FROM pg_class c
		  LEFT JOIN pg_partitioned_table p ON p.partrelid = c.oid
		  LEFT JOIN pg_class d ON d.oid = p.partdefid
		  LEFT JOIN pg_namespace dn ON dn.oid = d.relnamespace
		 WHERE c.oid = to_regclass($1)`, tn.Quoted(), cfg.CreatedAtColumn).Scan(&kind, &colType, &defNsp, &defRel)
	if errors.Is(err, pgx.ErrNoRows) {
		return res, fmt.Errorf("table %s does not exist; set --table", res.Table)
	}
	if err != nil {
		return res, fmt.Errorf("inspect table %s: %w", res.Table, err)
	}
	switch {
	case kind != "r" && kind != "p":
		return res, fmt.Errorf("%s is not a table (relkind %s)", res.Table, kind)
	case colType == nil:
		return res, fmt.Errorf("table %s has no column %q; set --created-at-column", res.Table, cfg.CreatedAtColumn)
	case *colType != "timestamp with time zone" && *colType != "timestamp without time zone" && *colType != "date":
		return res, fmt.Errorf("column %q of %s is %s, not a timestamp; set --created-at-column", cfg.CreatedAtColumn, res.Table, *colType)
	}
	col := pgx.Identifier{cfg.CreatedAtColumn}.Sanitize()
	olderThan := cfg.OlderThan.Seconds()

	if kind == "r" {
		if err := conn.QueryRow(ctx, "SELECT now() - make_interval(secs => $1::float8)", olderThan).Scan(&res.Cutoff); err != nil {
			return res, fmt.Errorf("read the server clock: %w", err)
		}
		res.Rows, err = pruneRows(ctx, conn, tn.Quoted(), res.Table, col, res.Cutoff, cfg, log)
		return res, err
	}

	res.Partitioned = true
	if err := dropPartitions(ctx, conn, tn, olderThan, cfg.DryRun, &res, log); err != nil {
		return res, err
	}
	if defRel != nil {
		def := replication.TableName{Schema: *defNsp, Name: *defRel}
		res.DefaultPartition = def.String()
		res.Rows, err = pruneRows(ctx, conn, def.Quoted(), def.String(), col, res.Cutoff, cfg, log)
	}
	return res, err
}

// pruneRows deletes (or with DryRun counts) the rows of the plain table
// quoted whose column col is before cutoff, BatchSize rows per transaction,
// and returns how many.
func pruneRows(ctx context.Context, conn *pgx.Conn, quoted, name, col string, cutoff time.Time, cfg config.PruneConfig, log *slog.Logger) (int64, error) {
	if cfg.DryRun {
		var n int64
		q := fmt.Sprintf("SELECT count(*) FROM %s WHERE %s < $1::timestamptz", quoted, col)
		if err := conn.QueryRow(ctx, q, cutoff).Scan(&n); err != nil {
			return 0, fmt.Errorf("count rows of %s: %w", name, err)
		}
		return n, nil
	}
	// ctid is unique within a plain table; the sub-select picks one batch
	// and the outer DELETE finds each row by its ctid (a TID scan).
	q := fmt.Sprintf("DELETE FROM %[1]s WHERE ctid = ANY (ARRAY(SELECT ctid FROM %[1]s WHERE %[2]s < $1::timestamptz LIMIT $2))", quoted, col)
	var total int64
	for {
		tag, err := conn.Exec(ctx, q, cutoff, cfg.BatchSize)
		if err != nil {
			return total, fmt.Errorf("delete from %s after %d rows: %w", name, total, err)
		}
		n := tag.RowsAffected()
		total += n
		if n > 0 {
			log.Info("pruned batch", "table", name, "rows", n, "total", total)
		}
		if n < int64(cfg.BatchSize) {
			return total, nil
		}
	}
}

// dropPartitions drops (or with dryRun lists and counts) the daily
// partitions of tn whose day ended more than olderThan seconds ago, in one
// transaction, and sets res.Cutoff from that transaction's clock.
func dropPartitions(ctx context.Context, conn *pgx.Conn, tn replication.TableName, olderThan float64, dryRun bool, res *PruneResult, log *slog.Logger) error {
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT to_regprocedure('walrelay.outbox_drop_partitions(interval,regclass)') IS NOT NULL
		AND to_regprocedure('walrelay.outbox_expired_partitions(interval,regclass)') IS NOT NULL`).Scan(&ok); err != nil {
		return fmt.Errorf("look up walrelay.outbox_drop_partitions: %w", err)
	}
	if !ok {
		return fmt.Errorf("%s is partitioned, but walrelay.outbox_drop_partitions(interval, regclass) does not exist: "+
			"apply migrations/partitioned/001_outbox_partitioned.sql (with public.outbox replaced by %s), "+
			"or drop old partitions yourself", res.Table, tn.Quoted())
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }() // a no-op after Commit
	if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+partitionLockTimeout+"'"); err != nil {
		return fmt.Errorf("set lock_timeout: %w", err)
	}
	if err := tx.QueryRow(ctx, "SELECT now() - make_interval(secs => $1::float8)", olderThan).Scan(&res.Cutoff); err != nil {
		return fmt.Errorf("read the server clock: %w", err)
	}
	rows, err := tx.Query(ctx, `
		SELECT n.nspname, c.relname
		  FROM walrelay.outbox_expired_partitions(make_interval(secs => $1::float8), to_regclass($2)) e
		  JOIN pg_class c ON c.oid = e.partition
		  JOIN pg_namespace n ON n.oid = c.relnamespace
		 ORDER BY e.upper_bound`, olderThan, tn.Quoted())
	if err != nil {
		return fmt.Errorf("list expired partitions of %s: %w", res.Table, err)
	}
	var parts []replication.TableName
	for rows.Next() {
		var p replication.TableName
		if err := rows.Scan(&p.Schema, &p.Name); err != nil {
			rows.Close()
			return fmt.Errorf("list expired partitions of %s: %w", res.Table, err)
		}
		parts = append(parts, p)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("list expired partitions of %s: %w", res.Table, err)
	}
	if dryRun {
		for _, p := range parts {
			var n int64
			if err := tx.QueryRow(ctx, "SELECT count(*) FROM "+p.Quoted()).Scan(&n); err != nil {
				return fmt.Errorf("count rows of %s: %w", p, err)
			}
			res.Partitions = append(res.Partitions, p.String())
			res.PartitionRows = append(res.PartitionRows, n)
		}
		return nil
	}
	var dropped int
	if err := tx.QueryRow(ctx, "SELECT walrelay.outbox_drop_partitions(make_interval(secs => $1::float8), to_regclass($2))",
		olderThan, tn.Quoted()).Scan(&dropped); err != nil {
		return fmt.Errorf("drop partitions of %s: %w", res.Table, err)
	}
	if dropped != len(parts) {
		return fmt.Errorf("drop partitions of %s: dropped %d partitions, expected %d; rolled back", res.Table, dropped, len(parts))
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("drop partitions of %s: commit: %w", res.Table, err)
	}
	for _, p := range parts {
		res.Partitions = append(res.Partitions, p.String())
		log.Info("dropped partition", "table", res.Table, "partition", p.String())
	}
	return nil
}
