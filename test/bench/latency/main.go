// Command latency measures walrelay's live end-to-end latency: it writes
// outbox events into Postgres at a fixed rate (or as fast as it can) from a
// few connections while consuming the Kafka topic walrelay produces them to,
// and reports the latency distribution per event:
//
//	latency = consumer receive time - Kafka record timestamp
//
// walrelay sets the record timestamp to the transaction's commit time as
// Postgres reports it (same machine, same clock). Kafka timestamps have
// millisecond resolution, so a latency is overstated by 0 to 1 ms. As a
// cross-check it also reports the latency from the writer's acknowledgement
// (the INSERT returned, i.e. after the commit) to the receive, which can only
// be lower.
//
// Where the time goes: every -lsn-sample (10 ms) it reads the walsender's
// sent_lsn (how far Postgres has decoded and sent the slot's stream). An
// event counts as "decoded" midway between the last sample before and the
// first sample after sent_lsn passed the event's LSN (the walrelay.lsn
// header), which splits its latency into "pg" (commit -> decoded and sent by
// the walsender) and "after" (-> received: socket, walrelay, Kafka,
// consumer), each within +-half a sampling interval (negative estimates count
// as 0). Only parts well above that resolution mean something: a stall in
// walrelay shows in "after", a CPU-starved or slow walsender in "pg".
//
// During the run it also samples, once per -sample, the CPU (utime+stime
// deltas of /proc/<pid>/stat) of walrelay, of the walsender serving its slot
// and of the Kafka broker, walrelay's memory (VmRSS, VmHWM), the machine's
// busy CPU (/proc/stat), how far the slot's decoding position (sent_lsn)
// and confirmed_flush_lsn are behind pg_current_wal_lsn(), and how many bytes
// sit in the kernel between the walsender and walrelay (/proc/net/tcp): a
// walsender blocked on a full socket is walrelay not reading, not Postgres.
//
// It is run by test/bench/latency.sh, which starts Postgres, Kafka and
// walrelay with --topic 'lat.{aggregate_type}'. Each run uses its own
// aggregate type (-label), hence its own topic lat.<label>, created here
// before any event is written so the consumer is attached from offset 0.
// Before the clock starts, -warmup of ping events (50/s, not counted) run end
// to end: a freshly started consumer showed one partition delivered only at
// the end of its first fetch wait (records up to FetchMaxWait late).
//
// Output: a human-readable summary on stderr, and one machine-readable line
// on stdout:
//
//	LAT label=.. target_eps=.. achieved_eps=.. txn_size=.. conns=.. sent=.. received=.. dup=..
//	    missing=.. p50_ms=.. p90_ms=.. p99_ms=.. p999_ms=.. max_ms=.. ack_p50_ms=.. ack_p99_ms=..
//	    pg_p50_ms=.. pg_p99_ms=.. pg_max_ms=.. after_p50_ms=.. after_p99_ms=.. after_max_ms=..
//	    cpu_avg_pct=.. cpu_max_pct=.. walsender_cpu_pct=.. kafka_cpu_pct=.. rss_max_mb=.. hwm_mb=..
//	    sys_busy_pct=.. decode_lag_max_kb=.. confirm_lag_max_kb=.. sockq_mean_kb=.. sockq_max_kb=..
//	    walsender_running_pct=.. writer_late_max_ms=..
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// clkTck is USER_HZ, the unit of utime and stime in /proc/<pid>/stat. It is
// 100 on every mainstream Linux build (sysconf needs cgo).
const clkTck = 100

const insertSQL = `INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload)
SELECT $1, s::text, 'LatencyEvent', jsonb_build_object('seq', s, 'pad', $4::text)
FROM generate_series($2::bigint, $3::bigint) AS s`

type options struct {
	dsn, brokers, topicPrefix, label string
	rate                             int
	duration, drain, sample, warmup  time.Duration
	lsnSample, fetchMaxWait          time.Duration
	txnSize, conns, payload          int
	pid, kafkaPID                    int
	slot, timeline, raw              string
	logAppendTime                    bool
	relay                            relayOptions // relays.go
}

