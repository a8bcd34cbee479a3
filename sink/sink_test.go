package sink_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/internal/testwait"
	"github.com/walrelay/walrelay/sink"
)

// waitTimeout bounds every wait for something that must happen; the tests
// never sleep to make something happen, only (briefly) to check that
// something does not.
const waitTimeout = 20 * time.Second

// quiet is how long a test watches for a callback that must not come.
const quiet = 300 * time.Millisecond

func newCluster(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// fastRetries makes franz-go retry and refresh metadata quickly, so tests
// with injected retriable errors take milliseconds instead of seconds.
var fastRetries = sink.WithClientOpts(
	kgo.RetryBackoffFn(func(int) time.Duration { return 10 * time.Millisecond }),
	kgo.MetadataMinAge(10*time.Millisecond),
)

var discard = sink.WithLogger(slog.New(slog.DiscardHandler))

func newSink(t testing.TB, cfg sink.Config, opts ...sink.Option) *sink.Sink {
	t.Helper()
	s, err := sink.New(cfg, append([]sink.Option{discard}, opts...)...)
	if err != nil {
		t.Fatalf("sink.New: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

var commitTime = time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC)

// event returns event number i of the given aggregate; its payload names
// the aggregate and i so a consumer can check order.
func event(i int, aggType, aggID string) *decoder.Event {
	return &decoder.Event{
		Table:         "public.outbox",
		TableName:     "outbox",
		ID:            fmt.Sprintf("ev-%04d", i),
		AggregateType: aggType,
		AggregateID:   []byte(aggID),
		EventType:     "Happened",
		Payload:       fmt.Appendf(nil, `{"agg":%q,"seq":%d}`, aggID, i),
		CommitTime:    commitTime,
		LSN:           pglogrepl.LSN(0x1_0000_0000 + uint64(i)*0x40),
		XID:           uint32(1000 + i),
	}
}

// result is one call of a done callback.
type result struct {
	id  string
	err error
}

// acks collects done callbacks. Its channel is large enough that done never
// blocks franz-go's goroutines.
type acks struct {
	ch    chan result
	calls atomic.Int64
}

func newAcks(capacity int) *acks { return &acks{ch: make(chan result, capacity+16)} }

func (a *acks) done(id string) func(error) {
	return func(err error) {
		a.calls.Add(1)
		a.ch <- result{id, err}
	}
}

// wait returns the next n results, failing the test if they do not come.
func (a *acks) wait(t testing.TB, n int) []result {
	t.Helper()
	timer := time.NewTimer(waitTimeout)
	defer timer.Stop()
	out := make([]result, 0, n)
	for len(out) < n {
		select {
		case r := <-a.ch:
			out = append(out, r)
		case <-timer.C:
			t.Fatalf("got %d of %d done callbacks after %v", len(out), n, waitTimeout)
		}
	}
	return out
}

// none fails the test if a done callback comes within quiet.
func (a *acks) none(t testing.TB) {
	t.Helper()
	select {
	case r := <-a.ch:
		t.Fatalf("unexpected done(%v) for %s", r.err, r.id)
	case <-time.After(quiet):
	}
}

// allOK checks that rs holds one nil result per id in ids, no more.
func allOK(t testing.TB, rs []result, ids []string) {
	t.Helper()
	seen := map[string]int{}
	for _, r := range rs {
		if r.err != nil {
			t.Errorf("done(%v) for %s, want nil", r.err, r.id)
		}
		seen[r.id]++
	}
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("done called %d times for %s, want once", seen[id], id)
		}
	}
	if len(rs) != len(ids) {
		t.Errorf("%d done calls for %d events", len(rs), len(ids))
	}
}

// consume reads topic from the start until it holds want records, and
// checks with the end offsets that the log holds exactly want records (no
// duplicates written).
func consume(t testing.TB, c *kfake.Cluster, topic string, want int) []*kgo.Record {
	t.Helper()
	ctx := testCtx(t)
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("list end offsets: %v", err)
	}
	if err := ends.Error(); err != nil {
		t.Fatalf("list end offsets: %v", err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total != int64(want) {
		t.Errorf("topic %s holds %d records, want exactly %d", topic, total, want)
	}

	var recs []*kgo.Record
	for len(recs) < int(total) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records: %v", len(recs), total, ctx.Err())
		}
		fs.EachError(func(topic string, p int32, err error) {
			t.Fatalf("fetch %s/%d: %v", topic, p, err)
		})
		recs = append(recs, fs.Records()...)
	}
	return recs
}

