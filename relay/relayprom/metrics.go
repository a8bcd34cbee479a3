// Package relayprom is walrelay's Prometheus metrics for the runtime
// (relay.Run), attached from outside it as franz-go's kprom is to its
// client: Metrics implements relay.Observer (set it as Options.Observer),
// KafkaHooks adds franz-go's client metrics to the sink
// (Options.SinkOptions), and Serve serves /metrics, /healthz and /readyz.
// The walrelay command attaches all three; relay.Run works without them.
//
// Entry points: metrics.go (New, Metrics, KafkaHooks) and http.go (Serve).
// The metric names and their help texts are the contract of the dashboards
// and alerts in deploy/: a rename breaks them.
package relayprom

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"

	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/replication"
	"github.com/walrelay/walrelay/sink"
)

// Label values every labelled series starts with, so that each series exists
// (at 0) from the first scrape: rate() and increase() then see the first
// event, and alerts on "the first dead letter" fire.
var (
	// filteredReasons are the decoder's KindFiltered reasons.
	filteredReasons = []string{decoder.ReasonFilteredEventType, decoder.ReasonFilteredAggregateType}
	// ignoredReasons are the decoder's KindIgnored reasons.
	ignoredReasons = []string{decoder.ReasonUpdate, decoder.ReasonDelete, decoder.ReasonTruncate,
		decoder.ReasonNonTransactional, decoder.ReasonForeignMessage, decoder.ReasonUnmappedTable}
	// reconnectCauses are the causes of walrelay_reconnects_total
	// (relay.ReconnectConnection, relay.ReconnectSlotInUse).
	reconnectCauses = []string{"connection", "slot_in_use"}
	// walStatuses are pg_replication_slots.wal_status values.
	walStatuses = []string{"reserved", "extended", "unreserved", "lost"}
	// txnOutcomes are the outcomes of walrelay_txn_total.
	txnOutcomes = []string{"committed", "aborted"}
	// roles are the values of walrelay_role's role label (relay.RoleActive,
	// relay.RoleStandby).
	roles = []string{"active", "standby"}
)

// e2eBuckets cover 1 ms to 60 s: commit-to-ack latency from a quiet system
// (a few ms with the default linger) to a backlog drained after an outage.
var e2eBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// Metrics is walrelay's own metrics, fed by the runtime through the
// relay.Observer methods. Safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	events           prometheus.Counter
	transactions     prometheus.Counter
	ignored          *prometheus.CounterVec
	filtered         *prometheus.CounterVec
	produceFailures  prometheus.Counter
	deadLetters      *prometheus.CounterVec
	reconnects       *prometheus.CounterVec
	kafkaRetries     prometheus.Counter
	reservedHeaders  prometheus.Counter
	slotRecoveries   prometheus.Counter
	heartbeatLatency prometheus.Histogram
	heartbeatErrors  prometheus.Counter
	heartbeatLast    prometheus.Gauge
	ready            prometheus.Gauge
	e2eLatency       prometheus.Histogram
	role             *prometheus.GaugeVec

	// exactly-once
	txns          *prometheus.CounterVec
	txnCommitTime prometheus.Histogram
	txnSkipped    prometheus.Counter

	// slot metrics, from pg_replication_slots (Options.SlotMetricsInterval)
	slotRetained   prometheus.Gauge
	slotLag        prometheus.Gauge
	slotSafeWAL    prometheus.Gauge
	slotActive     prometheus.Gauge
	slotExists     prometheus.Gauge
	slotWALStatus  *prometheus.GaugeVec
	slotPollErrors prometheus.Counter
	slotPollLast   prometheus.Gauge

	// what holds the slot back, and the time left before
	// max_slot_wal_keep_size invalidates it (slotpoll.go)
	slotHolderAge        prometheus.Gauge
	slotHolderAlertAfter prometheus.Gauge
	slotWALTimeLeft      prometheus.Gauge

	// failover slot protection, with SlotFailover (failoverpoll.go)
	failoverProtected *prometheus.GaugeVec
	failoverLag       *prometheus.GaugeVec
	failoverStandbys  *prometheus.GaugeVec // no labels: no series until the first poll
	// the outbox tables' span (Options.OutboxSpan), registered when its
	// poll starts
	spanOnce sync.Once
	span     *spanMetrics

	streaming atomic.Bool                   // /readyz
	why       atomic.Pointer[func() string] // /readyz's answer while not ready
}

