package main

// Several relays on the same writes (test/bench/debezium.sh): -also-topic-prefix adds a
// consumer per prefix (topic <prefix>.<label>, e.g. Debezium's EventRouter routed to
// <prefix>.${routedByValue}), -columns debezium writes Debezium's outbox columns, and
// -commit-ts measures every relay from the same reference, the transaction's commit
// timestamp as Postgres recorded it (pg_xact_commit_timestamp, microseconds; needs
// track_commit_timestamp = on). A Debezium record's Kafka timestamp is the time Debezium
// processed the change, not the commit time, so record timestamps cannot compare the two.
//
// Extra output with -also-topic-prefix or -commit-ts, one line per relay (the primary
// -topic-prefix first):
//
//	LATX label=.. prefix=.. sent=.. received=.. dup=.. missing=.. cts_p50_ms=.. cts_p90_ms=..
//	    cts_p99_ms=.. cts_p999_ms=.. cts_max_ms=.. ack_p50_ms=.. ack_p99_ms=.. ts_p50_ms=.. ts_p99_ms=..
//
// cts_*: commit timestamp -> receive; ack_*: the writer's INSERT returned -> receive; ts_*:
// Kafka record timestamp -> receive (walrelay: the commit time in ms; Debezium: its
// processing time). NaN when not measured.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// relayOptions are the flags of this file.
type relayOptions struct {
	table, columns, alsoPrefixes string
	commitTS                     bool
}

func (r *relayOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&r.table, "table", "public.outbox", "outbox table the writers insert into (schema.name)")
	fs.StringVar(&r.columns, "columns", "default", "outbox columns: default (aggregate_type, aggregate_id, event_type) or debezium (id, aggregatetype, aggregateid, type)")
	fs.StringVar(&r.alsoPrefixes, "also-topic-prefix", "", "comma-separated topic prefixes of more relays reading the same writes: each gets a consumer on <prefix>.<label> and a LATX line")
	fs.BoolVar(&r.commitTS, "commit-ts", false, "also measure from pg_xact_commit_timestamp (track_commit_timestamp must be on): LATX cts_* fields")
}

// outboxColumns returns the aggregate type and aggregate id columns.
func (r *relayOptions) outboxColumns() (aggType, aggID string) {
	if r.columns == "debezium" {
		return "aggregatetype", "aggregateid"
	}
	return "aggregate_type", "aggregate_id"
}

// insertStatement is the writers' INSERT ($1 label, $2..$3 seq range, $4 pad).
func (r *relayOptions) insertStatement() (string, error) {
	schema, name, ok := strings.Cut(r.table, ".")
	if !ok {
		return "", fmt.Errorf("-table %q: want schema.name", r.table)
	}
	tbl := pgx.Identifier{schema, name}.Sanitize()
	switch r.columns {
	case "default":
		return strings.Replace(insertSQL, "public.outbox", tbl, 1), nil
	case "debezium":
		return `INSERT INTO ` + tbl + ` (id, aggregatetype, aggregateid, type, payload)
SELECT gen_random_uuid(), $1, s::text, 'LatencyEvent', jsonb_build_object('seq', s, 'pad', $4::text)
FROM generate_series($2::bigint, $3::bigint) AS s`, nil
	}
	return "", fmt.Errorf("-columns must be default or debezium, got %q", r.columns)
}

// relay is one relay's consumer.
type relay struct {
	prefix string
	c      *consumer
	done   chan struct{}
}

// startRelays creates the topics of the -also-topic-prefix relays and starts their
// consumers; stop closes their clients (which ends their PollFetches) and waits for them.
func startRelays(ctx context.Context, r relayOptions, label string, brokers []string, fetchMaxWait time.Duration) (rs []*relay, stop func(), err error) {
	var once sync.Once
	stop = func() {
		once.Do(func() {
			for _, x := range rs {
				x.c.cl.Close()
				<-x.done
			}
		})
	}
	if r.alsoPrefixes == "" {
		return nil, stop, nil
	}
	adm, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, stop, err
	}
	defer adm.Close()
	for _, p := range strings.Split(r.alsoPrefixes, ",") {
		topic := p + "." + label
		if _, err := kadm.NewClient(adm).CreateTopic(ctx, -1, -1, nil, topic); err != nil {
			stop()
			return nil, stop, fmt.Errorf("create topic %s: %w", topic, err)
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(fetchMaxWait),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()))
		if err != nil {
			stop()
			return nil, stop, err
		}
		x := &relay{prefix: p, c: &consumer{cl: cl, ping: make(chan struct{})}, done: make(chan struct{})}
		go func() { defer close(x.done); x.c.run(ctx) }()
		rs = append(rs, x)
	}
	return rs, stop, nil
}

