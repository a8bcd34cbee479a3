package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walrelay/walrelay/internal/testwait"
)

// outboxRow is a row of the outbox table as Postgres renders it.
type outboxRow struct {
	aggType, aggID, eventType string
	payload                   *string           // payload::text; nil for NULL
	strHeaders                map[string]string // top-level string entries of headers
	allHeaderKeys             []string
}

// readOutbox reads the whole outbox table, keyed by id.
func readOutbox(t *testing.T, dsn, table string) map[string]outboxRow {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out := map[string]outboxRow{}
	err := pgPool(t, dsn).with(ctx, func(c *pgx.Conn) error {
		rows, err := c.Query(ctx, fmt.Sprintf(
			`SELECT id::text, aggregate_type, aggregate_id, event_type, payload::text, headers::text FROM %s`,
			pgx.Identifier(strings.Split(table, ".")).Sanitize()))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id, headers string
			var r outboxRow
			if err := rows.Scan(&id, &r.aggType, &r.aggID, &r.eventType, &r.payload, &headers); err != nil {
				return err
			}
			var h map[string]any
			if err := json.Unmarshal([]byte(headers), &h); err != nil {
				return fmt.Errorf("outbox headers %q: %w", headers, err)
			}
			r.strHeaders = map[string]string{}
			for k, v := range h {
				r.allHeaderKeys = append(r.allHeaderKeys, k)
				if s, ok := v.(string); ok {
					r.strHeaders[k] = s
				}
			}
			out[id] = r
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatalf("read outbox %s: %v", table, err)
	}
	return out
}

// consumeAll reads every record of the topics starting with prefix, from the start to the
// end offsets as of the call. It waits (bounded) for the expected topics to exist.
func consumeAll(t *testing.T, brokers, prefix string, expectTopics []string) map[string][]*kgo.Record {
	t.Helper()
	return consumeAllIsolation(t, brokers, prefix, expectTopics, false)
}

// consumeAllIsolation is consumeAll; readCommitted reads as a read_committed
// consumer would (aborted records hidden), up to the last stable offsets.
func consumeAllIsolation(t *testing.T, brokers, prefix string, expectTopics []string, readCommitted bool) map[string][]*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	var topics []string
	for {
		var err error
		topics, err = topicsWithPrefix(ctx, t, brokers, prefix)
		if err == nil && len(missing(expectTopics, topics)) == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("topics with prefix %q: have %v, missing %v (err %v)", prefix, topics, missing(expectTopics, topics), err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	sort.Strings(topics)

	adm := newKafkaClient(t, brokers)
	defer adm.Close()
	ends, err := kadm.NewClient(adm).ListEndOffsets(ctx, topics...)
	if err != nil {
		t.Fatalf("list end offsets %v: %v", topics, err)
	}
	if readCommitted {
		ends = stableOffsets(ctx, t, kadm.NewClient(adm), topics, ends)
	}
	type tp struct {
		topic     string
		partition int32
	}
	want := map[tp]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("end offset %s/%d: %v", o.Topic, o.Partition, o.Err)
		}
		if o.Offset > 0 {
			want[tp{o.Topic, o.Partition}] = o.Offset
		}
	})

	opts := []kgo.Opt{
		kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(500 * time.Millisecond),
		kgo.WithDecompressor(newTestDecompressor()),
	}
	if readCommitted {
		// Control records (commit/abort markers) are kept so that the
		// consumer sees the end of a partition that ends with one; they are
		// not delivered records.
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	}
	cl := newKafkaClient(t, brokers, opts...)
	defer cl.Close()

	out := map[string][]*kgo.Record{}
	next := map[tp]int64{}
	done := func() bool {
		for k, end := range want {
			if next[k] < end {
				return false
			}
		}
		return true
	}
	lastReport := time.Now()
	for !done() {
		if time.Since(lastReport) > 5*time.Second {
			lastReport = time.Now()
			var lag []string
			for k, end := range want {
				if next[k] < end {
					lag = append(lag, fmt.Sprintf("%s/%d at %d of %d", k.topic, k.partition, next[k], end))
				}
			}
			t.Logf("consuming: behind on %s", strings.Join(lag, ", "))
		}
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			var lag []string
			for k, end := range want {
				if next[k] < end {
					lag = append(lag, fmt.Sprintf("%s/%d at %d of %d", k.topic, k.partition, next[k], end))
				}
			}
			t.Fatalf("consume %v: timed out, partitions behind: %s", topics, strings.Join(lag, ", "))
		}
		fs.EachError(func(topic string, p int32, err error) {
			t.Logf("fetch %s/%d: %v", topic, p, err)
		})
		fs.EachRecord(func(r *kgo.Record) {
			k := tp{r.Topic, r.Partition}
			if r.Offset >= next[k] {
				next[k] = r.Offset + 1
			}
			if r.Attrs.IsControl() {
				return
			}
			out[r.Topic] = append(out[r.Topic], r)
		})
	}
	for _, topic := range topics {
		if _, ok := out[topic]; !ok {
			out[topic] = nil
		}
	}
	return out
}

