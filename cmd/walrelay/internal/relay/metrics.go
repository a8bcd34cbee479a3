package relay

import (
	"sync/atomic"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

type metrics struct {
	events           prometheus.Counter
	transactions     prometheus.Counter
	ignored          *prometheus.CounterVec
	produceFailures  prometheus.Counter
	deadLetters      *prometheus.CounterVec
	reconnects       *prometheus.CounterVec
	kafkaRetries     prometheus.Counter
	reservedHeaders  prometheus.Counter
	heartbeatLatency prometheus.Histogram
	heartbeatErrors  prometheus.Counter
	heartbeatLast    prometheus.Gauge
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
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "walrelay_dead_letters_total", Help: "Events sent to the dead-letter topic, by reason."}, []string{"reason"}),
		kafkaRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "walrelay_kafka_topic_retries_total", Help: "Topic look-ups or creations retried because Kafka was unavailable (the pipeline waits meanwhile)."}),
		reservedHeaders: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "walrelay_reserved_headers_dropped_total", Help: "Entries of the headers column dropped because they would shadow a walrelay header (id, event_type, aggregate_type, walrelay.*, ce_*)."}),
		reconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "walrelay_reconnects_total", Help: "Reconnects to Postgres after a lost replication connection, by cause."}, []string{"cause"}),
		heartbeatLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "walrelay_heartbeat_latency_seconds", Help: "Time from emitting a heartbeat in Postgres to decoding it.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		heartbeatErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "walrelay_heartbeat_errors_total", Help: "Heartbeats that could not be written."}),
		heartbeatLast: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "walrelay_heartbeat_last_seconds", Help: "Unix time at which the last heartbeat was decoded."}),
		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "walrelay_ready", Help: "1 while streaming from the slot, 0 while connecting or standing by."}),
	}
	reg.MustRegister(m.events, m.transactions, m.ignored, m.produceFailures, m.deadLetters, m.reconnects, m.kafkaRetries, m.reservedHeaders,
		m.heartbeatLatency, m.heartbeatErrors, m.heartbeatLast, m.ready,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// watermarkSource is what the position gauges read.
type watermarkSource interface {
	Watermark() pglogrepl.LSN
	InFlight() int
}

// registerPosition adds the gauges that read the checkpoint and the server
// WAL end at scrape time.
func registerPosition(reg *prometheus.Registry, tr watermarkSource, walEnd *atomic.Uint64) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "walrelay_confirmed_lsn", Help: "Watermark: the WAL position confirmed (or about to be) to Postgres, as a number."},
			func() float64 { return float64(tr.Watermark()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "walrelay_server_wal_end_lsn", Help: "The server's WAL end as last seen in the stream, as a number."},
			func() float64 { return float64(walEnd.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "walrelay_lag_bytes", Help: "Bytes of WAL between the server's WAL end and the watermark."},
			func() float64 {
				end, w := walEnd.Load(), uint64(tr.Watermark())
				if end < w {
					return 0
				}
				return float64(end - w)
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "walrelay_in_flight_records", Help: "Records handed to Kafka and not yet acknowledged."},
			func() float64 { return float64(tr.InFlight()) }),
	)
}