func main() {
	var o options
	flag.StringVar(&o.dsn, "pg", os.Getenv("WALRELAY_TEST_PG_DSN"), "Postgres DSN (env WALRELAY_TEST_PG_DSN)")
	flag.StringVar(&o.brokers, "brokers", os.Getenv("WALRELAY_TEST_KAFKA"), "Kafka seed brokers, comma-separated (env WALRELAY_TEST_KAFKA)")
	flag.StringVar(&o.topicPrefix, "topic-prefix", "lat", "walrelay's topic is <prefix>.<label> (walrelay --topic '<prefix>.{aggregate_type}')")
	flag.StringVar(&o.label, "label", "", "run label: the events' aggregate_type, hence the topic <prefix>.<label>; must be new")
	flag.IntVar(&o.rate, "rate", 1000, "events per second to write; 0 writes as fast as the connections can")
	flag.DurationVar(&o.duration, "duration", 20*time.Second, "how long to write")
	flag.IntVar(&o.txnSize, "txn-size", 1, "events per transaction")
	flag.IntVar(&o.conns, "conns", 4, "concurrent writer connections")
	flag.IntVar(&o.payload, "payload", 200, "approximate payload size in bytes (jsonb text)")
	flag.DurationVar(&o.warmup, "warmup", 2*time.Second, "ping events at 50/s before the clock starts (not counted)")
	flag.DurationVar(&o.drain, "drain", 60*time.Second, "how long to wait for the last events after writing stopped")
	flag.IntVar(&o.pid, "pid", 0, "walrelay's pid, for CPU and RSS samples (0: none)")
	flag.IntVar(&o.kafkaPID, "kafka-pid", 0, "the Kafka broker's pid, for CPU samples (0: none)")
	flag.StringVar(&o.slot, "slot", "walrelay_lat", "walrelay's slot: its walsender's CPU and sent_lsn and the slot's lag are sampled")
	flag.DurationVar(&o.sample, "sample", time.Second, "sampling interval of CPU, RSS and slot lag")
	flag.DurationVar(&o.lsnSample, "lsn-sample", 10*time.Millisecond, "sampling interval of the walsender's sent_lsn (0: off)")
	flag.DurationVar(&o.fetchMaxWait, "fetch-max-wait", 500*time.Millisecond, "consumer fetch max wait (Kafka's Java consumer default: 500ms)")
	flag.StringVar(&o.timeline, "timeline", "", "write a per-second CSV (by commit second) to this file")
	flag.BoolVar(&o.logAppendTime, "log-append-time", false, "diagnosis: create the topic with message.timestamp.type=LogAppendTime, so latency is measured from the broker's append (Kafka and consumer only)")
	flag.StringVar(&o.raw, "raw", "", "write every received event (seq, partition, LSN, commit timestamp, receive time) as CSV to this file")
	o.relay.register(flag.CommandLine)
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "latency:", err)
		os.Exit(1)
	}
}

// received is one consumed record.
type received struct {
	seq  int64
	part int32
	lsn  uint64
	recv int64 // unix ns when the fetch holding it was returned
	ts   int64 // record timestamp, unix ns (millisecond resolution)
}

// consumer collects records of one topic. Events have seq >= 1; pings <= 0.
type consumer struct {
	cl     *kgo.Client
	mu     sync.Mutex
	recs   []received
	pings  []received
	seen   []bool
	unique atomic.Int64
	dups   atomic.Int64
	npings atomic.Int64
	ping   chan struct{} // closed at the first ping
}

func (c *consumer) run(ctx context.Context) {
	for {
		fs := c.cl.PollFetches(ctx)
		now := time.Now().UnixNano()
		if fs.IsClientClosed() || ctx.Err() != nil {
			return
		}
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				fmt.Fprintf(os.Stderr, "latency: fetch %s[%d]: %v\n", t, p, err)
			}
		})
		c.mu.Lock()
		fs.EachRecord(func(r *kgo.Record) {
			seq, err := strconv.ParseInt(string(r.Key), 10, 64)
			if err != nil {
				fmt.Fprintf(os.Stderr, "latency: record with key %q at %s[%d]@%d ignored\n", r.Key, r.Topic, r.Partition, r.Offset)
				return
			}
			rec := received{seq: seq, part: r.Partition, recv: now, ts: r.Timestamp.UnixNano()}
			for _, h := range r.Headers {
				if h.Key == "walrelay.lsn" {
					rec.lsn = parseLSN(string(h.Value))
				}
			}
			if seq <= 0 {
				if c.npings.Add(1) == 1 {
					close(c.ping)
				}
				c.pings = append(c.pings, rec)
				return
			}
			for int64(len(c.seen)) <= seq {
				c.seen = append(c.seen, make([]bool, len(c.seen)+1024)...)
			}
			if c.seen[seq] {
				c.dups.Add(1)
				return
			}
			c.seen[seq] = true
			c.recs = append(c.recs, rec)
			c.unique.Add(1)
		})
		c.mu.Unlock()
	}
}

