package relayprom

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/walrelay/walrelay/replication"
)

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

// OutboxSpanPolling registers the walrelay_outbox_* metrics (once), with
// minRetained as walrelay_outbox_retention_target_seconds.
func (m *Metrics) OutboxSpanPolling(minRetained time.Duration) {
	m.spanOnce.Do(func() { m.span = newSpanMetrics(m.reg, minRetained) })
}

// OutboxSpanRead sets one table's walrelay_outbox_* gauges.
func (m *Metrics) OutboxSpanRead(sp replication.OutboxSpan, now time.Time) {
	if m.span != nil {
		m.span.observe(sp, now)
	}
}

// OutboxSpanPolled counts a failed poll, or sets the time of the last one
// that read every table.
func (m *Metrics) OutboxSpanPolled(ok bool) {
	switch {
	case m.span == nil:
	case ok:
		m.span.last.SetToCurrentTime()
	default:
		m.span.errors.Inc()
	}
}
