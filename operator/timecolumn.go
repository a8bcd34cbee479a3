package operator

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// NullTimeError refuses a replay of a table whose time column is NULL in
// some rows: a replay selects and orders rows by that column, so such a row
// would be left out (a recovery would finish without its event).
type NullTimeError struct {
	Table, Column string
	Rows          int64
}

func (e *NullTimeError) Error() string {
	col := pgx.Identifier{e.Column}.Sanitize()
	return fmt.Sprintf("%d rows of outbox table %s have a NULL %s: a replay selects and orders rows by it and would leave them out; "+
		"set it (UPDATE %s SET %s = now() WHERE %s IS NULL) and make the column NOT NULL, or name another time column",
		e.Rows, e.Table, e.Column, e.Table, col, col)
}

// checkTimeNulls refuses t when its time column is nullable and NULL in a
// row of tx's snapshot (a *NullTimeError).
func (t *outboxTable) checkTimeNulls(ctx context.Context, tx pgx.Tx) error {
	var nullable bool
	if err := tx.QueryRow(ctx, `SELECT NOT attnotnull FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = $2`,
		t.quoted, t.timeCol).Scan(&nullable); err != nil {
		return fmt.Errorf("read column %s of %s: %w", t.timeCol, t.name, err)
	}
	if !nullable {
		return nil
	}
	var n int64
	if err := tx.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s WHERE %s IS NULL", t.quoted, t.ident(t.timeCol))).Scan(&n); err != nil {
		return fmt.Errorf("count the rows of %s without %s: %w", t.name, t.timeCol, err)
	}
	if n > 0 {
		return &NullTimeError{Table: t.name, Column: t.timeCol, Rows: n}
	}
	return nil
}
