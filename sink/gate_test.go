package sink_test

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walrelay/walrelay/internal/testwait"
	"github.com/walrelay/walrelay/sink"
)

// countProduce counts the produce requests and records reaching c, holding
// request number holdAt (from 1; 0: none) until release.
func countProduce(c *kfake.Cluster, holdAt int64) (requests, records func() int64, release func()) {
	gate := make(chan struct{})
	var nreq, nrec atomic.Int64
	var once sync.Once
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		for _, t := range pr.Topics {
			for _, p := range t.Partitions {
				var b kmsg.RecordBatch
				if err := b.ReadFrom(p.Records); err == nil {
					nrec.Add(int64(b.NumRecords))
				}
			}
		}
		if nreq.Add(1) == holdAt {
			c.SleepControl(func() { <-gate })
		}
		return nil, nil, false
	})
	return nreq.Load, nrec.Load, func() { once.Do(func() { close(gate) }) }
}

// producesWritten counts the produce requests a client wrote (kfake serves one
// connection's requests one at a time, so the broker side cannot see pipelining).
type producesWritten struct{ n atomic.Int64 }

func (p *producesWritten) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == int16(kmsg.Produce) && err == nil {
		p.n.Add(1)
	}
}

// TestAdaptiveBatchingGathersWhileInFlight: with the default linger (0), a record
// sent while nothing is in flight goes out at once, and the records sent while its
// produce request is in flight wait and go out together right after it: no request
// per record (franz-go alone sends up to five requests per broker at once).
func TestAdaptiveBatchingGathersWhileInFlight(t *testing.T) {
	t.Parallel()
	const topic = "outbox.event.order"
	c := newCluster(t, kfake.SeedTopics(1, topic))
	var written producesWritten
	s := newSink(t, sink.Config{Brokers: c.ListenAddrs()}, sink.WithClientOpts(kgo.WithHooks(&written)))
	requests, records, release := countProduce(c, 2)
	defer release()
	ctx := testCtx(t)

	// A first record, acknowledged: franz-go allows one request in flight per
	// broker until its first response, five after it.
	warm := event(100, "order", "o-1")
	if err := s.Produce(ctx, warm, func(err error) {
		if err != nil {
			t.Errorf("warm-up record: %v", err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, waitTimeout, "the warm-up record", func() bool { return requests() == 1 && s.Buffered() == 0 })

	a := newAcks(10)
	first := event(0, "order", "o-1")
	ids := []string{first.ID}
	if err := s.Produce(ctx, first, a.done(first.ID)); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, waitTimeout, "the first record's request at the broker", func() bool { return requests() == 2 })
	for i := 1; i < 10; i++ {
		ev := event(i, "order", "o-1")
		ids = append(ids, ev.ID)
		if err := s.Produce(ctx, ev, a.done(ev.ID)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(quiet)
	if n := written.n.Load() - 1; n != 1 {
		t.Fatalf("%d produce requests written while the first was in flight, want 1 (records must wait)", n)
	}
	if got := s.Buffered(); got != 10 {
		t.Errorf("Buffered() = %d with 10 records sent and none acknowledged, want 10", got)
	}
	release()
	rs := a.wait(t, 10)
	allOK(t, rs, ids)
	for i, r := range rs { // one partition: acknowledged in order
		if r.id != ids[i] {
			t.Fatalf("done #%d for %s, want %s", i, r.id, ids[i])
		}
	}
	if n := written.n.Load() - 1; n > 3 {
		t.Errorf("%d produce requests for 10 records, want at most 3 (1 + the gathered ones)", n)
	}
	if n := records(); n != 11 {
		t.Errorf("broker saw %d records, want 11", n)
	}
	testwait.Eventually(t, waitTimeout, "Buffered() to reach 0", func() bool { return s.Buffered() == 0 })
}

// TestAdaptiveBatchingCloseFailsWaiting: records still waiting in the gate when
// the sink closes fail (done with an error): none is dropped silently.
func TestAdaptiveBatchingCloseFailsWaiting(t *testing.T) {
	t.Parallel()
	const topic = "outbox.event.order"
	c := newCluster(t, kfake.SeedTopics(1, topic))
	s, err := sink.New(sink.Config{Brokers: c.ListenAddrs()}, discard)
	if err != nil {
		t.Fatal(err)
	}
	requests, _, release := countProduce(c, 1)
	defer release()
	ctx := testCtx(t)
	a := newAcks(4)
	for i := range 4 {
		ev := event(i, "order", "o-1")
		if err := s.Produce(ctx, ev, a.done(ev.ID)); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			testwait.Eventually(t, waitTimeout, "the first request at the broker", func() bool { return requests() == 1 })
		}
	}
	s.Close()
	for _, r := range a.wait(t, 4) {
		if r.err == nil {
			t.Errorf("%s: done(nil) after Close with the broker holding its request", r.id)
		}
	}
}

// produceTimes records when the client wrote each produce request.
type produceTimes struct {
	mu sync.Mutex
	at []time.Time
}

func (p *produceTimes) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == int16(kmsg.Produce) && err == nil {
		p.mu.Lock()
		p.at = append(p.at, time.Now())
		p.mu.Unlock()
	}
}

func (p *produceTimes) times() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.at)
}

