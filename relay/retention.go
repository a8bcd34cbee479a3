package relay

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
)

// The outbox table is the safety net: its rows are what a replay or a
// recovery publishes again. Two things keep it in view: the prune guard (a
// row whose event may not be delivered yet is never pruned) and the
// retained span (how far back a replay can reach), shown by walrelay
// status and exported as metrics.

// PruneGuard tells which outbox rows may be deleted without losing the only
// copy of an event that may not have reached Kafka.
//
// While the slot exists, a row may go once the transaction that wrote it is
// older than the slot's catalog_xmin. Postgres sets catalog_xmin from a
// running-transactions record at a position the consumer confirmed: every
// transaction with an older id had ended before that position, so a
// committed one is at or before the confirmed position, and walrelay
// confirms a position only once Kafka acknowledged everything before it.
// A row's xmin is the inserting (sub)transaction's id; a subtransaction's
// id is newer than its parent's, so the rule holds for it too. Rows an
// UPDATE rewrote get a newer xmin: kept longer, never shorter. catalog_xmin
// lags the confirmed position (it follows the slot's restart point), so
// the rule keeps rows a little longer than needed, never less.
//
// Without the slot (dropped, or invalidated), the last event delivered to
// Kafka decides instead: rows whose time column is older than its time less
// a margin may go (see LastDelivered, DefaultRecoveryMargin).
type PruneGuard struct {
	Slot SlotState
	// Delivered and Margin are used when the slot is missing or lost.
	Delivered *LastDelivery
	Margin    time.Duration
}

// NeedsDelivered reports whether the slot cannot vouch for any row, so
// that the last delivered event must (set Delivered).
func (g PruneGuard) NeedsDelivered() bool { return !g.Slot.Exists || g.Slot.Lost }

// Condition returns an SQL condition over a row of the outbox table (its
// time column timeCol), true for the rows that may be deleted, with its
// arguments numbered from $first. With nothing to vouch for any row it is
// FALSE.
func (g PruneGuard) Condition(timeCol string, first int) (string, []any) {
	switch {
	case !g.NeedsDelivered() && g.Slot.CatalogXmin != 0:
		// age() counts back from the same current id for both sides.
		return fmt.Sprintf("age(xmin) > age($%d::text::xid)", first), []any{strconv.FormatUint(uint64(g.Slot.CatalogXmin), 10)}
	case g.NeedsDelivered() && g.Delivered != nil && g.Delivered.Found:
		return fmt.Sprintf("%s < $%d::timestamptz", pgx.Identifier{timeCol}.Sanitize(), first), []any{g.Before()}
	}
	return "FALSE", nil
}

// Before is the time before which rows may go when the slot is gone: the
// last delivered event's time less the margin (zero when unknown).
func (g PruneGuard) Before() time.Time {
	if g.Delivered == nil || !g.Delivered.Found {
		return time.Time{}
	}
	return g.Delivered.Time.Add(-g.Margin)
}

// Reason says why the rows Condition refuses are kept.
func (g PruneGuard) Reason() string {
	switch {
	case !g.NeedsDelivered() && g.Slot.CatalogXmin != 0:
		return fmt.Sprintf("their transactions are not older than the catalog_xmin %d of replication slot %q (confirmed up to %s): "+
			"their events may not be in Kafka yet", g.Slot.CatalogXmin, g.Slot.Name, g.Slot.Confirmed)
	case !g.NeedsDelivered():
		return fmt.Sprintf("replication slot %q has no catalog_xmin yet: it has confirmed nothing", g.Slot.Name)
	case g.Delivered != nil && g.Delivered.Found:
		return fmt.Sprintf("replication slot %q is %s, and they are newer than the last event delivered to Kafka (%s) less %s: "+
			"they may be the only copy of events the slot never delivered; recover them with a replay first", g.Slot.Name, slotGone(g.Slot),
			g.Delivered.Time.Format(time.RFC3339), g.Margin)
	}
	return fmt.Sprintf("replication slot %q is %s and no event delivered to Kafka was found: every row may be the only copy of its event", g.Slot.Name, slotGone(g.Slot))
}

func slotGone(s SlotState) string {
	if s.Lost {
		return "invalidated (wal_status lost)"
	}
	return "missing"
}

// ReadPruneGuard reads the slot over conn; when NeedsDelivered, set
// Delivered (and Margin) before using the guard.
func ReadPruneGuard(ctx context.Context, conn *pgx.Conn, slot string) (PruneGuard, error) {
	st, err := ReadSlotState(ctx, conn, slot)
	return PruneGuard{Slot: st, Margin: DefaultRecoveryMargin}, err
}

// OutboxSpan is what an outbox table holds: how far back a replay can
// reach.
type OutboxSpan struct {
	Table string
	// Oldest is the oldest row's time column (zero when the table is
	// empty).
	Oldest time.Time
	Empty  bool
	// Rows is Postgres' estimate of the rows (pg_class.reltuples, over the
	// partitions); RowsKnown is false before the table was ever analyzed.
	Rows      int64
	RowsKnown bool
}