// sumEndOffsets is the number of records ever written to the topics starting with prefix.
func sumEndOffsets(t *testing.T, brokers, prefix string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topics, err := topicsWithPrefix(ctx, t, brokers, prefix)
	if err != nil {
		t.Fatalf("list topics: %v", err)
	}
	cl := newKafkaClient(t, brokers)
	defer cl.Close()
	// A topic created a moment ago may have no leader yet
	// (LEADER_NOT_AVAILABLE): asked again until the deadline.
	for {
		ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topics...)
		if err == nil {
			err = ends.Error()
		}
		if err == nil {
			var sum int64
			ends.Each(func(o kadm.ListedOffset) { sum += o.Offset })
			return sum
		}
		if ctx.Err() != nil {
			t.Fatalf("list end offsets %v: %v", topics, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func missing(want, have []string) []string {
	var m []string
	for _, w := range want {
		if !slices.Contains(have, w) {
			m = append(m, w)
		}
	}
	return m
}

// result is what the verifier found.
type result struct {
	committed           int // committed events written
	delivered           int // records read from the scenario's topics
	lost                int // committed events never delivered
	duplicates          int // deliveries beyond the first of an event
	orderViolations     int // first deliveries out of commit order within an aggregate
	rolledBackDelivered int // deliveries of events from rolled-back transactions
	unknown             int // deliveries that match no event of the workload
	fieldErrors         int // wrong topic, key, value, headers or timestamp
	dupEvents           map[*txnRec]int
	errs                []string // first field/order problems, for the log
	records             map[string][]*kgo.Record
}

func (r *result) problem(format string, args ...any) {
	if len(r.errs) < 25 {
		r.errs = append(r.errs, fmt.Sprintf(format, args...))
	}
}

// summary is the scenario's one-line report; extra is appended as is (e.g. "kills=5").
func (r *result) summary(scenario string, extra ...string) string {
	s := fmt.Sprintf("scenario=%s committed=%d delivered=%d lost=%d duplicates=%d order_violations=%d rolled_back_delivered=%d unknown=%d field_errors=%d",
		scenario, r.committed, r.delivered, r.lost, r.duplicates, r.orderViolations, r.rolledBackDelivered, r.unknown, r.fieldErrors)
	for _, e := range extra {
		s += " " + e
	}
	return s
}

// verify consumes the scenario's topics and checks them against the workload and the
// outbox table. It logs the first problems; the caller logs the summary and asserts.
func verify(t *testing.T, s *scenario, w *workload) *result {
	t.Helper()
	committed, rolledBack := w.snapshot()
	rows := readOutbox(t, s.env.pgDSN, s.table)

	byID := map[string]*eventRec{}
	topicSet := map[string]bool{}
	for _, ev := range committed {
		byID[ev.ID] = ev
		topicSet[s.name+"."+ev.AggType] = true
	}
	start := time.Now()
	recs := consumeAll(t, s.env.kafka, s.name+".", slices.Sorted(maps.Keys(topicSet)))
	t.Logf("consumed %d topics in %s", len(recs), time.Since(start).Round(time.Millisecond))

	return judge(t, s, committed, byID, rolledBack, rows, recs)
}

// judge checks consumed records against the committed events: every event
// present, first deliveries in commit order per aggregate, fields right, no
// rolled-back or unknown record. Shared by the e2e and fault verifiers.
func judge(t *testing.T, s *scenario, committed []*eventRec, byID map[string]*eventRec, rolledBack map[string]*eventRec, rows map[string]outboxRow, recs map[string][]*kgo.Record) *result {
	res := &result{committed: len(committed), dupEvents: map[*txnRec]int{}, records: recs}
	seen := map[string]int{}
	lastPos := map[string]int{}         // aggregate -> commit position of its last first-delivery
	aggPartition := map[string]string{} // aggregate -> topic/partition
	for _, topic := range slices.Sorted(maps.Keys(recs)) {
		list := slices.Clone(recs[topic])
		sort.SliceStable(list, func(i, j int) bool {
			if list[i].Partition != list[j].Partition {
				return list[i].Partition < list[j].Partition
			}
			return list[i].Offset < list[j].Offset
		})
		for _, rec := range list {
			res.delivered++
			id := header(rec, "id")
			ev, ok := byID[id]
			if !ok {
				if _, rb := rolledBack[id]; rb {
					res.rolledBackDelivered++
					res.problem("rolled-back event %s delivered at %s/%d@%d", id, rec.Topic, rec.Partition, rec.Offset)
				} else {
					res.unknown++
					res.problem("unknown record at %s/%d@%d: key=%q id header=%q", rec.Topic, rec.Partition, rec.Offset, rec.Key, id)
				}
				continue
			}
			checkRecord(res, s, rec, ev, rows[id])
			if tp := fmt.Sprintf("%s/%d", rec.Topic, rec.Partition); aggPartition[ev.AggID] == "" {
				aggPartition[ev.AggID] = tp
			} else if aggPartition[ev.AggID] != tp {
				res.fieldErrors++
				res.problem("aggregate %s split across partitions %s and %s", ev.AggID, aggPartition[ev.AggID], tp)
			}
			seen[id]++
			if seen[id] > 1 {
				res.duplicates++
				res.dupEvents[ev.Txn]++
				continue
			}
			if last, ok := lastPos[ev.AggID]; ok && ev.Pos < last {
				res.orderViolations++
				res.problem("order: aggregate %s: event #%d (txn %d) delivered after #%d, at %s/%d@%d",
					ev.AggID, ev.Pos, ev.Txn.Index, last, rec.Topic, rec.Partition, rec.Offset)
			}
			lastPos[ev.AggID] = max(lastPos[ev.AggID], ev.Pos)
		}
	}
	for _, ev := range committed {
		if seen[ev.ID] == 0 {
			res.lost++
			res.problem("lost: event %s (aggregate %s, commit position %d, txn %d, commit ≤ %s)",
				ev.ID, ev.AggID, ev.Pos, ev.Txn.Index, ev.Txn.PostLSN)
		}
	}
	for _, e := range res.errs {
		t.Log("  " + e)
	}
	return res
}

// requireClean fails the test unless nothing was lost, reordered, made up or wrong.
func (r *result) requireClean(t *testing.T) {
	t.Helper()
	if r.lost != 0 || r.orderViolations != 0 || r.rolledBackDelivered != 0 || r.unknown != 0 || r.fieldErrors != 0 {
		t.Errorf("delivery contract violated: lost=%d order_violations=%d rolled_back_delivered=%d unknown=%d field_errors=%d (details above)",
			r.lost, r.orderViolations, r.rolledBackDelivered, r.unknown, r.fieldErrors)
	}
	if r.committed == 0 {
		t.Error("the workload committed no event: the scenario proved nothing")
	}
}

func header(rec *kgo.Record, key string) string {
	for _, h := range rec.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// timestampSlack absorbs the millisecond precision of Kafka timestamps and the distance
// between the client's clock readings and the server's commit time (same machine).
const timestampSlack = time.Second

// checkRecord checks one delivery of ev against the record contract.
func checkRecord(res *result, s *scenario, rec *kgo.Record, ev *eventRec, row outboxRow) {
	bad := func(format string, args ...any) {
		res.fieldErrors++
		res.problem("event %s at %s/%d@%d: %s", ev.ID, rec.Topic, rec.Partition, rec.Offset, fmt.Sprintf(format, args...))
	}
	if row.aggID == "" {
		bad("row missing from the outbox table")
		return
	}
	if want := s.name + "." + ev.AggType; rec.Topic != want {
		bad("topic %q, want %q", rec.Topic, want)
	}
	if string(rec.Key) != ev.AggID {
		bad("key %q, want %q", rec.Key, ev.AggID)
	}
	switch {
	case row.payload == nil && rec.Value != nil:
		bad("value %q, want null (NULL payload)", rec.Value)
	case row.payload != nil && string(rec.Value) != *row.payload:
		bad("value %q, want payload::text %q", rec.Value, *row.payload)
	}

	tx := ev.Txn
	count := map[string]int{}
	for _, h := range rec.Headers {
		count[h.Key]++
	}
	for k, n := range count {
		if n > 1 {
			bad("header %q appears %d times", k, n)
		}
	}
	want := map[string]string{"id": ev.ID, "event_type": ev.EventType, "aggregate_type": ev.AggType}
	maps.Copy(want, row.strHeaders)
	for k, v := range want {
		if got := header(rec, k); count[k] == 0 || got != v {
			bad("header %q = %q (present %v), want %q", k, got, count[k] > 0, v)
		}
	}
	for _, k := range row.allHeaderKeys {
		if _, isString := row.strHeaders[k]; !isString && count[k] > 0 {
			bad("non-string headers entry %q became a Kafka header (%q)", k, header(rec, k))
		}
	}
	for k := range count {
		if _, ok := want[k]; !ok && !strings.HasPrefix(k, "walrelay.") && !slices.Contains(row.allHeaderKeys, k) {
			bad("unexpected header %q = %q", k, header(rec, k))
		}
	}
	if l, err := parseLSN(header(rec, "walrelay.lsn")); err != nil {
		bad("walrelay.lsn: %v", err)
	} else if l < tx.BeginLSN || l > tx.PostLSN {
		bad("walrelay.lsn %s outside the transaction's WAL range [%s, %s]", l, tx.BeginLSN, tx.PostLSN)
	}
	if x, err := strconv.ParseUint(header(rec, "walrelay.xid"), 10, 32); err != nil {
		bad("walrelay.xid %q: %v", header(rec, "walrelay.xid"), err)
	} else if uint32(x) != tx.XID {
		bad("walrelay.xid %d, want %d", x, tx.XID)
	}
	if ts := rec.Timestamp; ts.Before(tx.Before.Add(-timestampSlack)) || ts.After(tx.After.Add(timestampSlack)) {
		bad("timestamp %s is not the commit time (transaction ran %s .. %s)",
			ts.Format(time.RFC3339Nano), tx.Before.Format(time.RFC3339Nano), tx.After.Format(time.RFC3339Nano))
	}
}

// stableOffsets returns the last stable offsets of topics for a read_committed
// read. Kafka writes a transaction's commit markers after the commit returned
// to the producer, so right after a commit the last stable offset may still
// sit before that transaction: it waits, up to 15 s, for every partition's
// last stable offset to reach its end offset (ends), and takes what it has
// after that (a transaction still open is then left out, as read_committed
// consumers leave it out).
func stableOffsets(ctx context.Context, t *testing.T, adm *kadm.Client, topics []string, ends kadm.ListedOffsets) kadm.ListedOffsets {
	t.Helper()
	var stable kadm.ListedOffsets
	_ = testwait.Until(ctx, 15*time.Second, func() bool {
		var err error
		stable, err = adm.ListCommittedOffsets(ctx, topics...)
		if err != nil {
			return false
		}
		caughtUp := true
		stable.Each(func(o kadm.ListedOffset) {
			if e, ok := ends.Lookup(o.Topic, o.Partition); o.Err != nil || ok && o.Offset < e.Offset {
				caughtUp = false
			}
		})
		return caughtUp
	})
	if stable == nil {
		var err error
		if stable, err = adm.ListCommittedOffsets(ctx, topics...); err != nil {
			t.Fatalf("list last stable offsets %v: %v", topics, err)
		}
	}
	return stable
}