// produceResponse answers a produce request with errCode for every
// partition it carries.
func produceResponse(req *kmsg.ProduceRequest, errCode int16) *kmsg.ProduceResponse {
	resp := kmsg.NewPtrProduceResponse()
	resp.SetVersion(req.Version)
	for _, rt := range req.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic = rt.Topic
		st.TopicID = rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.ErrorCode = errCode
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// holdProduce makes the cluster hold every produce request until release
// is called. held reports how many produce requests are waiting.
func holdProduce(c *kfake.Cluster) (held func() int64, release func()) {
	gate := make(chan struct{})
	var n atomic.Int64
	var once sync.Once
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		select {
		case <-gate:
		default:
			n.Add(1)
			c.SleepControl(func() { <-gate })
		}
		return nil, nil, false // let the cluster handle it normally
	})
	return n.Load, func() { once.Do(func() { close(gate) }) }
}

func headerMap(hs []kgo.RecordHeader) map[string]string {
	m := map[string]string{}
	for _, h := range hs {
		m[h.Key] = string(h.Value)
	}
	return m
}

func TestBuildRecord(t *testing.T) {
	eventTime := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	base := decoder.Event{
		Table:         "public.outbox",
		TableName:     "outbox",
		ID:            "6f1c2a9e-5b1d-4f6e-9c1a-0d2b3c4d5e6f",
		AggregateType: "order",
		AggregateID:   []byte("order-42"),
		EventType:     "OrderCreated",
		Payload:       []byte(`{"total":12.5}`),
		CommitTime:    commitTime,
		LSN:           pglogrepl.LSN(0x16_B374_D848),
		XID:           math.MaxUint32,
	}
	type hdr struct{ k, v string }
	for _, tc := range []struct {
		name      string
		mod       func(e *decoder.Event)
		headers   []hdr
		value     []byte
		nilValue  bool
		timestamp time.Time
	}{
		{
			name: "no event headers",
			headers: []hdr{
				{"id", base.ID}, {"event_type", "OrderCreated"}, {"aggregate_type", "order"},
				{"walrelay.lsn", "16/B374D848"}, {"walrelay.xid", "4294967295"},
			},
			value:     []byte(`{"total":12.5}`),
			timestamp: commitTime,
		},
		{
			name: "event headers in order between fixed and position headers",
			mod: func(e *decoder.Event) {
				e.Headers = []decoder.Header{
					{Key: "traceparent", Value: []byte("00-abc-def-01")},
					{Key: "b", Value: []byte("2")},
					{Key: "a", Value: []byte("1")},
					{Key: "empty", Value: nil},
				}
			},
			headers: []hdr{
				{"id", base.ID}, {"event_type", "OrderCreated"}, {"aggregate_type", "order"},
				{"traceparent", "00-abc-def-01"}, {"b", "2"}, {"a", "1"}, {"empty", ""},
				{"walrelay.lsn", "16/B374D848"}, {"walrelay.xid", "4294967295"},
			},
			value:     []byte(`{"total":12.5}`),
			timestamp: commitTime,
		},
		{
			name: "event timestamp wins over commit time",
			mod:  func(e *decoder.Event) { e.Timestamp = eventTime; e.LSN = 0; e.XID = 0 },
			headers: []hdr{
				{"id", base.ID}, {"event_type", "OrderCreated"}, {"aggregate_type", "order"},
				{"walrelay.lsn", "0/0"}, {"walrelay.xid", "0"}, {"walrelay.commit_time", commitTime.UTC().Format(time.RFC3339Nano)},
			},
			value:     []byte(`{"total":12.5}`),
			timestamp: eventTime,
		},
		{
			name: "nil payload is a tombstone",
			mod:  func(e *decoder.Event) { e.Payload = nil },
			headers: []hdr{
				{"id", base.ID}, {"event_type", "OrderCreated"}, {"aggregate_type", "order"},
				{"walrelay.lsn", "16/B374D848"}, {"walrelay.xid", "4294967295"},
			},
			nilValue:  true,
			timestamp: commitTime,
		},
		{
			name: "empty payload is not a tombstone",
			mod:  func(e *decoder.Event) { e.Payload = []byte{} },
			headers: []hdr{
				{"id", base.ID}, {"event_type", "OrderCreated"}, {"aggregate_type", "order"},
				{"walrelay.lsn", "16/B374D848"}, {"walrelay.xid", "4294967295"},
			},
			value:     []byte{},
			timestamp: commitTime,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := base
			if tc.mod != nil {
				tc.mod(&ev)
			}
			rec := sink.BuildRecord("outbox.event.order", &ev)
			if rec.Topic != "outbox.event.order" {
				t.Errorf("Topic = %q", rec.Topic)
			}
			if !bytes.Equal(rec.Key, []byte("order-42")) {
				t.Errorf("Key = %q, want the aggregate id", rec.Key)
			}
			switch {
			case tc.nilValue && rec.Value != nil:
				t.Errorf("Value = %q, want nil (tombstone)", rec.Value)
			case !tc.nilValue && (rec.Value == nil || !bytes.Equal(rec.Value, tc.value)):
				t.Errorf("Value = %q (nil=%v), want %q", rec.Value, rec.Value == nil, tc.value)
			}
			if !rec.Timestamp.Equal(tc.timestamp) {
				t.Errorf("Timestamp = %v, want %v", rec.Timestamp, tc.timestamp)
			}
			var got []hdr
			for _, h := range rec.Headers {
				got = append(got, hdr{h.Key, string(h.Value)})
			}
			if !slices.Equal(got, tc.headers) {
				t.Errorf("headers:\n got %q\nwant %q", got, tc.headers)
			}
		})
	}
}