// ReadOutboxSpan reads table's (schema.name) span over conn: the oldest
// row by timeCol (cheap with an index on it, or for a table partitioned by
// it; otherwise a scan) and the row estimate.
func ReadOutboxSpan(ctx context.Context, conn *pgconn.PgConn, schema, name, timeCol string) (OutboxSpan, error) {
	quoted := pgx.Identifier{schema, name}.Sanitize()
	tc := pgx.Identifier{timeCol}.Sanitize()
	sp := OutboxSpan{Table: schema + "." + name}
	q := fmt.Sprintf(`SELECT (SELECT (extract(epoch FROM %[1]s::timestamptz) * 1000000)::int8 FROM %[2]s ORDER BY %[1]s LIMIT 1),
		(SELECT coalesce(sum(greatest(c.reltuples, 0)), 0)::int8 FROM pg_class c
		  WHERE c.oid = to_regclass($1) OR c.oid IN (SELECT relid FROM pg_partition_tree(to_regclass($1)))),
		(SELECT bool_or(c.reltuples >= 0) FROM pg_class c
		  WHERE c.relkind = 'r' AND (c.oid = to_regclass($1) OR c.oid IN (SELECT relid FROM pg_partition_tree(to_regclass($1)))))`, tc, quoted)
	res := conn.ExecParams(ctx, q, [][]byte{[]byte(quoted)}, nil, nil, nil).Read()
	if res.Err != nil {
		return sp, fmt.Errorf("read the span of outbox table %s: %w", sp.Table, res.Err)
	}
	row := res.Rows[0]
	if row[0] == nil {
		sp.Empty = true
	} else {
		us, err := strconv.ParseInt(string(row[0]), 10, 64)
		if err != nil {
			return sp, fmt.Errorf("outbox table %s: oldest row time %q: %w", sp.Table, row[0], err)
		}
		sp.Oldest = time.UnixMicro(us).UTC()
	}
	n, err := strconv.ParseInt(string(row[1]), 10, 64)
	if err != nil {
		return sp, fmt.Errorf("outbox table %s: row estimate %q: %w", sp.Table, row[1], err)
	}
	sp.Rows, sp.RowsKnown = n, string(row[2]) == "t"
	return sp, nil
}

// OutboxSpanOptions turn on the walrelay_outbox_* metrics of the relay.
type OutboxSpanOptions struct {
	// Interval between two readings (a reading without an index on the
	// time column scans the table).
	Interval time.Duration
	// TimeColumn is each table's time column (DefaultReplayTimeColumn).
	TimeColumn string
	// MinRetained, when positive, is exported as
	// walrelay_outbox_retention_target_seconds for the alert on a retained
	// span shorter than it.
	MinRetained time.Duration
}

// spanMetrics are the walrelay_outbox_* gauges.
type spanMetrics struct {
	oldest *prometheus.GaugeVec
	rows   *prometheus.GaugeVec
	target prometheus.Gauge
	errors prometheus.Counter
	last   prometheus.Gauge
}

func newSpanMetrics(reg *prometheus.Registry, min time.Duration) *spanMetrics {
	m := &spanMetrics{
		oldest: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "walrelay_outbox_oldest_row_timestamp_seconds",
			Help: "Unix time of the oldest row kept in the outbox table (its time column); the time of the reading when the table is empty. time() minus it is how far back a replay can reach."}, []string{"table"}),
		rows: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "walrelay_outbox_rows_estimate",
			Help: "Rows in the outbox table as Postgres estimates them (pg_class.reltuples over the partitions)."}, []string{"table"}),
		target: prometheus.NewGauge(prometheus.GaugeOpts{Name: "walrelay_outbox_retention_target_seconds",
			Help: "The configured minimum retained span of the outbox table (0: none); the alert WalrelayOutboxRetentionShort compares the span with it."}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "walrelay_outbox_span_poll_errors_total",
			Help: "Readings of the outbox tables' span that failed."}),
		last: prometheus.NewGauge(prometheus.GaugeOpts{Name: "walrelay_outbox_span_poll_last_timestamp_seconds",
			Help: "Unix time of the last successful reading of the outbox tables' span."}),
	}
	m.target.Set(min.Seconds())
	reg.MustRegister(m.oldest, m.rows, m.target, m.errors, m.last)
	return m
}

func (m *spanMetrics) observe(sp OutboxSpan, now time.Time) {
	oldest := now
	if !sp.Empty {
		oldest = sp.Oldest
	}
	m.oldest.WithLabelValues(sp.Table).Set(float64(oldest.UnixNano()) / 1e9)
	m.rows.WithLabelValues(sp.Table).Set(float64(sp.Rows))
}

// startSpanPoll reads the outbox tables' span every interval and sets the
// walrelay_outbox_* gauges, unless opts.OutboxSpan is nil; it returns the
// function that stops it. Failures are counted and logged once per streak.
func startSpanPoll(ctx context.Context, opts Options, reg *prometheus.Registry) (stop func()) {
	so := opts.OutboxSpan
	if so == nil || so.Interval <= 0 || len(opts.Decoder.Tables) == 0 {
		return func() {}
	}
	timeCol := so.TimeColumn
	if timeCol == "" {
		timeCol = DefaultReplayTimeColumn
	}
	m := newSpanMetrics(reg, so.MinRetained)
	log := opts.Logger
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		periodic{dsn: opts.Replication.DSN, interval: so.Interval, timeout: max(so.Interval, time.Minute), atOnce: true,
			run: func(ctx context.Context, conn *pgconn.PgConn) error {
				var errs []error
				for _, t := range opts.Decoder.Tables {
					sp, err := ReadOutboxSpan(ctx, conn, t.Schema, t.Name, timeCol)
					if err != nil {
						errs = append(errs, err)
						continue
					}
					m.observe(sp, time.Now())
				}
				if len(errs) == 0 {
					m.last.SetToCurrentTime()
				}
				return errors.Join(errs...)
			},
			failed: func(err error, first bool) {
				m.errors.Inc()
				if first {
					log.Warn("reading the outbox tables' span failed; the walrelay_outbox_* metrics are stale until it works again", "error", err)
				}
			},
			recovered: func() { log.Info("reading the outbox tables' span works again") },
		}.loop(pctx)
	}()
	return func() {
		cancel()
		<-done
	}
}