// parseLSN parses "X/Y" (hex); 0 when malformed.
func parseLSN(s string) uint64 {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0
	}
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if err1 != nil || err2 != nil {
		return 0
	}
	return h<<32 | l
}

// proc is a process whose CPU is sampled.
type proc struct {
	name string
	pid  int
}

// sample is one sample of the watched processes, the machine and the slot.
type sample struct {
	at       time.Time
	ticks    []int64 // utime+stime per watched process; -1 when unreadable
	rssKB    int64   // walrelay (procs[0])
	hwmKB    int64
	sysBusy  int64 // /proc/stat jiffies, all CPUs
	sysTotal int64
	// Bytes between pg_current_wal_lsn() and the walsender's decoding position
	// (sent_lsn), and the slot's confirmed_flush_lsn; -1 when unknown.
	decodeLag, confirmLag int64
	// Bytes queued in the kernel on the replication connection: sent by the
	// walsender and not yet read by walrelay (both sockets' queues); -1 when
	// unknown. Large values mean walrelay is not keeping up with reading.
	sockQ int64
}

func readProc(procs []proc) sample {
	s := sample{at: time.Now(), ticks: make([]int64, len(procs)), decodeLag: -1, confirmLag: -1, sockQ: -1}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := bytes.Cut(b, []byte("\n"))
		f := strings.Fields(string(line))
		for i, v := range f[1:] {
			n, _ := strconv.ParseInt(v, 10, 64)
			if i >= 8 { // guest and guest_nice are already in user and nice
				break
			}
			s.sysTotal += n
			if i != 3 && i != 4 { // idle, iowait
				s.sysBusy += n
			}
		}
	}
	for i, p := range procs {
		s.ticks[i] = -1
		if p.pid <= 0 {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid))
		if err != nil {
			continue
		}
		// Fields after the command (which may hold spaces) start with the state, field 3.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 13 {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		s.ticks[i] = ut + st
	}
	if len(procs) > 0 && procs[0].pid > 0 {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", procs[0].pid)); err == nil {
			sc := bufio.NewScanner(bytes.NewReader(b))
			for sc.Scan() {
				k, v, _ := strings.Cut(sc.Text(), ":")
				n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				switch k {
				case "VmRSS":
					s.rssKB = n
				case "VmHWM":
					s.hwmKB = n
				}
			}
		}
	}
	return s
}

// tcpQueued returns the bytes queued on the loopback TCP connection between
// ports a and b (tx_queue + rx_queue of both ends, /proc/net/tcp), or -1 when
// it is not found. Reading /proc/net/tcp costs milliseconds of kernel time on
// a machine with many sockets: once per -sample only.
func tcpQueued(a, b int) int64 {
	if a <= 0 || b <= 0 {
		return -1
	}
	f, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return -1
	}
	port := func(addr string) int {
		_, p, _ := strings.Cut(addr, ":")
		n, _ := strconv.ParseInt(p, 16, 32)
		return int(n)
	}
	var sum int64 = -1
	for _, line := range strings.Split(string(f), "\n")[1:] {
		fs := strings.Fields(line)
		if len(fs) < 5 {
			continue
		}
		l, r := port(fs[1]), port(fs[2])
		if (l == a && r == b) || (l == b && r == a) {
			tx, rx, _ := strings.Cut(fs[4], ":")
			t, _ := strconv.ParseInt(tx, 16, 64)
			x, _ := strconv.ParseInt(rx, 16, 64)
			sum = max(sum, 0) + t + x
		}
	}
	return sum
}

// cpuStats returns process i's average CPU percent between the first and the
// last sample and its highest over one sampling interval (100: one core).
func cpuStats(samples []sample, i int) (avg, peak float64) {
	avg, peak = math.NaN(), math.NaN()
	first, last := samples[0], samples[len(samples)-1]
	if first.ticks[i] < 0 || last.ticks[i] < 0 {
		return avg, peak
	}
	if wall := last.at.Sub(first.at).Seconds(); wall > 0 {
		avg = float64(last.ticks[i]-first.ticks[i]) / clkTck / wall * 100
	}
	for j := 1; j < len(samples); j++ {
		a, b := samples[j-1], samples[j]
		if a.ticks[i] < 0 || b.ticks[i] < 0 {
			continue
		}
		if wall := b.at.Sub(a.at).Seconds(); wall > 0.2 {
			v := float64(b.ticks[i]-a.ticks[i]) / clkTck / wall * 100
			if math.IsNaN(peak) || v > peak {
				peak = v
			}
		}
	}
	return avg, peak
}