func TestBuildRecordHeaderNamesMatchConstants(t *testing.T) {
	rec := sink.BuildRecord("t", &decoder.Event{ID: "x"})
	var keys []string
	for _, h := range rec.Headers {
		keys = append(keys, h.Key)
	}
	want := []string{sink.HeaderID, sink.HeaderEventType, sink.HeaderAggregateType, sink.HeaderLSN, sink.HeaderXID}
	if !slices.Equal(keys, want) {
		t.Errorf("header keys %q, want %q", keys, want)
	}
}

// TestProduceWithDefaultOptions is a regression test: New once passed
// kgo.RecordRetries(-1) meaning "never give up", but franz-go compares
// tries > recordRetries, so -1 failed every record before its first send
// with kgo.ErrRecordRetries.
func TestProduceWithDefaultOptions(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s, err := sink.New(sink.Config{Brokers: c.ListenAddrs()}, discard)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a := newAcks(1)
	ev := event(1, "order", "o-1")
	if err := s.Produce(testCtx(t), ev, a.done(ev.ID)); err != nil {
		t.Fatalf("Produce: %v", err)
	}
	if r := a.wait(t, 1)[0]; r.err != nil {
		t.Fatalf("done(%v), want nil", r.err)
	}
}

// TestProduceDoesNotRetainEventBuffers checks Produce's documented contract
// "ev is not retained": a caller may reuse the event's buffers once Produce
// returned (the decoder's Output is reused between calls).
//
// TestBuildRecordTakesEventBytes pins the ownership contract documented on
// Produce: the record takes the event's byte slices as they are (no copy on
// the hot path), so the caller hands them over and must not modify them. The
// decoder allocates them fresh for every event.
func TestBuildRecordTakesEventBytes(t *testing.T) {
	ev := event(1, "order", "o-1")
	ev.Headers = []decoder.Header{{Key: "traceparent", Value: []byte("00-aaaa-01")}}
	r := sink.BuildRecord("outbox.event.order", ev)
	if &r.Key[0] != &ev.AggregateID[0] || &r.Value[0] != &ev.Payload[0] {
		t.Fatal("BuildRecord copied the key or value; update the ownership contract in Produce's doc")
	}
}

