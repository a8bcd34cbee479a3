package decoder

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Rows read from an outbox table (walrelay replay, dead-letter redrive)
// become events here, through the same mapping and event construction as the
// INSERTs of the replication stream (newMapping, tableEvent): a row gives
// exactly the event its INSERT gave or would give, poison included.

// RowColumn is one column of an outbox table as a Relation message carries
// it: the name and the type OID (pg_attribute.attname, atttypid).
type RowColumn struct {
	Name string
	Type uint32
}

// ErrNotOutboxTable: DecodeRow was given a table the configuration does not
// name.
var ErrNotOutboxTable = errors.New("not a configured outbox table")

// rowRelation caches the relation of the last DecodeRow call: rows of one
// query share it.
type rowRelation struct {
	table string
	cols  []RowColumn
	rel   *relation
}

// DecodeRow decodes one row of the configured outbox table table
// ("schema.name"): cols are the table's columns in order (all of them, as a
// Relation message lists them) and vals their values in text form, as the
// types' output functions print them (what pgoutput sends, and what a query
// returns in text format); a nil value is SQL NULL. The row must come from
// a session with the same DateStyle and bytea_output as walrelay's
// replication connection (the same DSN gives that).
//
// The output is the one an INSERT of the row in a transaction committed at
// commitTime gives: KindEvent, or KindFiltered when the table's Filter does
// not publish it, with the same fields, headers, timestamp column and
// poison. What only the WAL knows stays zero: Event.LSN and Event.XID. out
// is reset first.
//
// A mapped column missing from cols is a *MissingColumnError, a table the
// configuration does not name wraps ErrNotOutboxTable, and len(vals) !=
// len(cols) is an error too. DecodeRow must not be called while the decoder
// is inside a stream transaction (InTxn): use a Decoder of its own for rows.
// Like Decode, it never retains cols' or vals' memory.
func (d *Decoder) DecodeRow(table string, cols []RowColumn, vals [][]byte, commitTime time.Time, out *Output) error {
	if out == nil {
		return errors.New("decode row: nil output")
	}
	out.reset()
	if d.inTxn {
		return errors.New("decode row: the decoder is inside a stream transaction")
	}
	if len(vals) != len(cols) {
		return fmt.Errorf("decode row of %s: %d values for %d columns", table, len(vals), len(cols))
	}
	rel, err := d.rowRelation(table, cols)
	if err != nil {
		return err
	}
	// The values side by side in one buffer, located by d.vals as a tuple
	// read from an Insert message is.
	buf := d.rowBuf[:0]
	vs := d.vals[:0]
	for _, v := range vals {
		if v == nil {
			vs = append(vs, colVal{kind: colNull})
			continue
		}
		off := len(buf)
		buf = append(buf, v...)
		vs = append(vs, colVal{kind: colText, off: off, end: len(buf)})
	}
	d.vals = vs
	d.commitTime = commitTime.UTC()
	d.tableEvent(rel, buf, 0, out)
	d.commitTime = time.Time{}
	if cap(buf) > maxScratch {
		buf = nil
	}
	d.rowBuf = buf
	return nil
}

// rowRelation returns the relation of table with cols, mapped as the
// configuration maps it, from the cache when the last row had the same.
func (d *Decoder) rowRelation(table string, cols []RowColumn) (*relation, error) {
	if c := d.rowRel; c != nil && c.table == table && slices.Equal(c.cols, cols) {
		return c.rel, nil
	}
	ti := -1
	for i := range d.tables {
		if d.tables[i].Schema+"."+d.tables[i].Name == table {
			ti = i
			break
		}
	}
	if ti < 0 {
		return nil, fmt.Errorf("decode row: table %s: %w", table, ErrNotOutboxTable)
	}
	rc := make([]column, len(cols))
	for i, c := range cols {
		rc[i] = column{name: c.Name, typ: c.Type}
	}
	// The table under its configured name, mapped and filtered as a
	// Relation message of it is.
	rel, err := d.aliasOf(&relation{cols: rc}, ti)
	if err != nil {
		return nil, err
	}
	d.rowRel = &rowRelation{table: table, cols: slices.Clone(cols), rel: rel}
	return rel, nil
}
