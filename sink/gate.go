package sink

import (
	"context"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// gate is walrelay's adaptive batching (Config.Linger 0, at-least-once): a
// record goes to the client at once when nothing of this sink is in flight;
// otherwise it waits in the gate, and
// everything waiting goes to the client together as soon as the last
// record in flight finished. An idle stream thus pays no linger, and under
// load records gather while a produce request is in flight, so batches
// grow with the rate instead of requests (franz-go alone would send up to
// five requests per broker at once, a record each). The gate is global, not
// per broker: one slow broker holds back the records for the others for
// its round trip.
//
// Records in the gate and in flight together are at most MaxBufferedRecords,
// and the gate holds at most MaxBufferedBytes (what it hands to the then
// empty client fits the client's buffer); Send blocks above that, so
// backpressure is unchanged.
type gate struct {
	client      func() *kgo.Client
	maxRecords  int
	maxBytes    int
	mu          sync.Mutex
	inFlight    int  // records handed to the client (or being handed) and not finished
	waiting     bool // a send waits for room
	queue       []gated
	queuedBytes int
	room        chan struct{} // signalled when the queue was handed over
}

type gated struct {
	ctx     context.Context
	rec     *kgo.Record
	promise func(*kgo.Record, error)
	size    int
}

func newGate(client func() *kgo.Client, maxRecords, maxBytes int) *gate {
	return &gate{client: client, maxRecords: maxRecords, maxBytes: maxBytes, room: make(chan struct{}, 1)}
}

// send hands rec to the client now or queues it. promise is called exactly
// once, as by Produce.
func (g *gate) send(ctx context.Context, rec *kgo.Record, promise func(*kgo.Record, error)) {
	size := len(rec.Key) + len(rec.Value)
	for _, h := range rec.Headers {
		size += len(h.Key) + len(h.Value)
	}
	wrapped := func(r *kgo.Record, err error) {
		promise(r, err)
		g.finished()
	}
	g.mu.Lock()
	for {
		if g.inFlight == 0 && len(g.queue) == 0 {
			g.inFlight++
			g.mu.Unlock()
			g.client().Produce(ctx, rec, wrapped)
			return
		}
		if g.inFlight+len(g.queue) < g.maxRecords && (len(g.queue) == 0 || g.queuedBytes+size <= g.maxBytes) {
			break
		}
		g.waiting = true
		g.mu.Unlock()
		select {
		case <-g.room:
		case <-ctx.Done():
			promise(rec, ctx.Err())
			return
		}
		g.mu.Lock()
	}
	g.queue = append(g.queue, gated{ctx: ctx, rec: rec, promise: wrapped, size: size})
	g.queuedBytes += size
	g.mu.Unlock()
}

// finished is called once per record the client finished.
func (g *gate) finished() {
	g.mu.Lock()
	g.inFlight--
	if g.waiting {
		g.waiting = false
		g.signalRoom()
	}
	g.handOverLocked() // unlocks
}

func (g *gate) signalRoom() {
	select {
	case g.room <- struct{}{}:
	default:
	}
}

// handOverLocked, called with mu held, hands the queue to the client when
// nothing is in flight; it unlocks mu. The hand-over runs
// on its own goroutine: it is called from promises, which must not block on
// the client.
func (g *gate) handOverLocked() {
	if g.inFlight > 0 || len(g.queue) == 0 {
		g.mu.Unlock()
		return
	}
	batch := g.queue
	g.queue, g.queuedBytes = nil, 0
	g.inFlight += len(batch)
	g.waiting = false
	g.mu.Unlock()
	g.signalRoom()
	cl := g.client()
	go func() {
		for _, q := range batch {
			cl.Produce(q.ctx, q.rec, q.promise)
		}
	}()
}

// buffered returns the records in the gate or in flight.
func (g *gate) buffered() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return int64(g.inFlight + len(g.queue))
}

// fail fails every record still in the gate with err (the client closed).
func (g *gate) fail(err error) {
	g.mu.Lock()
	batch := g.queue
	g.queue, g.queuedBytes = nil, 0
	g.inFlight += len(batch) // finished() runs for each below
	g.mu.Unlock()
	for _, q := range batch {
		q.promise(q.rec, err)
	}
}