func TestProduceEndToEnd(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	var createTopics atomic.Int64
	c.ControlKey(int16(kmsg.CreateTopics), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		createTopics.Add(1)
		return nil, nil, false
	})
	s := newSink(t, sink.Config{Brokers: c.ListenAddrs(), TopicPartitions: 3})
	ctx := testCtx(t)

	const n = 300
	aggs := []string{"a-1", "a-2", "a-3", "a-4", "a-5", "a-6", "a-7"}
	a := newAcks(n)
	var ids []string
	byID := map[string]*decoder.Event{}
	for i := range n {
		ev := event(i, "order", aggs[(i*i+i/3)%len(aggs)])
		if i == n-1 {
			ev.Payload = nil // a tombstone travels as a null value
		}
		ids = append(ids, ev.ID)
		byID[ev.ID] = ev
		if err := s.Produce(ctx, ev, a.done(ev.ID)); err != nil {
			t.Fatalf("Produce %s: %v", ev.ID, err)
		}
	}
	allOK(t, a.wait(t, n), ids)
	if err := s.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if b := s.Buffered(); b != 0 {
		t.Errorf("Buffered() = %d after every ack", b)
	}

	const topic = "outbox.event.order"
	if got := createTopics.Load(); got != 1 {
		t.Errorf("%d CreateTopics requests, want 1 (the topic is remembered)", got)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	details, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := details[topic]; !ok || d.Err != nil || len(d.Partitions) != 3 {
		t.Fatalf("topic %s: exists=%v err=%v partitions=%d, want 3 partitions", topic, ok, d.Err, len(d.Partitions))
	}

	recs := consume(t, c, topic, n)
	seen := map[string]int{}
	lastSeq := map[string]int{}
	partOf := map[string]int32{}
	for _, r := range recs {
		h := headerMap(r.Headers)
		id := h[sink.HeaderID]
		seen[id]++
		ev, ok := byID[id]
		if !ok {
			t.Errorf("record with unknown id %q", id)
			continue
		}
		seq, _ := strconv.Atoi(strings.TrimPrefix(id, "ev-"))
		key := string(r.Key)
		if key != string(ev.AggregateID) {
			t.Errorf("%s: key %q, want %q", id, key, ev.AggregateID)
		}
		if p, ok := partOf[key]; ok && p != r.Partition {
			t.Errorf("key %s in partitions %d and %d", key, p, r.Partition)
		}
		partOf[key] = r.Partition
		if last, ok := lastSeq[key]; ok && seq <= last {
			t.Errorf("key %s: %s after ev-%04d, want produce order", key, id, last)
		}
		lastSeq[key] = seq
		if ev.Payload == nil {
			if r.Value != nil {
				t.Errorf("%s: value %q, want a tombstone", id, r.Value)
			}
		} else if !bytes.Equal(r.Value, ev.Payload) {
			t.Errorf("%s: value %q, want %q", id, r.Value, ev.Payload)
		}
		if h[sink.HeaderLSN] != ev.LSN.String() || h[sink.HeaderXID] != strconv.Itoa(int(ev.XID)) {
			t.Errorf("%s: lsn/xid headers %q/%q, want %s/%d", id, h[sink.HeaderLSN], h[sink.HeaderXID], ev.LSN, ev.XID)
		}
		if !r.Timestamp.Equal(commitTime) {
			t.Errorf("%s: timestamp %v, want the commit time %v", id, r.Timestamp, commitTime)
		}
	}
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("%s arrived %d times, want once", id, seen[id])
		}
	}
	if len(lastSeq) != len(aggs) {
		t.Errorf("saw %d aggregates, want %d", len(lastSeq), len(aggs))
	}
}

func TestProduceTopicMissing(t *testing.T) {
	t.Parallel()
	c := newCluster(t) // no auto-creation
	var createTopics atomic.Int64
	c.ControlKey(int16(kmsg.CreateTopics), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		createTopics.Add(1)
		return nil, nil, false
	})
	// fastRetries shortens MetadataMinAge, for which franz-go caches the
	// "unknown topic" answer (about 5s with the defaults).
	s := newSink(t, sink.Config{Brokers: c.ListenAddrs(), DisableCreateTopics: true}, fastRetries)
	ctx := testCtx(t)
	a := newAcks(2)

	ev := event(1, "invoice", "i-1")
	err := s.Produce(ctx, ev, a.done(ev.ID))
	if !errors.Is(err, sink.ErrTopicMissing) {
		t.Fatalf("Produce = %v, want an error wrapping ErrTopicMissing", err)
	}
	if !strings.Contains(err.Error(), `"outbox.event.invoice"`) {
		t.Errorf("error %q does not name the topic", err)
	}
	var pe *sink.ProduceError
	if !errors.As(err, &pe) || pe.Topic != "outbox.event.invoice" || pe.EventID != ev.ID || pe.LSN != ev.LSN.String() {
		t.Errorf("error %#v, want a *ProduceError for the topic, event and LSN", err)
	}
	a.none(t)
	if got := createTopics.Load(); got != 0 {
		t.Errorf("%d CreateTopics requests with DisableCreateTopics", got)
	}

	// The missing topic is not remembered: once it exists, Produce works.
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "outbox.event.invoice"); err != nil {
		t.Fatal(err)
	}
	// Retry while franz-go's cached "unknown topic" answer is fresh.
	_ = testwait.Until(ctx, waitTimeout, func() bool {
		err = s.Produce(ctx, ev, a.done(ev.ID))
		return err == nil || !errors.Is(err, sink.ErrTopicMissing)
	})
	if err != nil {
		t.Fatalf("Produce after creating the topic: %v", err)
	}
	allOK(t, a.wait(t, 1), []string{ev.ID})
	a.none(t)
}