// lsnSample is the walsender's sent_lsn at a time.
type lsnSample struct {
	at  int64
	lsn uint64
}

// fastStats are what the -lsn-sample sampler sees besides sent_lsn: the
// walsender's scheduler state (R: running or waiting for a CPU; S: sleeping,
// e.g. on a full socket or for new WAL).
type fastStats struct {
	n, running, sleeping int
}

// procState returns the state letter of /proc/<pid>/stat, 0 when unreadable.
func procState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

// decodedAt estimates when the walsender passed lsn: the midpoint between the
// last sample still at or before it and the first one past it (so within
// half a sampling interval). 0 when no sample has passed it, lsn is unknown,
// or it was passed before the first sample.
func decodedAt(ls []lsnSample, lsn uint64) int64 {
	if lsn == 0 {
		return 0
	}
	i := sort.Search(len(ls), func(i int) bool { return ls[i].lsn > lsn })
	if i == 0 || i == len(ls) {
		return 0
	}
	return ls[i-1].at + (ls[i].at-ls[i-1].at)/2
}

// ack is when a writer's transaction of events first..first+n-1 returned.
type ack struct {
	first int64
	at    int64
}

// every runs fn every d until ctx is done; the returned channel closes after.
func every(ctx context.Context, d time.Duration, fn func()) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				fn()
			}
		}
	}()
	return done
}

