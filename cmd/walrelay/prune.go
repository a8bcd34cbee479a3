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
	"github.com/walrelay/walrelay/relay"
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
inspection and as the only copy to re-send from (walrelay replay) should the
replication slot be lost; this is why AGE must be at least 1h.

The guard: however old, a row goes only once --slot has confirmed its
transaction (its xmin is older than the slot's catalog_xmin, which Postgres
advances only past positions walrelay confirmed after Kafka acknowledged
them). While the slot is missing or invalidated, rows go only when they are
older than the last event delivered to Kafka less --recovery-margin, which
prune finds with --kafka-brokers and the topic settings of walrelay run;
without them no row goes. prune says how many old rows it kept and why;
--force deletes them too. A daily partition is dropped only when every row in
it may go (checked under its lock, partition by partition).

AGE is a Go duration (90m, 72h) or days (3d, 1d12h). On a large plain table,
an index on the created_at column keeps each batch cheap.

Exit codes: 0 done, 1 failure (batches already committed stay deleted),
2 invalid usage or configuration.
`

// pruneCommand is `walrelay prune`.
func pruneCommand(ctx context.Context, cfg config.PruneConfig, c *call) int {
	res, err := Prune(ctx, cfg, c.log)
	if err != nil {
		if err, isConfig := settingError(err); isConfig {
			c.invalid(err)
			return ExitConfig
		}
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
	// Kept counts the rows older than the cutoff that the guard kept (or
	// would keep), KeptPartitions the expired partitions kept for holding
	// some of them, and KeptWhy says why. Forced: the guard was off.
	Kept           int64
	KeptPartitions []string
	KeptWhy        string
	Forced         bool
}

// String is the one-line summary prune prints.
func (r PruneResult) String() string {
	return r.done() + r.kept()
}

// kept is what the summary says of the rows the guard kept.
func (r PruneResult) kept() string {
	switch {
	case r.Forced:
		return " (--force: unconfirmed rows included)"
	case r.Kept == 0:
		return ""
	}
	verb, parts := "kept", ""
	if r.DryRun {
		verb = "would keep"
	}
	if len(r.KeptPartitions) > 0 {
		parts = fmt.Sprintf(" (and the partitions holding them: %s)", strings.Join(r.KeptPartitions, ", "))
	}
	return fmt.Sprintf("; %s %d rows older than the cutoff%s: %s; --force deletes them", verb, r.Kept, parts, r.KeptWhy)
}

// done is the summary of what went.
func (r PruneResult) done() string {
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
	g, err := readGuard(ctx, conn, cfg, log)
	if err != nil {
		return res, err
	}
	res.Forced, res.KeptWhy = g.force, g.why

	if kind == "r" {
		if err := conn.QueryRow(ctx, "SELECT now() - make_interval(secs => $1::float8)", olderThan).Scan(&res.Cutoff); err != nil {
			return res, fmt.Errorf("read the server clock: %w", err)
		}
		res.Rows, res.Kept, err = pruneRows(ctx, conn, tn.Quoted(), res.Table, col, res.Cutoff, g, cfg, log)
		return res, err
	}

	res.Partitioned = true
	if err := dropPartitions(ctx, conn, tn, olderThan, g, cfg.DryRun, &res, log); err != nil {
		return res, err
	}
	if defRel != nil {
		def := replication.TableName{Schema: *defNsp, Name: *defRel}
		res.DefaultPartition = def.String()
		var kept int64
		res.Rows, kept, err = pruneRows(ctx, conn, def.Quoted(), def.String(), col, res.Cutoff, g, cfg, log)
		res.Kept += kept
	}
	return res, err
}

// guard is the condition prune adds to what it deletes: the rows the
// replication slot confirmed (relay.PruneGuard), or every row with --force.
type guard struct {
	force bool
	pg    relay.PruneGuard
	col   string // the time column
	why   string // why the rows it refuses are kept
}

// readGuard reads the slot and, when it is gone and Kafka settings are
// given, the last delivered event.
func readGuard(ctx context.Context, conn *pgx.Conn, cfg config.PruneConfig, log *slog.Logger) (guard, error) {
	if cfg.Force {
		return guard{force: true}, nil
	}
	pg, err := relay.ReadPruneGuard(ctx, conn, cfg.Slot)
	if err != nil {
		return guard{}, err
	}
	pg.Margin = cfg.RecoveryMargin
	hint := ""
	if pg.NeedsDelivered() {
		opts, ok, err := cfg.DeliveredOptions(log)
		switch {
		case err != nil:
			return guard{}, err
		case ok:
			last, err := relay.LastDelivered(ctx, opts)
			if err != nil {
				return guard{}, fmt.Errorf("find the last event delivered to Kafka (the slot is gone): %w", err)
			}
			pg.Delivered = &last
		default:
			hint = " (if walrelay uses another slot, set --slot; else give --kafka-brokers and the topic settings of walrelay run, so that prune finds the last event delivered)"
		}
	}
	return guard{pg: pg, col: cfg.CreatedAtColumn, why: pg.Reason() + hint}, nil
}

// where returns the SQL condition of the rows the guard lets go (with keep,
// of those it keeps), its arguments numbered from $first, and args with
// them appended.
func (g guard) where(keep bool, first int, args ...any) (string, []any) {
	cond, more := "TRUE", []any(nil)
	if !g.force {
		cond, more = g.pg.Condition(g.col, first)
	}
	cond = "coalesce((" + cond + "), false)"
	if keep {
		cond = "NOT " + cond
	}
	return cond, append(args, more...)
}

// pruneRows deletes (or with DryRun counts) the rows of the plain table
// quoted whose column col is before cutoff and that g lets go, BatchSize
// rows per transaction, and returns how many, and how many rows before
// cutoff g kept.
func pruneRows(ctx context.Context, conn *pgx.Conn, quoted, name, col string, cutoff time.Time, g guard, cfg config.PruneConfig, log *slog.Logger) (pruned, kept int64, err error) {
	count := func(keep bool) (int64, error) {
		var n int64
		cond, args := g.where(keep, 2, cutoff)
		q := fmt.Sprintf("SELECT count(*) FROM %s WHERE %s < $1::timestamptz AND %s", quoted, col, cond)
		if err := conn.QueryRow(ctx, q, args...).Scan(&n); err != nil {
			return 0, fmt.Errorf("count rows of %s: %w", name, err)
		}
		return n, nil
	}
	if cfg.DryRun {
		if pruned, err = count(false); err == nil && !g.force {
			kept, err = count(true)
		}
		return pruned, kept, err
	}
	// ctid is unique within a plain table; the sub-select picks one batch
	// and the outer DELETE finds each row by its ctid (a TID scan).
	cond, args := g.where(false, 3, cutoff, cfg.BatchSize)
	q := fmt.Sprintf("DELETE FROM %[1]s WHERE ctid = ANY (ARRAY(SELECT ctid FROM %[1]s WHERE %[2]s < $1::timestamptz AND %[3]s LIMIT $2))",
		quoted, col, cond)
	for {
		tag, err := conn.Exec(ctx, q, args...)
		if err != nil {
			return pruned, 0, fmt.Errorf("delete from %s after %d rows: %w", name, pruned, err)
		}
		n := tag.RowsAffected()
		pruned += n
		if n > 0 {
			log.Info("pruned batch", "table", name, "rows", n, "total", pruned)
		}
		if n < int64(cfg.BatchSize) {
			break
		}
	}
	if !g.force {
		kept, err = count(true)
	}
	return pruned, kept, err
}

// dropPartitions drops (or with dryRun lists and counts) the daily
// partitions of tn whose day ended more than olderThan seconds ago, one by
// one, each in a transaction that locks it and checks that g lets every row
// of it go first (a partition with a row g keeps stays, and its rows count
// as kept), and sets res.Cutoff from the server's clock.
func dropPartitions(ctx context.Context, conn *pgx.Conn, tn replication.TableName, olderThan float64, g guard, dryRun bool, res *PruneResult, log *slog.Logger) error {
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
	if err := conn.QueryRow(ctx, "SELECT now() - make_interval(secs => $1::float8)", olderThan).Scan(&res.Cutoff); err != nil {
		return fmt.Errorf("read the server clock: %w", err)
	}
	rows, err := conn.Query(ctx, `
		SELECT n.nspname, c.relname
		  FROM walrelay.outbox_expired_partitions(make_interval(secs => $1::float8), to_regclass($2)) e
		  JOIN pg_class c ON c.oid = e.partition
		  JOIN pg_namespace n ON n.oid = c.relnamespace
		 ORDER BY e.upper_bound`, olderThan, tn.Quoted())
	if err != nil {
		return fmt.Errorf("list expired partitions of %s: %w", res.Table, err)
	}
	parts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (replication.TableName, error) {
		var p replication.TableName
		err := r.Scan(&p.Schema, &p.Name)
		return p, err
	})
	if err != nil {
		return fmt.Errorf("list expired partitions of %s: %w", res.Table, err)
	}
	for _, p := range parts {
		if err := dropPartition(ctx, conn, p, g, dryRun, res, log); err != nil {
			return err
		}
	}
	return nil
}

// dropPartition drops partition p (or with dryRun counts its rows) unless
// g keeps a row of it, in one transaction holding its lock from the check to
// the drop.
func dropPartition(ctx context.Context, conn *pgx.Conn, p replication.TableName, g guard, dryRun bool, res *PruneResult, log *slog.Logger) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }() // a no-op after Commit
	if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '"+partitionLockTimeout+"'"); err != nil {
		return fmt.Errorf("set lock_timeout: %w", err)
	}
	if !dryRun {
		// Dropping a partition takes this lock anyway; taken first, no row
		// arrives between the check and the drop.
		if _, err := tx.Exec(ctx, "LOCK TABLE "+p.Quoted()+" IN ACCESS EXCLUSIVE MODE"); err != nil {
			return fmt.Errorf("lock partition %s: %w", p, err)
		}
	}
	var rowsIn, kept int64
	cond, args := g.where(true, 1)
	q := fmt.Sprintf("SELECT count(*), count(*) FILTER (WHERE %s) FROM %s", cond, p.Quoted())
	if err := tx.QueryRow(ctx, q, args...).Scan(&rowsIn, &kept); err != nil {
		return fmt.Errorf("check the rows of partition %s: %w", p, err)
	}
	if kept > 0 {
		res.Kept += kept
		res.KeptPartitions = append(res.KeptPartitions, p.String())
		log.Info("kept partition", "partition", p.String(), "rows", rowsIn, "kept_rows", kept, "why", g.why)
		return nil
	}
	res.Partitions = append(res.Partitions, p.String())
	if dryRun {
		res.PartitionRows = append(res.PartitionRows, rowsIn)
		return nil
	}
	if _, err := tx.Exec(ctx, "DROP TABLE "+p.Quoted()); err != nil {
		return fmt.Errorf("drop partition %s: %w", p, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("drop partition %s: commit: %w", p, err)
	}
	log.Info("dropped partition", "table", res.Table, "partition", p.String(), "rows", rowsIn)
	return nil
}