func TestProduceExistingTopicCreateDisabled(t *testing.T) {
	t.Parallel()
	c := newCluster(t, kfake.SeedTopics(2, "fixed-topic"))
	s := newSink(t, sink.Config{Brokers: c.ListenAddrs(), Topic: "fixed-topic", DisableCreateTopics: true})
	a := newAcks(1)
	ev := event(1, "order", "o-1")
	if err := s.Produce(testCtx(t), ev, a.done(ev.ID)); err != nil {
		t.Fatalf("Produce: %v", err)
	}
	allOK(t, a.wait(t, 1), []string{ev.ID})
	consume(t, c, "fixed-topic", 1)
}

func TestProduceInvalidTopic(t *testing.T) {
	t.Parallel()
	// Nothing is dialed: the topic is rejected before the client is used.
	s := newSink(t, sink.Config{Brokers: []string{"127.0.0.1:1"}})
	a := newAcks(1)
	ev := event(7, "order/v2", "o-1")
	err := s.Produce(testCtx(t), ev, a.done(ev.ID))
	if !errors.Is(err, sink.ErrInvalidTopic) {
		t.Fatalf("Produce = %v, want an error wrapping ErrInvalidTopic", err)
	}
	var pe *sink.ProduceError
	if !errors.As(err, &pe) {
		t.Fatalf("Produce error %T, want *ProduceError", err)
	}
	if pe.EventID != ev.ID || pe.LSN != ev.LSN.String() {
		t.Errorf("ProduceError{EventID: %q, LSN: %q}, want %q, %q", pe.EventID, pe.LSN, ev.ID, ev.LSN)
	}
	if !strings.Contains(err.Error(), ev.ID) || !strings.Contains(err.Error(), ev.LSN.String()) {
		t.Errorf("error %q does not name the event id and LSN", err)
	}
	a.none(t)
	if topic, err := s.Topic(ev); !errors.Is(err, sink.ErrInvalidTopic) {
		t.Errorf("Topic = %q, %v; want ErrInvalidTopic", topic, err)
	}
}

// TestDeletedTopicFailsRecords: a topic deleted while the sink runs (it is
// remembered as existing) makes its records fail with an unknown-topic
// error after UnknownTopicRetries; they are never dropped silently nor
// retried forever.
func TestDeletedTopicFailsRecords(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := newSink(t, sink.Config{Brokers: c.ListenAddrs()}, fastRetries)
	ctx := testCtx(t)
	a := newAcks(2)
	first := event(1, "order", "o-1")
	if err := s.Produce(ctx, first, a.done(first.ID)); err != nil {
		t.Fatal(err)
	}
	allOK(t, a.wait(t, 1), []string{first.ID})

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).DeleteTopic(ctx, "outbox.event.order"); err != nil {
		t.Fatalf("delete topic: %v", err)
	}

	second := event(2, "order", "o-1")
	if err := s.Produce(ctx, second, a.done(second.ID)); err != nil {
		t.Fatalf("Produce = %v, want nil (the topic is remembered; the failure goes to done)", err)
	}
	r := a.wait(t, 1)[0]
	t.Logf("done(%v)", r.err)
	if !errors.Is(r.err, kerr.UnknownTopicOrPartition) && !errors.Is(r.err, kerr.UnknownTopicID) {
		t.Fatalf("done(%v), want an unknown topic error", r.err)
	}
	var pe *sink.ProduceError
	if !errors.As(r.err, &pe) || pe.EventID != second.ID || pe.Topic != "outbox.event.order" {
		t.Errorf("done(%#v), want a *ProduceError for %s", r.err, second.ID)
	}
	a.none(t)
}

