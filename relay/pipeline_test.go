package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/walrelay/walrelay/checkpoint"
	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/internal/testwait"
	"github.com/walrelay/walrelay/replication"
	"github.com/walrelay/walrelay/sink"
)

// The pipeline's unit tests: scripted batches from a fake stream, a fake
// producer whose answers the test gives, the real decoder and tracker.

// fakeRecord is one record the fake producer was given.
type fakeRecord struct {
	id         string // event id
	deadLetter string // reason, "" for an ordinary record
	done       func(error)
}

// fakeProducer records what the pipeline sends. prepare, when set, answers
// Prepare instead of success.
type fakeProducer struct {
	mu      sync.Mutex
	prepare func(ev *decoder.Event) error
	next    fakeRecord // prepared, not yet sent
	sent    []fakeRecord
}

func (f *fakeProducer) Prepare(_ context.Context, ev *decoder.Event) (sink.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.prepare != nil {
		if err := f.prepare(ev); err != nil {
			return sink.Record{}, err
		}
	}
	f.next = fakeRecord{id: ev.ID}
	return sink.Record{}, nil
}

func (f *fakeProducer) PrepareDeadLetter(_ context.Context, ev *decoder.Event, _, reason string, _ error) (sink.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next = fakeRecord{id: ev.ID, deadLetter: reason}
	return sink.Record{}, nil
}

func (f *fakeProducer) Send(_ context.Context, _ sink.Record, done func(error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.next
	r.done = done
	f.sent = append(f.sent, r)
}

func (f *fakeProducer) Topic(*decoder.Event) (string, error) { return "t", nil }

func (f *fakeProducer) records() []fakeRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeRecord(nil), f.sent...)
}

// pipelineRig runs one pipeline over a fake stream.
type pipelineRig struct {
	t    *testing.T
	tr   *checkpoint.Tracker
	prod *fakeProducer
	m    Observer
	reg  *prometheus.Registry
	src  propSource
	stop context.CancelFunc
	errc chan error
	gid  int           // the pipeline's goroutine (testwait.GoroutineID)
	pos  pglogrepl.LSN // WAL position of the next message
	rel  bool          // the Relation message was sent
	xid  uint32
}

func newPipelineRig(t *testing.T, maxInFlight int, onPoison string, prod *fakeProducer, filter ...decoder.Filter) *pipelineRig {
	t.Helper()
	const start = pglogrepl.LSN(0x1000000)
	tr, err := checkpoint.New(checkpoint.Config{MaxInFlight: maxInFlight}, start)
	if err != nil {
		t.Fatal(err)
	}
	table := decoder.Table{Schema: "public", Name: "outbox"}
	if len(filter) > 0 {
		table.Filter = filter[0]
	}
	dec, err := decoder.New(decoder.Config{Tables: []decoder.Table{table}, HeartbeatPrefix: HeartbeatPrefix})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	r := &pipelineRig{t: t, tr: tr, prod: prod, m: newMetrics(reg, "unit"), reg: reg,
		src: propSource{ch: make(chan *replication.Batch)}, errc: make(chan error, 1), pos: start + 0x100}
	failed, fail := context.WithCancelCause(context.Background())
	t.Cleanup(func() { fail(nil) })
	var walEnd atomic.Uint64
	p := &pipeline{dec: dec, tr: tr, d: &atLeastOnce{producer: prod}, onPoison: onPoison, log: slog.New(slog.NewTextHandler(io.Discard, nil)), obs: r.m,
		produceCtx: context.Background(), walEnd: &walEnd, failed: failed, fail: fail}
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	t.Cleanup(cancel)
	gid := make(chan int, 1)
	go func() {
		gid <- testwait.GoroutineID()
		r.errc <- p.run(ctx, r.src)
	}()
	r.gid = <-gid
	return r
}