// TestAdaptiveBatchingPacesRounds: with a linger, adaptive batching starts two
// rounds at least the linger apart: records sent right after a round was
// acknowledged wait for the rest of the interval before any of them is written.
// (The round then reaches franz-go as a burst of Produce calls; with no linger
// of its own franz-go may split a burst over several requests, so the number
// of requests is not the gate's to promise.)
func TestAdaptiveBatchingPacesRounds(t *testing.T) {
	t.Parallel()
	const topic = "outbox.event.order"
	const pace = 300 * time.Millisecond
	c := newCluster(t, kfake.SeedTopics(1, topic))
	var written produceTimes
	s := newSink(t, sink.Config{Brokers: c.ListenAddrs(), Batching: sink.BatchingAdaptive, Linger: pace},
		sink.WithClientOpts(kgo.WithHooks(&written)))
	ctx := testCtx(t)

	first := event(0, "order", "o-1")
	a := newAcks(6)
	// The first round starts inside this Produce, hence not before t0.
	t0 := time.Now()
	if err := s.Produce(ctx, first, a.done(first.ID)); err != nil {
		t.Fatal(err)
	}
	allOK(t, a.wait(t, 1), []string{first.ID})
	var ids []string
	for i := 1; i < 6; i++ {
		ev := event(i, "order", "o-1")
		ids = append(ids, ev.ID)
		if err := s.Produce(ctx, ev, a.done(ev.ID)); err != nil {
			t.Fatal(err)
		}
	}
	allOK(t, a.wait(t, 5), ids)
	at := written.times()
	if len(at) < 2 {
		t.Fatalf("%d produce requests for a record and 5 acknowledged after it, want at least 2", len(at))
	}
	// Measured from before the first round started: its own request may be
	// written much later (metadata, dial), so its write time is no reference.
	for i, w := range at[1:] {
		if gap := w.Sub(t0); gap < pace {
			t.Errorf("request %d written %v after the first round started, want at least the linger (%v)", i+2, gap, pace)
		}
	}
}

// TestAdaptiveBatchingCloseFailsPaced: a record waiting only for the pace (nothing
// in flight) fails when the sink closes, and the timer hands nothing to the
// closed client afterwards.
func TestAdaptiveBatchingCloseFailsPaced(t *testing.T) {
	t.Parallel()
	const topic = "outbox.event.order"
	c := newCluster(t, kfake.SeedTopics(1, topic))
	var written produceTimes
	s, err := sink.New(sink.Config{Brokers: c.ListenAddrs(), Batching: sink.BatchingAdaptive, Linger: time.Minute}, discard,
		sink.WithClientOpts(kgo.WithHooks(&written)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	first, second := event(0, "order", "o-1"), event(1, "order", "o-1")
	a := newAcks(2)
	if err := s.Produce(ctx, first, a.done(first.ID)); err != nil {
		t.Fatal(err)
	}
	allOK(t, a.wait(t, 1), []string{first.ID})
	// The gate counts a record out just after its done callback ran.
	testwait.Eventually(t, waitTimeout, "the first record to leave Buffered()", func() bool { return s.Buffered() == 0 })
	if err := s.Produce(ctx, second, a.done(second.ID)); err != nil {
		t.Fatal(err)
	}
	if got := s.Buffered(); got != 1 {
		t.Fatalf("Buffered() = %d with one record waiting for the pace, want 1", got)
	}
	s.Close()
	r := a.wait(t, 1)[0]
	if r.id != second.ID || r.err == nil {
		t.Fatalf("done(%v) for %s after Close, want an error for %s", r.err, r.id, second.ID)
	}
	if n := len(written.times()); n != 1 {
		t.Errorf("%d produce requests written, want 1 (the waiting record must not be sent)", n)
	}
}