// TestAckHeldUntilBrokerAnswers: done must not run while the broker has not
// acknowledged the records.
func TestAckHeldUntilBrokerAnswers(t *testing.T) {
	t.Parallel()
	c := newCluster(t, kfake.SeedTopics(3, "outbox.event.order"))
	s := newSink(t, sink.Config{Brokers: c.ListenAddrs()})
	held, release := holdProduce(c)
	defer release()
	ctx := testCtx(t)

	const n = 20
	a := newAcks(n)
	var ids []string
	for i := range n {
		ev := event(i, "order", fmt.Sprintf("o-%d", i%4))
		ids = append(ids, ev.ID)
		if err := s.Produce(ctx, ev, a.done(ev.ID)); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Eventually(t, waitTimeout, "a produce request to reach the broker", func() bool { return held() > 0 })
	a.none(t)
	if got := s.Buffered(); got != n {
		t.Errorf("Buffered() = %d while the broker holds the records, want %d", got, n)
	}

	release()
	allOK(t, a.wait(t, n), ids)
	a.none(t)
	consume(t, c, "outbox.event.order", n)
}

// TestRetriableErrorsAreRetried: the broker answers the first produce
// requests with a retriable error without writing; the sink retries and
// every record lands exactly once, in order per key.
func TestRetriableErrorsAreRetried(t *testing.T) {
	t.Parallel()
	for _, code := range []*kerr.Error{kerr.NotLeaderForPartition, kerr.RequestTimedOut, kerr.NotEnoughReplicas} {
		t.Run(code.Message, func(t *testing.T) {
			t.Parallel()
			const topic = "outbox.event.order"
			c := newCluster(t, kfake.SeedTopics(3, topic))
			const failFirst = 3
			var reqs atomic.Int64
			c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				if reqs.Add(1) > failFirst {
					return nil, nil, false
				}
				return produceResponse(kreq.(*kmsg.ProduceRequest), code.Code), nil, true
			})
			s := newSink(t, sink.Config{Brokers: c.ListenAddrs()}, fastRetries)
			ctx := testCtx(t)

			const n = 30
			a := newAcks(n)
			var ids []string
			for i := range n {
				ev := event(i, "order", fmt.Sprintf("o-%d", i%5))
				ids = append(ids, ev.ID)
				if err := s.Produce(ctx, ev, a.done(ev.ID)); err != nil {
					t.Fatal(err)
				}
			}
			allOK(t, a.wait(t, n), ids)
			if got := reqs.Load(); got <= failFirst {
				t.Fatalf("%d produce requests, want more than the %d failed ones", got, failFirst)
			}
			checkOrder(t, consume(t, c, topic, n))
		})
	}
}

// TestTimedOutWriteIsNotDuplicated: the broker writes the batch but answers
// REQUEST_TIMED_OUT (kfake's fault does both), so the client's retry is a
// real duplicate; the idempotent producer makes the broker drop it.
func TestTimedOutWriteIsNotDuplicated(t *testing.T) {
	t.Parallel()
	const topic = "outbox.event.order"
	c := newCluster(t, kfake.SeedTopics(3, topic))
	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.RequestTimedOut, Count: 3})
	s := newSink(t, sink.Config{Brokers: c.ListenAddrs()}, fastRetries)
	ctx := testCtx(t)

	const n = 30
	a := newAcks(n)
	var ids []string
	for i := range n {
		ev := event(i, "order", fmt.Sprintf("o-%d", i%5))
		ids = append(ids, ev.ID)
		if err := s.Produce(ctx, ev, a.done(ev.ID)); err != nil {
			t.Fatal(err)
		}
	}
	allOK(t, a.wait(t, n), ids)
	if hits := h.Hits(); hits != 3 {
		t.Fatalf("fault hit %d partitions, want 3", hits)
	}
	checkOrder(t, consume(t, c, topic, n)) // consume checks exactly n records in the log
}

// checkOrder checks that each event arrived once and, per key, in produce
// (id) order.
func checkOrder(t testing.TB, recs []*kgo.Record) {
	t.Helper()
	seen := map[string]bool{}
	last := map[string]string{}
	for _, r := range recs {
		id := headerMap(r.Headers)[sink.HeaderID]
		if seen[id] {
			t.Errorf("%s arrived twice", id)
		}
		seen[id] = true
		if l, ok := last[string(r.Key)]; ok && id <= l {
			t.Errorf("key %s: %s after %s", r.Key, id, l)
		}
		last[string(r.Key)] = id
	}
}

// TestPermanentErrorFailsRecord: a produce error Kafka will never accept
// ends in done(*ProduceError) that wraps the broker's error and names the
// event.
func TestPermanentErrorFailsRecord(t *testing.T) {
	t.Parallel()
	for _, code := range []*kerr.Error{kerr.MessageTooLarge, kerr.InvalidRecord, kerr.CorruptMessage, kerr.TopicAuthorizationFailed} {
		t.Run(code.Message, func(t *testing.T) {
			t.Parallel()
			const topic = "outbox.event.order"
			c := newCluster(t, kfake.SeedTopics(1, topic))
			c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				return produceResponse(kreq.(*kmsg.ProduceRequest), code.Code), nil, true
			})
			s := newSink(t, sink.Config{Brokers: c.ListenAddrs()}, fastRetries)
			ctx := testCtx(t)

			const n = 3
			a := newAcks(n)
			evs := map[string]*decoder.Event{}
			for i := range n {
				ev := event(i, "order", "o-1")
				evs[ev.ID] = ev
				if err := s.Produce(ctx, ev, a.done(ev.ID)); err != nil {
					t.Fatal(err)
				}
			}
			for _, r := range a.wait(t, n) {
				if !errors.Is(r.err, code) {
					t.Errorf("done(%v) for %s, want an error wrapping %v", r.err, r.id, code)
				}
				var pe *sink.ProduceError
				if !errors.As(r.err, &pe) {
					t.Errorf("done(%T) for %s, want *ProduceError", r.err, r.id)
					continue
				}
				ev := evs[r.id]
				if pe.EventID != ev.ID || pe.LSN != ev.LSN.String() || pe.Topic != topic {
					t.Errorf("ProduceError{Topic: %q, EventID: %q, LSN: %q}, want %q, %q, %q", pe.Topic, pe.EventID, pe.LSN, topic, ev.ID, ev.LSN)
				}
				delete(evs, r.id) // each event fails once
			}
			if len(evs) != 0 {
				t.Errorf("no done for %d events", len(evs))
			}
			a.none(t)
		})
	}
}

