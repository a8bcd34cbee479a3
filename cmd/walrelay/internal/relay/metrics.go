package relay

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

type metrics struct {
	events           prometheus.Counter
	transactions     prometheus.Counter
	ignored          *prometheus.CounterVec
	produceFailures  prometheus.Counter
	reconnects       *prometheus.CounterVec
	heartbeatLatency prometheus.Histogram
	heartbeatErrors  prometheus.Counter
	ready            prometheus.Gauge
}

func newMetrics(reg *prometheus.Registry) *metrics {
	m := &metrics{
		events: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "walrelay_events_acked_total", Help: "Outbox events acknowledged by Kafka."}),
		transactions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "walrelay_transactions_total", Help: "Transactions read from the replication stream."}),
		ignored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "walrelay_changes_ignored_total", Help: "Changes that are not events (update, delete, truncate, foreign messages), by reason."}, []string{"reason"}),
		produceFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "walrelay_produce_failures_total", Help: "Records Kafka refused for good (walrelay stops on them)."}),
		reconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "walrelay_reconnects_total", Help: "Reconnects to Postgres after a lost replication connection, by cause."}, []string{"cause"}),
		heartbeatLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "walrelay_heartbeat_latency_seconds", Help: "Time from emitting a heartbeat in Postgres to decoding it.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		heartbeatErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "walrelay_heartbeat_errors_total", Help: "Heartbeats that could not be written."}),
		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "walrelay_ready", Help: "1 while streaming from the slot, 0 while connecting or standing by."}),
	}
	reg.MustRegister(m.events, m.transactions, m.ignored, m.produceFailures, m.reconnects,
		m.heartbeatLatency, m.heartbeatErrors, m.ready,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
