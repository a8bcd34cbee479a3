package relay

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/walrelay/walrelay/replication"
)

// The outbox table is the safety net: its rows are what a replay or a
// recovery publishes again. Two things keep it in view: the prune guard (a
// row whose event may not be delivered yet is never pruned, the operator
// package's) and the retained span (how far back a replay can reach,
// replication.ReadOutboxSpan), shown by walrelay status and exported as
// metrics here.

// defaultTimeColumn is the outbox table's time column by default (its
// created_at, as the replay's).
const defaultTimeColumn = "created_at"

// OutboxSpanOptions turn on the walrelay_outbox_* metrics of the relay.
type OutboxSpanOptions struct {
	// Interval between two readings (a reading without an index on the
	// time column scans the table).
	Interval time.Duration
	// TimeColumn is each table's time column ("": defaultTimeColumn).
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

func (m *spanMetrics) observe(sp replication.OutboxSpan, now time.Time) {
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
		timeCol = defaultTimeColumn
	}
	m := newSpanMetrics(reg, so.MinRetained)
	log := opts.Logger
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	// noTimeColumn holds the tables without the time column (Debezium's
	// outbox table has none): told once with the fix, then left out, since
	// the relay works without it.
	noTimeColumn := map[string]bool{}
	warned := false // a failure streak was logged
	go func() {
		defer close(done)
		periodic{dsn: opts.Replication.DSN, password: opts.Replication.PasswordSource, interval: so.Interval, timeout: max(so.Interval, time.Minute), atOnce: true,
			run: func(ctx context.Context, conn *pgconn.PgConn) error {
				var errs []error
				for _, t := range opts.Decoder.Tables {
					if noTimeColumn[t.Schema+"."+t.Name] {
						continue
					}
					sp, err := replication.ReadOutboxSpan(ctx, conn, t.Schema, t.Name, timeCol)
					var tce *replication.TimeColumnError
					if errors.As(err, &tce) {
						noTimeColumn[tce.Table] = true
						log.Warn("the walrelay_outbox_* metrics leave out an outbox table without its time column (relaying is not affected)", "table", tce.Table, "error", err)
						continue
					}
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
				// A server that refuses the connection (a wrong password, the
				// server down) is the relay's own stop or retry to report, once.
				var ce *pgconn.ConnectError
				if first && !errors.As(err, &ce) {
					warned = true
					log.Warn("reading the outbox tables' span failed; the walrelay_outbox_* metrics are stale until it works again", "error", err)
				}
			},
			recovered: func() {
				if warned {
					log.Info("reading the outbox tables' span works again")
				}
				warned = false
			},
		}.loop(pctx)
	}()
	return func() {
		cancel()
		<-done
	}
}