// TestMaxBufferedRecordsBlocks: with the broker holding produce requests and
// MaxBufferedRecords 5, the sixth Produce blocks until its context ends;
// then it returns nil and its done reports the context error. The first five
// are unaffected and acknowledged once the broker answers.
func TestMaxBufferedRecordsBlocks(t *testing.T) {
	t.Parallel()
	const topic = "outbox.event.order"
	c := newCluster(t, kfake.SeedTopics(1, topic))
	s := newSink(t, sink.Config{Brokers: c.ListenAddrs(), MaxBufferedRecords: 5})
	held, release := holdProduce(c)
	defer release()
	ctx := testCtx(t)

	a := newAcks(6)
	var ids []string
	for i := range 5 {
		ev := event(i, "order", "o-1")
		ids = append(ids, ev.ID)
		if err := s.Produce(ctx, ev, a.done(ev.ID)); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Eventually(t, waitTimeout, "a produce request to reach the broker", func() bool { return held() > 0 })

	sixth := event(5, "order", "o-1")
	sixthCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	returned := make(chan error, 1)
	go func() { returned <- s.Produce(sixthCtx, sixth, a.done(sixth.ID)) }()

	select {
	case err := <-returned:
		t.Fatalf("sixth Produce returned %v with 5 records buffered, want it to block", err)
	case <-time.After(quiet):
	}
	a.none(t)

	cancel()
	select {
	case err := <-returned:
		if err != nil {
			t.Errorf("sixth Produce returned %v after its context ended, want nil (the failure goes to done)", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("sixth Produce still blocked after its context was cancelled")
	}
	r := a.wait(t, 1)[0]
	if r.id != sixth.ID || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("done(%v) for %s, want context.Canceled for %s", r.err, r.id, sixth.ID)
	}
	var pe *sink.ProduceError
	if !errors.As(r.err, &pe) || pe.EventID != sixth.ID {
		t.Errorf("done(%#v), want a *ProduceError for %s", r.err, sixth.ID)
	}

	release()
	allOK(t, a.wait(t, 5), ids)
	a.none(t)
	consume(t, c, topic, 5)
}

// TestCloseFailsBufferedRecords: Close ends every unacknowledged record with
// exactly one done(error), never with nil.
func TestCloseFailsBufferedRecords(t *testing.T) {
	t.Parallel()
	c := newCluster(t, kfake.SeedTopics(1, "outbox.event.order"))
	s, err := sink.New(sink.Config{Brokers: c.ListenAddrs()}, discard)
	if err != nil {
		t.Fatal(err)
	}
	held, release := holdProduce(c)
	defer release()
	ctx := testCtx(t)
	const n = 5
	a := newAcks(n)
	for i := range n {
		ev := event(i, "order", "o-1")
		if err := s.Produce(ctx, ev, a.done(ev.ID)); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Eventually(t, waitTimeout, "a produce request to reach the broker", func() bool { return held() > 0 })

	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	for _, r := range a.wait(t, n) {
		if !errors.Is(r.err, kgo.ErrClientClosed) {
			t.Errorf("done(%v) for %s, want kgo.ErrClientClosed: the broker never acknowledged it", r.err, r.id)
		}
	}
	select {
	case <-closed:
	case <-time.After(waitTimeout):
		t.Fatal("Close did not return")
	}
	a.none(t)
}

func TestPing(t *testing.T) {
	t.Parallel()
	t.Run("kfake", func(t *testing.T) {
		t.Parallel()
		c := newCluster(t)
		s := newSink(t, sink.Config{Brokers: c.ListenAddrs()})
		if err := s.Ping(testCtx(t)); err != nil {
			t.Fatalf("Ping: %v", err)
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		t.Parallel()
		s := newSink(t, sink.Config{Brokers: []string{"127.0.0.1:1"}})
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		err := s.Ping(ctx)
		if err == nil {
			t.Fatal("Ping to 127.0.0.1:1 succeeded")
		}
		if !strings.Contains(err.Error(), "127.0.0.1:1") {
			t.Errorf("error %q does not name the broker", err)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	ok := sink.Config{Brokers: []string{"localhost:9092"}}
	with := func(f func(c *sink.Config)) sink.Config {
		c := ok
		c.Brokers = slices.Clone(ok.Brokers)
		f(&c)
		return c
	}
	for _, tc := range []struct {
		name    string
		cfg     sink.Config
		wantErr string
	}{
		{name: "minimal", cfg: ok},
		{name: "everything set", cfg: sink.Config{
			Brokers: []string{"k1:9092", "k2:9092"}, Topic: "events.{table}", Compression: "zstd",
			Linger: time.Millisecond, BatchMaxBytes: 1 << 20, MaxBufferedBytes: 1 << 20, MaxBufferedRecords: 10,
			DisableCreateTopics: true, TopicPartitions: 6, TopicReplicationFactor: 3, ClientID: "x",
		}},
		{name: "compression none", cfg: with(func(c *sink.Config) { c.Compression = "none" })},
		{name: "compression gzip", cfg: with(func(c *sink.Config) { c.Compression = "gzip" })},
		{name: "compression snappy", cfg: with(func(c *sink.Config) { c.Compression = "snappy" })},
		{name: "compression lz4", cfg: with(func(c *sink.Config) { c.Compression = "lz4" })},
		{name: "fixed topic", cfg: with(func(c *sink.Config) { c.Topic = "events" })},

		{name: "no brokers", cfg: sink.Config{}, wantErr: "kafka Brokers"},
		{name: "empty broker list", cfg: with(func(c *sink.Config) { c.Brokers = []string{} }), wantErr: "kafka Brokers"},
		{name: "empty broker", cfg: with(func(c *sink.Config) { c.Brokers = []string{""} }), wantErr: `"" is not host:port`},
		{name: "broker without port", cfg: with(func(c *sink.Config) { c.Brokers = []string{"k1:9092", "localhost"} }), wantErr: `"localhost" is not host:port`},
		{name: "bad compression", cfg: with(func(c *sink.Config) { c.Compression = "brotli" }), wantErr: "kafka Compression"},
		{name: "compression is case sensitive", cfg: with(func(c *sink.Config) { c.Compression = "LZ4" }), wantErr: "kafka Compression"},
		{name: "bad template", cfg: with(func(c *sink.Config) { c.Topic = "outbox.{aggregate}" }), wantErr: "unknown placeholder"},
		{name: "unclosed template", cfg: with(func(c *sink.Config) { c.Topic = "outbox.{table" }), wantErr: "unclosed"},
		{name: "invalid fixed topic", cfg: with(func(c *sink.Config) { c.Topic = "my topic" }), wantErr: "invalid topic name"},
		{name: "negative linger", cfg: with(func(c *sink.Config) { c.Linger = -time.Millisecond }), wantErr: "not between 0 and 1m"},
		{name: "linger above franz-go's limit", cfg: with(func(c *sink.Config) { c.Linger = time.Hour }), wantErr: "not between 0 and 1m"},
		{name: "negative batch bytes", cfg: with(func(c *sink.Config) { c.BatchMaxBytes = -1 }), wantErr: "not between 512 and 1 GiB"},
		{name: "tiny batch bytes", cfg: with(func(c *sink.Config) { c.BatchMaxBytes = 100 }), wantErr: "not between 512 and 1 GiB"},
		{name: "broker without host", cfg: with(func(c *sink.Config) { c.Brokers = []string{":9092"} }), wantErr: "not host:port"},
		{name: "broker without port number", cfg: with(func(c *sink.Config) { c.Brokers = []string{"kafka:"} }), wantErr: "no valid port"},
		{name: "partitions below -1", cfg: with(func(c *sink.Config) { c.TopicPartitions = -2 }), wantErr: "-1 (broker default) or positive"},
		{name: "illegal literal in template", cfg: with(func(c *sink.Config) { c.Topic = "out box.{aggregate_type}" }), wantErr: "invalid topic name"},
		{name: "negative buffered bytes", cfg: with(func(c *sink.Config) { c.MaxBufferedBytes = -1 }), wantErr: "must not be negative"},
		{name: "negative buffered records", cfg: with(func(c *sink.Config) { c.MaxBufferedRecords = -1 }), wantErr: "must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tc.wantErr)
			}
			// New refuses what Validate refuses.
			if s, err := sink.New(tc.cfg, discard); err == nil {
				s.Close()
				t.Fatal("New accepted a config that Validate rejects")
			}
		})
	}
}
