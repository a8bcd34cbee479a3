package operator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walrelay/walrelay/replication"
)

// partitionLockTimeout bounds how long dropping a partition waits for its
// lock on the outbox table; inserts queue behind a waiting DROP.
const partitionLockTimeout = "10s"

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

// MinPruneAge is the smallest OlderThan that Prune accepts. A row younger
// than that may belong to an event walrelay has not relayed yet; the event
// is safe in the WAL while the slot holds it, but the row is the only copy
// left to re-send it from should the slot be lost.
const MinPruneAge = time.Hour

// PruneOptions are what Prune needs.
type PruneOptions struct {
	DSN string
	// PasswordSource supplies the password of every connection to DSN (nil:
	// the DSN's); see replication.PasswordSource.
	PasswordSource replication.PasswordSource
	// Table is the outbox table, schema.name.
	Table string
	// OlderThan is the age beyond which rows go; at least MinPruneAge.
	OlderThan time.Duration
	// BatchSize is the number of rows deleted per transaction.
	BatchSize int
	// TimeColumn is the column compared with the cutoff
	// (DefaultReplayTimeColumn).
	TimeColumn string
	// DryRun counts what would go and changes nothing.
	DryRun bool
	// Slot is walrelay's replication slot: a row goes only once the slot
	// confirmed its transaction (PruneGuard), unless Force.
	Slot  string
	Force bool
	// Delivered finds the last event delivered when the slot is gone
	// (LastDelivered): then rows older than it less RecoveryMargin go. Nil:
	// no row goes while the slot is gone.
	Delivered      *DeliveredOptions
	RecoveryMargin time.Duration
}

// validate checks what Prune relies on.
func (o PruneOptions) validate() error {
	bad := func(option, msg string) error { return &OptionError{Option: option, Err: errors.New(msg)} }
	switch {
	case o.OlderThan < MinPruneAge:
		return bad("OlderThan", "must be at least "+MinPruneAge.String())
	case o.BatchSize < 1:
		return bad("BatchSize", "must be positive")
	case o.RecoveryMargin < 0:
		return bad("RecoveryMargin", "must not be negative")
	}
	if _, err := replication.ParseTable(o.Table); err != nil {
		return &OptionError{Option: "Table", Err: err}
	}
	if err := replication.ValidateIdentifier(o.TimeColumn); err != nil {
		return &OptionError{Option: "TimeColumn", Err: err}
	}
	return nil
}

// Prune deletes the rows of opts.Table older than opts.OlderThan (see
// `walrelay prune -h`), logging each batch to log, on a connection of its
// own; it may run concurrently with anything, walrelay included. The cutoff
// is taken from the server's clock. Every batch commits on its own: after an
// error, or when ctx is cancelled (which aborts the batch in progress), the
// result counts what was already done. Invalid options are reported as a
// *OptionError.
func Prune(ctx context.Context, opts PruneOptions, log *slog.Logger) (PruneResult, error) {
	res := PruneResult{Table: opts.Table, DryRun: opts.DryRun}
	if err := opts.validate(); err != nil {
		return res, err
	}
	tn, _ := replication.ParseTable(opts.Table)
	res.Table = tn.String()

	conn, err := connectPlain(ctx, opts.DSN, "walrelay prune", opts.PasswordSource)
	if err != nil {
		return res, err
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
		 WHERE c.oid = to_regclass($1)`, tn.Quoted(), opts.TimeColumn).Scan(&kind, &colType, &defNsp, &defRel)
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
		return res, &replication.TimeColumnError{Table: res.Table, Column: opts.TimeColumn}
	case *colType != "timestamp with time zone" && *colType != "timestamp without time zone" && *colType != "date":
		return res, &replication.TimeColumnError{Table: res.Table, Column: opts.TimeColumn, Type: *colType}
	}
	col := pgx.Identifier{opts.TimeColumn}.Sanitize()
	olderThan := opts.OlderThan.Seconds()
	g, err := readGuard(ctx, conn, opts, log)
	if err != nil {
		return res, err
	}
	res.Forced, res.KeptWhy = g.force, g.why

	if kind == "r" {
		if err := conn.QueryRow(ctx, "SELECT now() - make_interval(secs => $1::float8)", olderThan).Scan(&res.Cutoff); err != nil {
			return res, fmt.Errorf("read the server clock: %w", err)
		}
		res.Rows, res.Kept, err = pruneRows(ctx, conn, tn.Quoted(), res.Table, col, res.Cutoff, g, opts, log)
		return res, err
	}

	res.Partitioned = true
	if err := dropPartitions(ctx, conn, tn, olderThan, g, opts.DryRun, &res, log); err != nil {
		return res, err
	}
	if defRel != nil {
		def := replication.TableName{Schema: *defNsp, Name: *defRel}
		res.DefaultPartition = def.String()
		var kept int64
		res.Rows, kept, err = pruneRows(ctx, conn, def.Quoted(), def.String(), col, res.Cutoff, g, opts, log)
		res.Kept += kept
	}
	return res, err
}

// guard is the condition prune adds to what it deletes: the rows the
// replication slot confirmed (PruneGuard), or every row with --force.
type guard struct {
	force bool
	pg    PruneGuard
	col   string // the time column
	why   string // why the rows it refuses are kept
}

// readGuard reads the slot and, when it is gone and Kafka settings are
// given, the last delivered event.
func readGuard(ctx context.Context, conn *pgx.Conn, opts PruneOptions, log *slog.Logger) (guard, error) {
	if opts.Force {
		return guard{force: true}, nil
	}
	pg, err := ReadPruneGuard(ctx, conn, opts.Slot)
	if err != nil {
		return guard{}, err
	}
	pg.Margin = opts.RecoveryMargin
	hint := ""
	if pg.NeedsDelivered() {
		if opts.Delivered != nil {
			last, err := LastDelivered(ctx, *opts.Delivered)
			if err != nil {
				return guard{}, fmt.Errorf("find the last event delivered to Kafka (the slot is gone): %w", err)
			}
			pg.Delivered = &last
		} else {
			hint = " (if walrelay uses another slot, set --slot; else give --kafka-brokers and the topic settings of walrelay run, so that prune finds the last event delivered)"
		}
	}
	return guard{pg: pg, col: opts.TimeColumn, why: pg.Reason() + hint}, nil
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
func pruneRows(ctx context.Context, conn *pgx.Conn, quoted, name, col string, cutoff time.Time, g guard, opts PruneOptions, log *slog.Logger) (pruned, kept int64, err error) {
	count := func(keep bool) (int64, error) {
		var n int64
		cond, args := g.where(keep, 2, cutoff)
		q := fmt.Sprintf("SELECT count(*) FROM %s WHERE %s < $1::timestamptz AND %s", quoted, col, cond)
		if err := conn.QueryRow(ctx, q, args...).Scan(&n); err != nil {
			return 0, fmt.Errorf("count rows of %s: %w", name, err)
		}
		return n, nil
	}
	if opts.DryRun {
		if pruned, err = count(false); err == nil && !g.force {
			kept, err = count(true)
		}
		return pruned, kept, err
	}
	// ctid is unique within a plain table; the sub-select picks one batch
	// and the outer DELETE finds each row by its ctid (a TID scan).
	cond, args := g.where(false, 3, cutoff, opts.BatchSize)
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
		if n < int64(opts.BatchSize) {
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