func run(o options) error {
	if o.dsn == "" || o.brokers == "" || o.label == "" {
		return errors.New("-pg, -brokers and -label are required")
	}
	if o.rate < 0 || o.txnSize < 1 || o.conns < 1 || o.duration <= 0 {
		return errors.New("-rate must be >= 0, -txn-size and -conns >= 1, -duration > 0")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	topic := o.topicPrefix + "." + o.label
	brokers := strings.Split(o.brokers, ",")

	// The topic first, so the consumer reads it from offset 0 without
	// waiting for a metadata refresh after walrelay would have created it.
	adm, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	var topicCfg map[string]*string
	if o.logAppendTime {
		topicCfg = map[string]*string{"message.timestamp.type": kadm.StringPtr("LogAppendTime")}
	}
	if _, err := kadm.NewClient(adm).CreateTopic(ctx, -1, -1, topicCfg, topic); err != nil {
		adm.Close()
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	adm.Close()

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(o.fetchMaxWait),
		// read_committed: with --delivery=exactly-once a record counts only once its Kafka
		// transaction committed (what a correct consumer sees); same as read_uncommitted otherwise.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return err
	}
	defer cl.Close()
	c := &consumer{cl: cl, ping: make(chan struct{})}
	cctx, stopConsumer := context.WithCancel(ctx)
	defer stopConsumer()
	consumerDone := make(chan struct{})
	go func() { defer close(consumerDone); c.run(cctx) }()
	insertStmt, err := o.relay.insertStatement()
	if err != nil {
		return err
	}
	relays, stopRelays, err := startRelays(ctx, o.relay, o.label, brokers, o.fetchMaxWait)
	if err != nil {
		return err
	}
	defer stopRelays()

	connect := func() (*pgx.Conn, error) {
		conn, err := pgx.Connect(ctx, o.dsn)
		if err != nil {
			return nil, fmt.Errorf("connect to postgres: %w", err)
		}
		return conn, nil
	}
	conns := make([]*pgx.Conn, o.conns)
	for i := range conns {
		if conns[i], err = connect(); err != nil {
			return err
		}
		defer conns[i].Close(context.Background())
	}
	pad := strings.Repeat("x", max(o.payload-26, 0)) // {"pad": "…", "seq": 123456}

	// Ping (seq 0) end to end, then -warmup of pings (seq -1, -2, ...) at 50/s,
	// all of which must arrive before the clock starts.
	pingStart := time.Now()
	if _, err := conns[0].Exec(ctx, insertStmt, o.label, 0, 0, pad); err != nil {
		return fmt.Errorf("insert: %w", err)
	}
	select {
	case <-c.ping:
	case <-time.After(60 * time.Second):
		return fmt.Errorf("the ping event did not arrive on %s within 60 s: is walrelay running with --topic '%s.{aggregate_type}'?", topic, o.topicPrefix)
	}
	if err := waitPings(relays, 1, 60*time.Second); err != nil {
		return err
	}
	pingRTT := time.Since(pingStart)
	npings := int64(1)
	warmEnd := time.Now().Add(o.warmup)
	for time.Now().Before(warmEnd) {
		time.Sleep(20 * time.Millisecond)
		if _, err := conns[0].Exec(ctx, insertStmt, o.label, -npings, -npings, pad); err != nil {
			return fmt.Errorf("insert: %w", err)
		}
		npings++
	}
	for deadline := time.Now().Add(30 * time.Second); c.npings.Load() < npings; {
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d warm-up pings arrived within 30 s", c.npings.Load(), npings)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := waitPings(relays, npings, 30*time.Second); err != nil {
		return err
	}
	c.mu.Lock()
	var warmLast []int64 // latencies of pings sent in the last half of the warm-up
	for _, p := range c.pings {
		if p.ts >= warmEnd.Add(-o.warmup/2).UnixNano() {
			warmLast = append(warmLast, p.recv-p.ts)
		}
	}
	c.mu.Unlock()
	slices.Sort(warmLast)
	fmt.Fprintf(os.Stderr, "latency: %s: ping round trip %.1f ms; %d warm-up pings, max %.1f ms in the last %s; writing for %s\n",
		o.label, ms(pingRTT), npings, pct(warmLast, 100), o.warmup/2, o.duration)

	// Sampling: walrelay, the slot's walsender, Kafka; the slot's lags and
	// the walsender's sent_lsn over connections of their own.
	procs := []proc{{"walrelay", o.pid}, {"walsender", 0}, {"kafka", o.kafkaPID}, {"self", os.Getpid()}}
	mon, err := connect()
	if err != nil {
		return err
	}
	defer mon.Close(context.Background())
	var wsPID, clientPort, serverPort pgtype.Int4
	if err := mon.QueryRow(ctx, `SELECT s.active_pid, r.client_port, current_setting('port')::int
		FROM pg_replication_slots s LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid WHERE s.slot_name = $1`, o.slot).Scan(&wsPID, &clientPort, &serverPort); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("find the walsender of slot %s: %w", o.slot, err)
	}
	procs[1].pid = int(wsPID.Int32)
	var samples []sample
	var smu sync.Mutex
	sampleNow := func() {
		s := readProc(procs)
		s.sockQ = tcpQueued(int(clientPort.Int32), int(serverPort.Int32))
		var dl, cl pgtype.Int8
		err := mon.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), r.sent_lsn)::bigint,
			pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn)::bigint
			FROM pg_replication_slots s LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid WHERE s.slot_name = $1`, o.slot).Scan(&dl, &cl)
		if err == nil {
			if dl.Valid {
				s.decodeLag = dl.Int64
			}
			if cl.Valid {
				s.confirmLag = cl.Int64
			}
		}
		smu.Lock()
		samples = append(samples, s)
		smu.Unlock()
	}
	sampleNow()
	sctx, stopSamplers := context.WithCancel(ctx)
	defer stopSamplers()
	samplerDone := every(sctx, o.sample, sampleNow)
	var lsns []lsnSample // written by the LSN sampler only, read after it stopped
	var fast fastStats   // likewise
	var lsnDone <-chan struct{}
	if o.lsnSample > 0 && wsPID.Valid {
		lconn, err := connect()
		if err != nil {
			return err
		}
		defer lconn.Close(context.Background())
		lsnDone = every(sctx, o.lsnSample, func() {
			var l pgtype.Text
			if err := lconn.QueryRow(sctx, "SELECT sent_lsn::text FROM pg_stat_get_wal_senders() WHERE pid = $1", wsPID.Int32).Scan(&l); err == nil && l.Valid {
				lsns = append(lsns, lsnSample{at: time.Now().UnixNano(), lsn: parseLSN(l.String)})
			}
			fast.n++
			switch procState(int(wsPID.Int32)) {
			case 'R':
				fast.running++
			case 'S':
				fast.sleeping++
			}

		})
	} else {
		closed := make(chan struct{})
		close(closed)
		lsnDone = closed
	}

	// Writers share one open-loop schedule: transaction n is due at
	// t0 + n*txnSize/rate, whichever connection is free takes it. A writer
	// that falls behind does not skip slots; nothing starts after t0+duration.
	t0 := time.Now()
	end := t0.Add(o.duration)
	var next atomic.Int64
	var lateMax atomic.Int64
	acks := make([][]ack, o.conns)
	var wg sync.WaitGroup
	errc := make(chan error, o.conns)
	for w := range o.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn := conns[w]
			for {
				n := next.Add(1) - 1
				now := time.Now()
				if o.rate > 0 {
					due := t0.Add(time.Duration(float64(n) * float64(o.txnSize) / float64(o.rate) * float64(time.Second)))
					if !due.Before(end) {
						return
					}
					if d := due.Sub(now); d > 0 {
						time.Sleep(d)
					} else {
						for late := int64(-d); ; {
							cur := lateMax.Load()
							if late <= cur || lateMax.CompareAndSwap(cur, late) {
								break
							}
						}
					}
				}
				if !time.Now().Before(end) {
					return
				}
				first := n*int64(o.txnSize) + 1
				if _, err := conn.Exec(ctx, insertStmt, o.label, first, first+int64(o.txnSize)-1, pad); err != nil {
					errc <- fmt.Errorf("insert: %w", err)
					return
				}
				acks[w] = append(acks[w], ack{first: first, at: time.Now().UnixNano()})
			}
		}()
	}
	wg.Wait()
	writeEnd := time.Now()
	select {
	case err := <-errc:
		return err
	default:
	}
	var sent int64
	var lastAck int64
	for _, as := range acks {
		sent += int64(len(as)) * int64(o.txnSize)
		if len(as) > 0 {
			lastAck = max(lastAck, as[len(as)-1].at)
		}
	}
	writeSpan := writeEnd.Sub(t0)
	if lastAck > 0 {
		writeSpan = time.Unix(0, lastAck).Sub(t0)
	}

	// Drain: wait for every event sent (or the drain timeout).
	drainDeadline := time.Now().Add(o.drain)
	for (c.unique.Load() < sent || relaysBehind(relays, sent)) && time.Now().Before(drainDeadline) {
		time.Sleep(5 * time.Millisecond)
	}
	allIn := time.Now()
	stopSamplers()
	<-samplerDone
	<-lsnDone
	sampleNow()
	stopConsumer()
	<-consumerDone
	stopRelays()

	c.mu.Lock()
	recs := c.recs
	c.mu.Unlock()

	// Latencies, in total and split at the walsender.
	lat := make([]int64, len(recs))
	var pgLat, afterLat []int64
	for i, r := range recs {
		lat[i] = r.recv - r.ts
		if at := decodedAt(lsns, r.lsn); at > 0 {
			pgLat = append(pgLat, max(at-r.ts, 0))
			afterLat = append(afterLat, max(r.recv-at, 0))
		}
	}
	slices.Sort(lat)
	slices.Sort(pgLat)
	slices.Sort(afterLat)
	ackAt := make(map[int64]int64, sent/int64(o.txnSize))
	for _, as := range acks {
		for _, a := range as {
			ackAt[a.first] = a.at
		}
	}
	var ackLat []int64
	for _, r := range recs {
		first := (r.seq-1)/int64(o.txnSize)*int64(o.txnSize) + 1
		if at, ok := ackAt[first]; ok {
			ackLat = append(ackLat, r.recv-at)
		}
	}
	slices.Sort(ackLat)

	// CPU, memory and lags over [t0, allIn].
	wrCPU, wrCPUMax := cpuStats(samples, 0)
	wsCPU, wsCPUMax := cpuStats(samples, 1)
	kCPU, _ := cpuStats(samples, 2)
	selfCPU, _ := cpuStats(samples, 3)
	var sysBusy float64
	first, last := samples[0], samples[len(samples)-1]
	if d := last.sysTotal - first.sysTotal; d > 0 {
		sysBusy = float64(last.sysBusy-first.sysBusy) / float64(d) * 100
	}
	var rssMax, hwm, decodeLagMax, confirmLagMax int64
	var sockQMax, sockQSum, sockQN int64 = -1, 0, 0
	sockQMean, wsRunning := math.NaN(), math.NaN()
	if fast.n > 0 {
		wsRunning = float64(fast.running) / float64(fast.n) * 100
	}
	for _, s := range samples {
		sockQMax = max(sockQMax, s.sockQ)
		if s.sockQ >= 0 {
			sockQSum += s.sockQ
			sockQN++
		}
		rssMax = max(rssMax, s.rssKB)
		hwm = max(hwm, s.hwmKB)
		decodeLagMax = max(decodeLagMax, s.decodeLag)
		confirmLagMax = max(confirmLagMax, s.confirmLag)
	}
	if o.raw != "" {
		var b strings.Builder
		b.WriteString("seq,partition,lsn,commit_ts_ns,decoded_ns,recv_ns\n")
		for _, r := range recs {
			fmt.Fprintf(&b, "%d,%d,%d,%d,%d,%d\n", r.seq, r.part, r.lsn, r.ts, decodedAt(lsns, r.lsn), r.recv)
		}
		if err := os.WriteFile(o.raw, []byte(b.String()), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "latency:", err)
		}
	}

	unique := int64(len(recs))
	achieved := float64(sent) / writeSpan.Seconds()
	target := "max"
	if o.rate > 0 {
		target = strconv.Itoa(o.rate)
	}
	fmt.Fprintf(os.Stderr, "latency: %s: target %s ev/s, achieved %.0f ev/s (%d events in %d-event transactions on %d connections over %.2f s; writer at most %.1f ms behind schedule)\n",
		o.label, target, achieved, sent, o.txnSize, o.conns, writeSpan.Seconds(), ms(time.Duration(lateMax.Load())))
	fmt.Fprintf(os.Stderr, "latency: %s: received %d (duplicates %d, missing %d) %.2f s after writing stopped\n",
		o.label, unique, c.dups.Load(), sent-unique, allIn.Sub(writeEnd).Seconds())
	fmt.Fprintf(os.Stderr, "latency: %s: commit->receive ms: p50 %.1f p90 %.1f p99 %.1f p99.9 %.1f max %.1f; ack->receive ms: p50 %.1f p99 %.1f\n",
		o.label, pct(lat, 50), pct(lat, 90), pct(lat, 99), pct(lat, 99.9), pct(lat, 100), pct(ackLat, 50), pct(ackLat, 99))
	fmt.Fprintf(os.Stderr, "latency: %s: split at the walsender (%d sent_lsn samples, every %s; %d events placed): commit->decoded p50 %.1f p99 %.1f max %.1f; decoded->receive p50 %.1f p99 %.1f max %.1f\n",
		o.label, len(lsns), o.lsnSample, len(pgLat), pct(pgLat, 50), pct(pgLat, 99), pct(pgLat, 100), pct(afterLat, 50), pct(afterLat, 99), pct(afterLat, 100))
	if sockQN > 0 {
		sockQMean = float64(sockQSum) / float64(sockQN)
	}
	fmt.Fprintf(os.Stderr, "latency: %s: CPU (100%% = one core) walrelay avg %.0f%% max %.0f%%, walsender avg %.0f%% max %.0f%%, Kafka avg %.0f%%, this program (writers, consumer, samplers) avg %.0f%%; machine busy %.0f%% of %d cores\n",
		o.label, wrCPU, wrCPUMax, wsCPU, wsCPUMax, kCPU, selfCPU, sysBusy, runtime.NumCPU())
	fmt.Fprintf(os.Stderr, "latency: %s: walrelay RSS max %.1f MB, VmHWM %.1f MB; every %s: max %.0f kB of WAL not decoded yet, max %.0f kB not confirmed yet, %.0f kB mean / %.0f kB max sent by the walsender and unread by walrelay\n",
		o.label, float64(rssMax)/1024, float64(hwm)/1024, o.sample, float64(decodeLagMax)/1024, float64(confirmLagMax)/1024, sockQMean/1024, float64(sockQMax)/1024)
	fmt.Fprintf(os.Stderr, "latency: %s: every %s: walsender running/runnable in %.0f%% of %d samples (sleeping %d)\n",
		o.label, o.lsnSample, wsRunning, fast.n, fast.sleeping)
	worst := timeline(recs, lsns, t0, o.timeline)
	if len(worst) > 0 {
		fmt.Fprintf(os.Stderr, "latency: %s: worst seconds (commit second since start: max ms [pg max / after max] / p99 ms / events): %s\n", o.label, strings.Join(worst, ", "))
	}

	fmt.Printf("LAT label=%s target_eps=%s achieved_eps=%.0f txn_size=%d conns=%d sent=%d received=%d dup=%d missing=%d "+
		"p50_ms=%.1f p90_ms=%.1f p99_ms=%.1f p999_ms=%.1f max_ms=%.1f ack_p50_ms=%.1f ack_p99_ms=%.1f "+
		"pg_p50_ms=%.1f pg_p99_ms=%.1f pg_max_ms=%.1f after_p50_ms=%.1f after_p99_ms=%.1f after_max_ms=%.1f "+
		"cpu_avg_pct=%.0f cpu_max_pct=%.0f walsender_cpu_pct=%.0f kafka_cpu_pct=%.0f rss_max_mb=%.1f hwm_mb=%.1f sys_busy_pct=%.0f "+
		"decode_lag_max_kb=%.0f confirm_lag_max_kb=%.0f sockq_mean_kb=%.0f sockq_max_kb=%.0f walsender_running_pct=%.0f writer_late_max_ms=%.1f\n",
		o.label, target, achieved, o.txnSize, o.conns, sent, unique, c.dups.Load(), sent-unique,
		pct(lat, 50), pct(lat, 90), pct(lat, 99), pct(lat, 99.9), pct(lat, 100), pct(ackLat, 50), pct(ackLat, 99),
		pct(pgLat, 50), pct(pgLat, 99), pct(pgLat, 100), pct(afterLat, 50), pct(afterLat, 99), pct(afterLat, 100),
		wrCPU, wrCPUMax, wsCPU, kCPU, float64(rssMax)/1024, float64(hwm)/1024, sysBusy,
		float64(decodeLagMax)/1024, float64(confirmLagMax)/1024, sockQMean/1024, float64(sockQMax)/1024, wsRunning, ms(time.Duration(lateMax.Load())))
	if err := reportRelays(ctx, mon, o.relay, o.label, o.topicPrefix, c, relays, ackAt, o.txnSize, sent); err != nil {
		return err
	}
	if sent != unique {
		return fmt.Errorf("%d of %d events did not arrive within %s", sent-unique, sent, o.drain)
	}
	return nil
}

// timeline buckets records by commit second since t0, writes them as CSV to
// path (when set) and returns the three worst seconds by max latency.
func timeline(recs []received, lsns []lsnSample, t0 time.Time, path string) []string {
	type bucket struct{ lat, pg, after []int64 }
	buckets := map[int64]*bucket{}
	for _, r := range recs {
		s := (r.ts - t0.UnixNano()) / int64(time.Second)
		b := buckets[s]
		if b == nil {
			b = &bucket{}
			buckets[s] = b
		}
		b.lat = append(b.lat, r.recv-r.ts)
		if at := decodedAt(lsns, r.lsn); at > 0 {
			b.pg = append(b.pg, max(at-r.ts, 0))
			b.after = append(b.after, max(r.recv-at, 0))
		}
	}
	keys := make([]int64, 0, len(buckets))
	for k, b := range buckets {
		keys = append(keys, k)
		slices.Sort(b.lat)
		slices.Sort(b.pg)
		slices.Sort(b.after)
	}
	slices.Sort(keys)
	if path != "" {
		var sb strings.Builder
		sb.WriteString("second,events,p50_ms,p99_ms,max_ms,pg_p99_ms,pg_max_ms,after_p99_ms,after_max_ms\n")
		for _, k := range keys {
			b := buckets[k]
			fmt.Fprintf(&sb, "%d,%d,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f\n", k, len(b.lat), pct(b.lat, 50), pct(b.lat, 99), pct(b.lat, 100),
				pct(b.pg, 99), pct(b.pg, 100), pct(b.after, 99), pct(b.after, 100))
		}
		if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "latency:", err)
		}
	}
	slices.SortFunc(keys, func(a, b int64) int {
		la, lb := buckets[a].lat, buckets[b].lat
		return int(math.Copysign(1, float64(lb[len(lb)-1]-la[len(la)-1])))
	})
	var worst []string
	for _, k := range keys[:min(3, len(keys))] {
		b := buckets[k]
		worst = append(worst, fmt.Sprintf("s%d %.1f [%.1f / %.1f] / %.1f / %d", k, pct(b.lat, 100), pct(b.pg, 100), pct(b.after, 100), pct(b.lat, 99), len(b.lat)))
	}
	return worst
}

// pct returns the p-th percentile (nearest rank) of sorted nanoseconds, in ms.
func pct(sorted []int64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	i = min(max(i, 0), len(sorted)-1)
	return float64(sorted[i]) / 1e6
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }
