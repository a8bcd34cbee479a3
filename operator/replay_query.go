package operator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/replication"
)

// outboxTable is one outbox table as a replay reads it: its columns as a
// Relation message lists them, and the time column that orders the rows.
type outboxTable struct {
	index    int    // in the decoder configuration's tables
	name     string // schema.name
	relName  string // name without schema
	quoted   string
	columns  decoder.Columns
	cols     []decoder.RowColumn
	colTypes map[string]string // column name -> format_type
	timeCol  string
	timeTZ   bool // timestamptz (else timestamp without time zone, taken as UTC)
}

// Column types a time column may have.
const (
	typeTimestamptz = "timestamp with time zone"
	typeTimestamp   = "timestamp without time zone"
)

// inspectTable reads table t's columns in the order a Relation message lists
// them (pgoutput leaves out dropped and generated columns), and checks the
// time column ("": none).
func inspectTable(ctx context.Context, conn *pgx.Conn, index int, t decoder.Table, timeCol string) (*outboxTable, error) {
	name := t.Schema + "." + t.Name
	quoted := pgx.Identifier{t.Schema, t.Name}.Sanitize()
	ot := &outboxTable{index: index, name: name, relName: t.Name, quoted: quoted, columns: t.Columns, timeCol: timeCol,
		colTypes: map[string]string{}}
	if ot.columns.ID == "" {
		ot.columns = decoder.DefaultColumns()
	}
	var kind *string
	if err := conn.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)`, quoted).Scan(&kind); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("look up outbox table %s: %w", name, err)
	}
	if kind == nil {
		return nil, &MissingTableError{Table: name}
	}
	if *kind != "r" && *kind != "p" {
		return nil, fmt.Errorf("%s is not a table (relkind %s)", name, *kind)
	}
	rows, err := conn.Query(ctx, `SELECT attname::text, atttypid::int8, format_type(atttypid, atttypmod) FROM pg_attribute
		WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped AND attgenerated = '' ORDER BY attnum`, quoted)
	if err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", name, err)
	}
	for rows.Next() {
		var c decoder.RowColumn
		var oid int64
		var typ string
		if err := rows.Scan(&c.Name, &oid, &typ); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read the columns of %s: %w", name, err)
		}
		c.Type = uint32(oid)
		ot.cols = append(ot.cols, c)
		ot.colTypes[c.Name] = typ
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", name, err)
	}
	switch typ, ok := ot.colTypes[timeCol]; {
	case timeCol == "": // rows found by id only (redrive)
	case !ok:
		return nil, &ReplayTimeColumnError{Table: name, Column: timeCol}
	case typ == typeTimestamptz:
		ot.timeTZ = true
	case typ == typeTimestamp:
	default:
		return nil, &ReplayTimeColumnError{Table: name, Column: timeCol, Type: typ}
	}
	for _, c := range []string{ot.columns.ID, ot.columns.AggregateType, ot.columns.AggregateID, ot.columns.EventType} {
		if _, ok := ot.colTypes[c]; !ok {
			return nil, &decoder.MissingColumnError{Table: name, Column: c}
		}
	}
	return ot, nil
}

// MissingTableError is an outbox table a replay or a redrive names that does
// not exist.
type MissingTableError struct{ Table string }

func (e *MissingTableError) Error() string {
	return fmt.Sprintf("outbox table %s does not exist; fix: name the table walrelay run relays (schema.name), or create it with walrelay migrate", e.Table)
}

// Fields names the field of the outbox tables.
func (e *MissingTableError) Fields() []string { return []string{"operator.Table"} }

// ReplayTimeColumnError is a time column a table lacks (Type "") or that is
// not a timestamp.
type ReplayTimeColumnError struct {
	Table, Column, Type string
}

func (e *ReplayTimeColumnError) Error() string {
	return (&replication.TimeColumnError{Table: e.Table, Column: e.Column, Type: e.Type}).Error()
}

// Fields names the field that chooses the time column.
func (e *ReplayTimeColumnError) Fields() []string { return []string{"operator.TimeColumn"} }

func (t *outboxTable) ident(col string) string { return pgx.Identifier{col}.Sanitize() }

// utc is the time column as timestamptz (a timestamp without time zone is
// taken as UTC, as the decoder takes it).
func (t *outboxTable) utc() string {
	if t.timeTZ {
		return t.ident(t.timeCol)
	}
	return t.ident(t.timeCol) + " AT TIME ZONE 'UTC'"
}

// bound is a timestamptz parameter compared with the time column: for a
// column without time zone, converted to UTC wall time (so an index on the
// column serves).
func (t *outboxTable) bound(param string) string {
	if t.timeTZ {
		return param + "::timestamptz"
	}
	return "(" + param + "::timestamptz AT TIME ZONE 'UTC')"
}

// where returns the selection's conditions (with from, the order value to
// resume at; "" none) and their arguments.
func (t *outboxTable) where(sel ReplaySelection, from string) (string, []any) {
	var conds []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	tc := t.ident(t.timeCol)
	if !sel.Since.IsZero() {
		conds = append(conds, tc+" >= "+t.bound(arg(sel.Since)))
	}
	if !sel.Until.IsZero() {
		conds = append(conds, tc+" < "+t.bound(arg(sel.Until)))
	}
	if from != "" {
		conds = append(conds, tc+" >= "+arg(from)+"::text::"+t.colTypes[t.timeCol])
	}
	for _, f := range []struct {
		col  string
		vals []string
	}{{t.columns.ID, sel.IDs}, {t.columns.AggregateType, sel.AggregateTypes}, {t.columns.AggregateID, sel.AggregateIDs},
		{t.columns.EventType, sel.EventTypes}} {
		if len(f.vals) > 0 {
			// Compared in the column's own type, so that its index serves.
			conds = append(conds, fmt.Sprintf("%s = ANY(%s::text[]::%s[])", t.ident(f.col), arg(f.vals), t.colTypes[f.col]))
		}
	}
	if len(conds) == 0 {
		return "", nil
	}
	return " WHERE " + strings.Join(conds, " AND "), args
}

// Leading columns of the cursor's rows, before the table's own.
const (
	metaTime  = iota // the record time, microseconds since 1970 (commit time when known)
	metaOrder        // the time column's text: the order value of resume tokens
	metaCols
)

// cursorSQL is the query of the replay's cursor over the table: rows in the
// time column's order; rows of the same time (one transaction's) by the
// inserting transaction (xmin), then in the order the transaction inserted
// them (cmin, its command counter), then by their place in the heap. Not
// the heap's order alone: an insert may land on an earlier page that a
// delete and VACUUM left free, ahead of the transaction's earlier rows.
// Limits (docs/replay.md): the rows of one multi-row INSERT share their
// cmin and fall back to heap order; rows inserted under a savepoint carry
// the subtransaction's own xid and follow the transaction's other rows of
// that time.
func (t *outboxTable) cursorSQL(sel ReplaySelection, from string, commitTS bool) (string, []any) {
	recTime := t.utc()
	if commitTS {
		recTime = "coalesce(pg_xact_commit_timestamp(xmin), " + recTime + ")"
	}
	cols := make([]string, len(t.cols))
	for i, c := range t.cols {
		cols[i] = t.ident(c.Name)
	}
	where, args := t.where(sel, from)
	tc := t.ident(t.timeCol)
	// The time column is qualified in ORDER BY: its text is an output
	// column of the same name.
	return fmt.Sprintf("SELECT (extract(epoch FROM %s) * 1000000)::int8::text, %s::text, %s FROM %s%s ORDER BY %s.%s, xmin::text::int8, cmin::text::int8, tableoid, ctid",
		recTime, tc, strings.Join(cols, ", "), t.quoted, where, t.quoted, tc), args
}

// tablePlan is what a replay of the table's selected rows covers.
type tablePlan struct {
	rows           int64
	oldest, newest time.Time
}

// plan counts the selected rows and their time span.
func (t *outboxTable) plan(ctx context.Context, tx pgx.Tx, sel ReplaySelection, from string) (tablePlan, error) {
	where, args := t.where(sel, from)
	var p tablePlan
	var oldest, newest *time.Time
	q := fmt.Sprintf("SELECT count(*), min(%[1]s), max(%[1]s) FROM %[2]s%[3]s", t.utc(), t.quoted, where)
	if err := tx.QueryRow(ctx, q, args...).Scan(&p.rows, &oldest, &newest); err != nil {
		return p, fmt.Errorf("count the selected rows of %s: %w", t.name, err)
	}
	if oldest != nil {
		p.oldest, p.newest = oldest.UTC(), newest.UTC()
	}
	return p, nil
}

// tableStats are the table's write counters since the statistics were last
// reset, over all its partitions, and its rows in the snapshot.
type tableStats struct {
	inserted, deleted, rows int64
}

func (t *outboxTable) stats(ctx context.Context, tx pgx.Tx) (tableStats, error) {
	var s tableStats
	err := tx.QueryRow(ctx, `SELECT coalesce(sum(s.n_tup_ins), 0)::int8, coalesce(sum(s.n_tup_del), 0)::int8
		FROM pg_stat_user_tables s
		WHERE s.relid = to_regclass($1) OR s.relid IN (SELECT relid FROM pg_partition_tree(to_regclass($1)))`, t.quoted).Scan(&s.inserted, &s.deleted)
	if err != nil {
		return s, fmt.Errorf("read the statistics of %s: %w", t.name, err)
	}
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM "+t.quoted).Scan(&s.rows); err != nil {
		return s, fmt.Errorf("count the rows of %s: %w", t.name, err)
	}
	return s, nil
}

// commitTimestamps reports whether the server records commit timestamps
// (track_commit_timestamp), which then give replayed records their
// transaction's commit time.
func commitTimestamps(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var on string
	if err := conn.QueryRow(ctx, "SELECT current_setting('track_commit_timestamp')").Scan(&on); err != nil {
		return false, fmt.Errorf("read track_commit_timestamp: %w", err)
	}
	return on == "on", nil
}

// rowByID returns the text values (nil for NULL) of the row whose id column
// is id, nil when there is none.
func (t *outboxTable) rowByID(ctx context.Context, conn *pgx.Conn, id string) ([][]byte, error) {
	cols := make([]string, len(t.cols))
	for i, c := range t.cols {
		cols[i] = t.ident(c.Name)
	}
	q := fmt.Sprintf("SELECT %s FROM %s WHERE %s = $1::text::%s LIMIT 1", strings.Join(cols, ", "), t.quoted,
		t.ident(t.columns.ID), t.colTypes[t.columns.ID])
	res := conn.PgConn().ExecParams(ctx, q, [][]byte{[]byte(id)}, nil, nil, nil).Read()
	if res.Err != nil {
		var pe *pgconn.PgError
		if errors.As(res.Err, &pe) && pe.Code == "22P02" { // not a valid value of the id's type: no such row
			return nil, nil
		}
		return nil, fmt.Errorf("look up row %s of %s: %w", id, t.name, res.Err)
	}
	if len(res.Rows) == 0 {
		return nil, nil
	}
	return res.Rows[0], nil
}