// txn sends one transaction with an insert per aggregate id (id e<xid>-<i>)
// and returns its end LSN; false when the pipeline did not take it within 2 s.
func (r *pipelineRig) txn(aggIDs ...string) (pglogrepl.LSN, bool) {
	r.xid++
	at := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	begin := r.pos
	commit := begin + pglogrepl.LSN(0x20*(len(aggIDs)+1))
	end := commit + 0x8
	msgs := []replication.Message{{WALStart: begin, ServerWALEnd: end, Data: pgoBegin(commit, at, r.xid)}}
	if !r.rel {
		msgs = append(msgs, replication.Message{WALStart: begin, ServerWALEnd: end, Data: pgoOutboxRelation(16384, "public", "outbox")})
		r.rel = true
	}
	for i, agg := range aggIDs {
		id := fmt.Sprintf("00000000-0000-4000-8000-%012d", int(r.xid)*100+i)
		msgs = append(msgs, replication.Message{WALStart: begin + pglogrepl.LSN(0x20*(i+1)), ServerWALEnd: end,
			Data: pgoOutboxInsert(16384, id, "order", agg, "created", `{}`)})
	}
	msgs = append(msgs, replication.Message{WALStart: commit, ServerWALEnd: end, Data: pgoCommit(commit, end, at)})
	r.pos = end + 0x10
	select {
	case r.src.ch <- &replication.Batch{Msgs: msgs}:
		return end, true
	case <-time.After(2 * time.Second):
		return end, false
	}
}

// sync returns once the pipeline handled every batch sent before: the source
// is unbuffered, so it takes the next (empty) batch only after that.
func (r *pipelineRig) sync() {
	r.t.Helper()
	select {
	case r.src.ch <- &replication.Batch{}:
	case <-time.After(5 * time.Second):
		r.t.Fatal("the pipeline did not take a batch within 5 s")
	}
}

// waitSent waits until the producer holds n records.
func (r *pipelineRig) waitSent(n int) []fakeRecord {
	r.t.Helper()
	var recs []fakeRecord
	if err := testwait.Until(context.Background(), 5*time.Second, func() bool {
		recs = r.prod.records()
		return len(recs) >= n
	}); err != nil {
		r.t.Fatalf("the producer was given %d records, want %d (%v)", len(recs), n, err)
	}
	return recs
}

// waitAtCap waits until the pipeline waits at the tracker's in-flight cap
// (for a unit in Begin or Add), which the tracker shows no other sign of.
func (r *pipelineRig) waitAtCap() {
	r.t.Helper()
	testwait.Eventually(r.t, 5*time.Second, "the pipeline to wait at the in-flight cap", func() bool {
		return testwait.Parked(r.gid, "checkpoint.(*Tracker).acquire")
	})
}

// metric is the value of one series, e.g. walrelay_dead_letters_total{reason=too_large}.
func (r *pipelineRig) metric(series string) float64 {
	r.t.Helper()
	return gather(r.t, r.reg)[series]
}

// result waits for the pipeline to return.
func (r *pipelineRig) result() error {
	r.t.Helper()
	select {
	case err := <-r.errc:
		return err
	case <-time.After(5 * time.Second):
		r.t.Fatal("the pipeline did not return within 5 s")
		return nil
	}
}

// TestPipelineAcksInAnyOrder: the watermark moves to a transaction's end only
// once every record of it and of every earlier transaction is acknowledged,
// whatever order Kafka answers in.
func TestPipelineAcksInAnyOrder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		order []int // indexes of the 4 records (txn 1: 0, 1; txn 2: 2; txn 3: 3) in ack order
		// watermark after each ack: index of the last transaction passed (-1: none)
		passed []int
	}{
		{"in order", []int{0, 1, 2, 3}, []int{-1, 0, 1, 2}},
		{"reverse", []int{3, 2, 1, 0}, []int{-1, -1, -1, 2}},
		{"middle first", []int{2, 0, 3, 1}, []int{-1, -1, -1, 2}},
		{"first txn last record", []int{0, 2, 1, 3}, []int{-1, -1, 1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newPipelineRig(t, 100, OnPoisonDLQ, &fakeProducer{})
			var ends []pglogrepl.LSN
			for _, aggs := range [][]string{{"a", "b"}, {"a"}, {"c"}} {
				end, ok := r.txn(aggs...)
				if !ok {
					t.Fatal("pipeline blocked")
				}
				ends = append(ends, end)
			}
			recs := r.waitSent(4)
			r.sync() // every commit is read before the first ack
			start := r.tr.Watermark()
			for i, k := range tc.order {
				recs[k].done(nil)
				want := start
				if p := tc.passed[i]; p >= 0 {
					want = ends[p]
				}
				if w := r.tr.Watermark(); w != want {
					t.Fatalf("after ack %d (record %d): watermark %s, want %s", i+1, k, w, want)
				}
			}
			if n := r.metric("walrelay_events_acked_total"); n != 4 {
				t.Fatalf("walrelay_events_acked_total %v, want 4", n)
			}
		})
	}
}