// Build labels walrelay_build_info.
type Build struct {
	Version, Revision string // relay.BuildVersion()
}

// New registers walrelay's own metrics in reg, labelling the slot and role
// series with slot, and the Go and process collectors.
func New(reg *prometheus.Registry, slot string, build Build) *Metrics {
	slotLabel := prometheus.Labels{"slot": slot}
	m := &Metrics{
		events: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "walrelay_events_acked_total", Help: "Outbox events acknowledged by Kafka (dead letters included)."}),
		transactions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "walrelay_transactions_total", Help: "Transactions read from the replication stream."}),
		ignored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "walrelay_changes_ignored_total", Help: "Changes that are not events (update, delete, truncate, foreign messages), by reason."}, []string{"reason"}),
		filtered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "walrelay_events_filtered_total", Help: "Outbox events a table's filter does not publish, by what did not match (event_type, aggregate_type)."}, []string{"reason"}),
		produceFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "walrelay_produce_failures_total", Help: "Records Kafka refused for good (walrelay stops on them)."}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "walrelay_dead_letters_total", Help: "Events sent to the dead-letter topic, by reason."}, []string{"reason"}),
		kafkaRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "walrelay_kafka_topic_retries_total", Help: "Topic look-ups or creations retried because Kafka was unavailable (the pipeline waits meanwhile)."}),
		slotRecoveries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "walrelay_slot_recoveries_total", Help: "Lost replication slots this process recovered by itself (Options.SlotRecoveries: walrelay run's recovery of a lost slot): a replay since the last delivered event, then a new slot."}),
		reservedHeaders: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "walrelay_reserved_headers_dropped_total", Help: "Entries of the headers column dropped because they would shadow a walrelay header (id, event_type, aggregate_type, walrelay.*, ce_*)."}),
		reconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "walrelay_reconnects_total", Help: "Reconnects to Postgres after a lost replication connection (cause connection), and times this instance found the slot held by another and stood by (cause slot_in_use)."}, []string{"cause"}),
		heartbeatLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "walrelay_heartbeat_latency_seconds", Help: "Time from emitting a heartbeat in Postgres to decoding it.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		heartbeatErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "walrelay_heartbeat_errors_total", Help: "Heartbeats that could not be written."}),
		heartbeatLast: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "walrelay_heartbeat_last_timestamp_seconds", Help: "Unix time at which the last heartbeat was decoded (0: none yet)."}),
		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "walrelay_ready", Help: "1 while streaming from the slot, 0 while connecting or standing by."}),
		e2eLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "walrelay_e2e_latency_seconds", Help: "Time from a transaction's commit in Postgres to Kafka's acknowledgement of each of its events.",
			Buckets: e2eBuckets}),
		role: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "walrelay_role", Help: "1 for the role this instance has: active (streaming from the slot) or standby (the slot is held by another process); both 0 while connecting or reconnecting.",
			ConstLabels: slotLabel}, []string{"role"}),
		txns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "walrelay_txn_total", Help: "Exactly-once: Kafka transactions ended, by outcome (committed, aborted)."}, []string{"outcome"}),
		txnCommitTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "walrelay_txn_commit_seconds", Help: "Exactly-once: time to commit a Kafka transaction (flush its records, produce the checkpoint, end the transaction).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		txnSkipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "walrelay_txn_skipped_events_total", Help: "Exactly-once: events read again from the slot and skipped because the checkpoint shows them committed to Kafka."}),
		slotRetained: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "walrelay_slot_retained_wal_bytes", Help: "WAL the slot keeps on the server's disk: pg_current_wal_lsn() - restart_lsn (0 when unknown).", ConstLabels: slotLabel}),
		slotLag: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "walrelay_slot_confirmed_lag_bytes", Help: "WAL written after the slot's confirmed position: pg_current_wal_lsn() - confirmed_flush_lsn.", ConstLabels: slotLabel}),
		slotSafeWAL: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "walrelay_slot_safe_wal_size_bytes", Help: "pg_replication_slots.safe_wal_size: WAL that can still be written before the slot is in danger of losing WAL; -1 when max_slot_wal_keep_size is unlimited.", ConstLabels: slotLabel}),
		slotActive: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "walrelay_slot_active", Help: "1 while some process (this instance or another) streams from the slot.", ConstLabels: slotLabel}),
		slotExists: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "walrelay_slot_exists", Help: "1 while the slot exists in pg_replication_slots.", ConstLabels: slotLabel}),
		slotWALStatus: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "walrelay_slot_wal_status", Help: "1 for the slot's pg_replication_slots.wal_status (reserved, extended, unreserved, lost), 0 for the others.", ConstLabels: slotLabel}, []string{"status"}),
		slotPollErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "walrelay_slot_poll_errors_total", Help: "Failed reads of pg_replication_slots.", ConstLabels: slotLabel}),
		slotPollLast: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "walrelay_slot_poll_last_success_timestamp_seconds", Help: "Unix time of the last successful read of pg_replication_slots (0: none yet).", ConstLabels: slotLabel}),
		slotHolderAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "walrelay_slot_holder_xact_age_seconds", Help: "Age of the oldest open (with a transaction id) or prepared transaction, which holds the slot back (restart_lsn, catalog_xmin) once walrelay confirmed past its start; 0 when none is open. walrelay status names it.", ConstLabels: slotLabel}),
		slotHolderAlertAfter: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "walrelay_slot_holder_alert_after_seconds", Help: "How long a transaction may hold the slot back before the WalrelaySlotHeldBack alert fires (0: off).", ConstLabels: slotLabel}),
		slotWALTimeLeft: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "walrelay_slot_wal_time_left_seconds", Help: "Time until max_slot_wal_keep_size invalidates the slot: safe_wal_size over the rate at which it shrank since it last grew (the WAL rate while the slot is held back), once it has shrunk for a minute; -1 when max_slot_wal_keep_size is unlimited or the slot keeps up.", ConstLabels: slotLabel}),
		failoverProtected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "walrelay_failover_slot_protected", Help: "With a failover slot: 1 while the standby (a host of the Postgres DSN in recovery) would keep the slot on promotion (sync_replication_slots and hot_standby_feedback on, a dbname in primary_conninfo, a persisted synced copy), 0 when not.", ConstLabels: slotLabel}, []string{"standby"}),
		failoverLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "walrelay_failover_slot_lag_bytes", Help: "With a failover slot: how far the standby's copy of the slot is behind the primary's (confirmed_flush_lsn); -1 when either is unknown.", ConstLabels: slotLabel}, []string{"standby"}),
		failoverStandbys: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "walrelay_failover_protected_standbys", Help: "With a failover slot: standbys among the Postgres DSN's hosts that would keep the slot on promotion (0: a failover now loses the slot).", ConstLabels: slotLabel}, nil),
	}
	for _, r := range filteredReasons {
		m.filtered.WithLabelValues(r)
	}
	for _, r := range ignoredReasons {
		m.ignored.WithLabelValues(r)
	}
	for _, r := range sink.DeadLetterReasons() {
		m.deadLetters.WithLabelValues(string(r))
	}
	for _, c := range reconnectCauses {
		m.reconnects.WithLabelValues(c)
	}
	for _, s := range walStatuses {
		m.slotWALStatus.WithLabelValues(s)
	}
	for _, r := range roles {
		m.role.WithLabelValues(r)
	}
	for _, o := range txnOutcomes {
		m.txns.WithLabelValues(o)
	}
	m.reg = reg
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "walrelay_build_info", Help: "Always 1; the labels say which build runs."}, []string{"version", "goversion", "revision"})
	buildInfo.WithLabelValues(build.Version, runtime.Version(), build.Revision).Set(1)
	reg.MustRegister(m.events, m.transactions, m.ignored, m.filtered, m.produceFailures, m.deadLetters, m.reconnects, m.kafkaRetries, m.reservedHeaders, m.slotRecoveries,
		m.heartbeatLatency, m.heartbeatErrors, m.heartbeatLast, m.ready, m.e2eLatency, m.role, buildInfo,
		m.txns, m.txnCommitTime, m.txnSkipped,
		m.slotRetained, m.slotLag, m.slotSafeWAL, m.slotActive, m.slotExists, m.slotWALStatus, m.slotPollErrors, m.slotPollLast,
		m.slotHolderAge, m.slotHolderAlertAfter, m.slotWALTimeLeft,
		m.failoverProtected, m.failoverLag, m.failoverStandbys,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// KafkaHooks registers franz-go's client metrics (kprom, walrelay_kafka_*:
// connections, bytes, batches and records produced per broker and topic,
// request latency, buffered records) in reg, through the client's hooks.
func KafkaHooks(reg *prometheus.Registry) sink.Option {
	kp := kprom.NewMetrics("walrelay", kprom.Subsystem("kafka"), kprom.Registry(reg),
		kprom.FetchAndProduceDetail(kprom.ByNode, kprom.ByTopic, kprom.Batches, kprom.Records,
			kprom.CompressedBytes, kprom.UncompressedBytes, kprom.ConsistentNaming))
	return sink.WithClientOpts(kgo.WithHooks(kp))
}

// Ready reports whether the instance streams from the slot (/readyz).
func (m *Metrics) Ready() bool { return m.streaming.Load() }

func (m *Metrics) TransactionRead() { m.transactions.Inc() }

func (m *Metrics) EventAcked(commitTime time.Time) {
	m.events.Inc()
	m.e2eLatency.Observe(time.Since(commitTime).Seconds())
}

func (m *Metrics) ProduceFailed()               { m.produceFailures.Inc() }
func (m *Metrics) DeadLettered(reason string)   { m.deadLetters.WithLabelValues(reason).Inc() }
func (m *Metrics) KafkaRetried()                { m.kafkaRetries.Inc() }
func (m *Metrics) ChangeIgnored(reason string)  { m.ignored.WithLabelValues(reason).Inc() }
func (m *Metrics) EventFiltered(reason string)  { m.filtered.WithLabelValues(reason).Inc() }
func (m *Metrics) ReservedHeaderDropped(string) { m.reservedHeaders.Inc() }
func (m *Metrics) HeartbeatFailed()             { m.heartbeatErrors.Inc() }
func (m *Metrics) Reconnecting(cause string)    { m.reconnects.WithLabelValues(cause).Inc() }
func (m *Metrics) TxnAborted()                  { m.txns.WithLabelValues("aborted").Inc() }
func (m *Metrics) EventsSkipped(n int)          { m.txnSkipped.Add(float64(n)) }
func (m *Metrics) SlotPollFailed()              { m.slotPollErrors.Inc() }

func (m *Metrics) HeartbeatDecoded(emitted time.Time) {
	m.heartbeatLast.SetToCurrentTime()
	if !emitted.IsZero() {
		m.heartbeatLatency.Observe(time.Since(emitted).Seconds())
	}
}

func (m *Metrics) Streaming(on bool) {
	m.streaming.Store(on)
	v := 0.0
	if on {
		v = 1
	}
	m.ready.Set(v)
}

// Role sets walrelay_role: role is "active", "standby" or "" (neither:
// connecting or reconnecting).
func (m *Metrics) Role(role string) {
	for _, r := range roles {
		v := 0.0
		if r == role {
			v = 1
		}
		m.role.WithLabelValues(r).Set(v)
	}
}

func (m *Metrics) TxnCommitted(took time.Duration) {
	m.txns.WithLabelValues("committed").Inc()
	m.txnCommitTime.Observe(took.Seconds())
}

// slotState is one reading of the slot.
type slotState struct {
	exists    bool
	retained  float64 // bytes
	lag       float64 // bytes
	walStatus string
	safeWAL   float64 // bytes; -1 unlimited
	active    bool
}

// slotStateOf is the reading of slot s (nil: missing).
func slotStateOf(s *replication.Slot) slotState {
	if s == nil {
		return slotState{}
	}
	st := slotState{exists: true, retained: float64(s.RetainedBytes()), lag: float64(s.LagBytes()),
		walStatus: s.WALStatus, safeWAL: -1, active: s.Active}
	if s.SafeWALSize != nil {
		st.safeWAL = float64(*s.SafeWALSize)
	}
	return st
}

// SlotPolled sets the walrelay_slot_* gauges from a reading (nil: the slot
// is missing: walrelay_slot_exists 0).
func (m *Metrics) SlotPolled(s *replication.Slot) { m.observeSlot(slotStateOf(s)) }

func (m *Metrics) SlotRecoveries(n int) { m.slotRecoveries.Add(float64(n)) }

func (m *Metrics) SlotHeldBack(age, alertAfter time.Duration) {
	m.slotHolderAge.Set(age.Seconds())
	m.slotHolderAlertAfter.Set(alertAfter.Seconds())
}

func (m *Metrics) SlotWALTimeLeft(left time.Duration, known bool) {
	if !known {
		m.slotWALTimeLeft.Set(-1)
		return
	}
	m.slotWALTimeLeft.Set(left.Seconds())
}

// FailoverPolled sets the walrelay_failover_* gauges from h; standbys no
// longer found lose their series. Without slot-failover nothing calls it, so
// they have none, and no alert on them fires for a slot that is not a
// failover slot.
func (m *Metrics) FailoverPolled(h replication.FailoverHealth) {
	m.failoverProtected.Reset()
	m.failoverLag.Reset()
	protected := 0
	for _, s := range h.Standbys {
		v := 0.0
		if s.Protected() {
			v = 1
			protected++
		}
		m.failoverProtected.WithLabelValues(s.Server).Set(v)
		m.failoverLag.WithLabelValues(s.Server).Set(float64(h.LagBytes(s)))
	}
	m.failoverStandbys.WithLabelValues().Set(float64(protected))
}

// NotReadyReason keeps why, which /readyz adds to its answer while not
// ready.
func (m *Metrics) NotReadyReason(why func() string) { m.why.Store(&why) }

// notReady says why the instance is not ready beyond not streaming ("":
// nothing more).
func (m *Metrics) notReady() string {
	if f := m.why.Load(); f != nil {
		return (*f)()
	}
	return ""
}

func (m *Metrics) observeSlot(st slotState) {
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	m.slotExists.Set(b(st.exists))
	m.slotActive.Set(b(st.active))
	m.slotRetained.Set(st.retained)
	m.slotLag.Set(st.lag)
	m.slotSafeWAL.Set(st.safeWAL)
	for _, s := range walStatuses {
		m.slotWALStatus.WithLabelValues(s).Set(b(s == st.walStatus))
	}
	m.slotPollLast.SetToCurrentTime()
}

// Positions registers the gauges that read the checkpoint and the server
// WAL end at scrape time (relay.Observer; called once). The *_lsn gauges
// are WAL positions as plain numbers (the 64-bit LSN; as a float64 they are
// exact up to 2^53 bytes of WAL), meant for differences and rates, not for
// reading: `walrelay status` prints them in Postgres' X/Y form.
func (m *Metrics) Positions(watermark func() pglogrepl.LSN, inFlight func() int, walEnd func() pglogrepl.LSN) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "walrelay_confirmed_lsn", Help: "Watermark: the WAL position confirmed (or about to be) to Postgres, as a number (LSN)."},
			func() float64 { return float64(watermark()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "walrelay_server_wal_end_lsn", Help: "The server's WAL end as last seen in the stream, as a number (LSN)."},
			func() float64 { return float64(walEnd()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "walrelay_lag_bytes", Help: "Bytes of WAL between the server's WAL end and the watermark."},
			func() float64 {
				end, w := walEnd(), watermark()
				if end < w {
					return 0
				}
				return float64(end - w)
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "walrelay_in_flight_records", Help: "Records handed to Kafka and not yet acknowledged."},
			func() float64 { return float64(inFlight()) }),
	)
}