// waitPings waits until every relay received n pings.
func waitPings(rs []*relay, n int64, d time.Duration) error {
	deadline := time.Now().Add(d)
	for _, x := range rs {
		for x.c.npings.Load() < n {
			if time.Now().After(deadline) {
				return fmt.Errorf("relay %s: %d of %d pings arrived within %s: is it running and routing to %s.<label>?", x.prefix, x.c.npings.Load(), n, d, x.prefix)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return nil
}

// relaysBehind reports whether a relay has fewer than sent events.
func relaysBehind(rs []*relay, sent int64) bool {
	for _, x := range rs {
		if x.c.unique.Load() < sent {
			return true
		}
	}
	return false
}

// commitTimes reads the commit timestamp (unix ns) of every event of the run, by seq.
func commitTimes(ctx context.Context, conn *pgx.Conn, r relayOptions, label string) (map[int64]int64, error) {
	schema, name, _ := strings.Cut(r.table, ".")
	aggType, aggID := r.outboxColumns()
	q := fmt.Sprintf(`SELECT %s::bigint, pg_xact_commit_timestamp(xmin) FROM %s WHERE %s = $1 AND %s::bigint > 0`,
		pgx.Identifier{aggID}.Sanitize(), pgx.Identifier{schema, name}.Sanitize(), pgx.Identifier{aggType}.Sanitize(), pgx.Identifier{aggID}.Sanitize())
	rows, err := conn.Query(ctx, q, label)
	if err != nil {
		return nil, fmt.Errorf("read commit timestamps: %w", err)
	}
	out := map[int64]int64{}
	for rows.Next() {
		var seq int64
		var at *time.Time
		if err := rows.Scan(&seq, &at); err != nil {
			return nil, fmt.Errorf("read commit timestamps: %w", err)
		}
		if at == nil {
			rows.Close()
			return nil, errors.New("pg_xact_commit_timestamp is NULL: -commit-ts needs track_commit_timestamp = on (set before the writes)")
		}
		out[seq] = at.UnixNano()
	}
	return out, rows.Err()
}

// reportRelays prints one LATX line per relay (primary first).
func reportRelays(ctx context.Context, conn *pgx.Conn, r relayOptions, label, primaryPrefix string, primary *consumer,
	rs []*relay, ackAt map[int64]int64, txnSize int, sent int64) error {
	if len(rs) == 0 && !r.commitTS {
		return nil // the LAT line says it all (test/bench/latency.sh)
	}
	var cts map[int64]int64
	if r.commitTS {
		var err error
		if cts, err = commitTimes(ctx, conn, r, label); err != nil {
			return err
		}
	}
	all := append([]*relay{{prefix: primaryPrefix, c: primary}}, rs...)
	var missing []string
	for _, x := range all {
		x.c.mu.Lock()
		recs := x.c.recs
		x.c.mu.Unlock()
		var ctsLat, ackLat, tsLat []int64
		for _, rec := range recs {
			tsLat = append(tsLat, rec.recv-rec.ts)
			if at, ok := cts[rec.seq]; ok {
				ctsLat = append(ctsLat, rec.recv-at)
			}
			first := (rec.seq-1)/int64(txnSize)*int64(txnSize) + 1
			if at, ok := ackAt[first]; ok {
				ackLat = append(ackLat, rec.recv-at)
			}
		}
		slices.Sort(ctsLat)
		slices.Sort(ackLat)
		slices.Sort(tsLat)
		n := int64(len(recs))
		fmt.Fprintf(os.Stderr, "latency: %s: relay %s: received %d of %d; commit(pg)->receive ms: p50 %.1f p99 %.1f p99.9 %.1f max %.1f\n",
			label, x.prefix, n, sent, pct(ctsLat, 50), pct(ctsLat, 99), pct(ctsLat, 99.9), pct(ctsLat, 100))
		fmt.Printf("LATX label=%s prefix=%s sent=%d received=%d dup=%d missing=%d cts_p50_ms=%.1f cts_p90_ms=%.1f cts_p99_ms=%.1f cts_p999_ms=%.1f cts_max_ms=%.1f "+
			"ack_p50_ms=%.1f ack_p99_ms=%.1f ts_p50_ms=%.1f ts_p99_ms=%.1f\n",
			label, x.prefix, sent, n, x.c.dups.Load(), sent-n, pct(ctsLat, 50), pct(ctsLat, 90), pct(ctsLat, 99), pct(ctsLat, 99.9), pct(ctsLat, 100),
			pct(ackLat, 50), pct(ackLat, 99), pct(tsLat, 50), pct(tsLat, 99))
		if n != sent {
			missing = append(missing, fmt.Sprintf("%s: %d of %d", x.prefix, sent-n, sent))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("events did not arrive: %s", strings.Join(missing, ", "))
	}
	return nil
}