// TestPipelineFiltered: events a table's filter does not publish are never
// produced nor tracked, are counted by reason, and their transaction is
// confirmed like any other.
func TestPipelineFiltered(t *testing.T) {
	r := newPipelineRig(t, 100, OnPoisonDLQ, &fakeProducer{}, decoder.Filter{IncludeAggregateTypes: []string{"invoice"}})
	end, ok := r.txn("a", "b")
	if !ok {
		t.Fatal("pipeline blocked")
	}
	testwait.Eventually(t, 5*time.Second, "the watermark at the filtered transaction's end", func() bool { return r.tr.Watermark() == end })
	if n := len(r.prod.records()); n != 0 {
		t.Fatalf("%d records produced, want none", n)
	}
	if n := r.metric("walrelay_events_filtered_total{reason=aggregate_type}"); n != 2 {
		t.Fatalf("walrelay_events_filtered_total{reason=aggregate_type} = %v, want 2", n)
	}
}

// TestPipelineDeadLetters: an event whose values cannot become a record, or
// that Kafka refuses for good, is dead-lettered with its reason (and counts
// for the watermark like any record), or stops the pipeline with a
// *sink.PoisonError under --on-poison=stop, leaving the watermark before it.
func TestPipelineDeadLetters(t *testing.T) {
	tooLarge := func(ev *decoder.Event) error {
		if string(ev.AggregateID) == "huge" {
			return &sink.ProduceError{Topic: "t", Err: sink.ErrTooLarge}
		}
		return nil
	}
	for _, tc := range []struct {
		name     string
		aggID    string // of the middle transaction's event
		prepare  func(*decoder.Event) error
		onPoison string
		reason   string // dead-letter reason; "" when the pipeline must stop
	}{
		{"empty aggregate id", "", nil, OnPoisonDLQ, "empty_aggregate_id"},
		{"refused as too large", "huge", tooLarge, OnPoisonDLQ, "too_large"},
		{"empty aggregate id, stop", "", nil, OnPoisonStop, ""},
		{"refused as too large, stop", "huge", tooLarge, OnPoisonStop, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newPipelineRig(t, 100, tc.onPoison, &fakeProducer{prepare: tc.prepare})
			first, _ := r.txn("a")
			r.waitSent(1)[0].done(nil)
			// The ack may come before the pipeline read the commit.
			testwait.Eventually(t, 5*time.Second, "the watermark at the first transaction's end", func() bool { return r.tr.Watermark() == first })
			second, _ := r.txn(tc.aggID)
			if tc.reason == "" {
				err := r.result()
				var pe *sink.PoisonError
				if !errors.As(err, &pe) || pe.Reason == "" {
					t.Fatalf("pipeline returned %v; want a *sink.PoisonError", err)
				}
				if w := r.tr.Watermark(); w != first {
					t.Fatalf("watermark %s passed the poison event's transaction (want %s)", w, first)
				}
				if n := r.metric("walrelay_produce_failures_total"); n != 1 {
					t.Fatalf("walrelay_produce_failures_total %v, want 1", n)
				}
				return
			}
			recs := r.waitSent(2)
			if recs[1].deadLetter != tc.reason {
				t.Fatalf("second record dead-lettered with %q, want %q", recs[1].deadLetter, tc.reason)
			}
			if w := r.tr.Watermark(); w != first {
				t.Fatalf("watermark %s moved before the dead letter was acknowledged", w)
			}
			recs[1].done(nil)
			if w := r.tr.Watermark(); w != second {
				t.Fatalf("watermark %s, want %s once the dead letter is acknowledged", w, second)
			}
			if n := r.metric("walrelay_dead_letters_total{reason=" + tc.reason + "}"); n != 1 {
				t.Fatalf("walrelay_dead_letters_total{reason=%q} %v, want 1", tc.reason, n)
			}
		})
	}
}

// TestPipelineProduceFailureStops: a record Kafka fails for good stops the
// pipeline with that error, also while it waits at the in-flight cap, and
// the watermark stays before the failed record's transaction even when
// later records are acknowledged.
func TestPipelineProduceFailureStops(t *testing.T) {
	errRefused := errors.New("refused for good")
	r := newPipelineRig(t, 4, OnPoisonDLQ, &fakeProducer{})
	first, _ := r.txn("a")
	r.txn("b")
	recs := r.waitSent(2)
	recs[0].done(nil) // the first transaction's 2 units are free again
	r.txn("c")
	recs = r.waitSent(3)
	// The cap (4: each transaction and each record count) now holds the
	// fourth transaction back until the failure ends the wait.
	blocked := make(chan bool, 1)
	go func() { _, ok := r.txn("d"); blocked <- ok }()
	r.waitAtCap()
	recs[1].done(errRefused)
	if err := r.result(); !errors.Is(err, errRefused) {
		t.Fatalf("pipeline returned %v, want the produce failure", err)
	}
	recs[2].done(nil) // a later record acknowledged: the watermark still waits
	if w := r.tr.Watermark(); w != first {
		t.Fatalf("watermark %s, want %s (before the failed record)", w, first)
	}
	if n := r.metric("walrelay_produce_failures_total"); n != 1 {
		t.Fatalf("walrelay_produce_failures_total %v, want 1", n)
	}
	<-blocked
}

// TestPipelineShutdown: cancelling the context returns nil at once, also
// while the pipeline waits at the in-flight cap for Kafka, and records in
// flight keep their place: the watermark stays before them.
func TestPipelineShutdown(t *testing.T) {
	for _, tc := range []struct {
		name    string
		blocked bool
	}{{"idle", false}, {"blocked at the in-flight cap", true}} {
		t.Run(tc.name, func(t *testing.T) {
			r := newPipelineRig(t, 3, OnPoisonDLQ, &fakeProducer{})
			start := r.tr.Watermark()
			r.txn("a")
			r.waitSent(1)
			if tc.blocked {
				go r.txn("b", "c") // needs 3 more units: waits
				r.waitAtCap()
			}
			began := time.Now()
			r.stop()
			if err := r.result(); err != nil {
				t.Fatalf("pipeline returned %v on shutdown, want nil", err)
			}
			if d := time.Since(began); d > time.Second {
				t.Fatalf("shutdown took %v", d)
			}
			if w := r.tr.Watermark(); w != start {
				t.Fatalf("watermark %s, want %s: a record is still in flight", w, start)
			}
		})
	}
}

// TestPipelineKafkaUnavailableRetried: while Kafka cannot answer a topic's
// look-up, the pipeline retries the same event with backoff (reading
// nothing meanwhile) and produces it once Kafka answers; nothing is skipped.
func TestPipelineKafkaUnavailableRetried(t *testing.T) {
	var fails atomic.Int32
	prod := &fakeProducer{prepare: func(*decoder.Event) error {
		if fails.Add(1) <= 2 {
			return &sink.ProduceError{Topic: "t", Err: sink.ErrKafkaUnavailable}
		}
		return nil
	}}
	r := newPipelineRig(t, 100, OnPoisonDLQ, prod)
	end, _ := r.txn("a")
	recs := r.waitSent(1)
	recs[0].done(nil)
	if w := r.tr.Watermark(); w != end {
		t.Fatalf("watermark %s, want %s", w, end)
	}
	if n := r.metric("walrelay_kafka_topic_retries_total"); n != 2 {
		t.Fatalf("walrelay_kafka_topic_retries_total %v, want 2", n)
	}
}
