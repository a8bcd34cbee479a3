package sink

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// gate is walrelay's adaptive batching (Config.Batching adaptive,
// at-least-once). Records go to the client in rounds: at most one round is
// in flight, and two rounds start at least pace (Config.Linger) apart. A
// record that finds no round in flight and none started within the pace
// goes out at once; otherwise it waits in the gate, and everything waiting
// goes out together once the round in flight finished and the pace since
// the last round ran out, whichever comes later.
//
// So a quiet stream pays no linger at all, and under load a round carries
// what arrived since the previous one: at most 1/pace produce requests per
// second, as with Kafka's fixed linger, but a record waits only for the
// rest of the current interval, not for a whole linger from the first
// record of its batch. (franz-go alone sends up to five requests per broker
// at once, a record each, without a linger, and holds every batch for the
// full linger with one.) The gate is global, not per broker: one slow
// broker holds back the records for the others for its round trip.
//
// Records in the gate and in flight together are at most MaxBufferedRecords,
// and the gate holds at most MaxBufferedBytes (what it hands to the then
// empty client fits the client's buffer); Send blocks above that, so
// backpressure is unchanged.
type gate struct {
	client     func() *kgo.Client
	maxRecords int
	maxBytes   int
	pace       time.Duration // least time between the starts of two rounds
	timer      *time.Timer   // hands the queue over when the pace allows

	mu          sync.Mutex
	inFlight    int       // records handed to the client (or being handed) and not finished
	lastRound   time.Time // when the last round started
	timerSet    bool      // the timer will hand the queue over
	closed      bool      // fail ran: nothing is handed over any more
	waiting     bool      // a send waits for room
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

func newGate(client func() *kgo.Client, maxRecords, maxBytes int, pace time.Duration) *gate {
	g := &gate{client: client, maxRecords: maxRecords, maxBytes: maxBytes, pace: pace, room: make(chan struct{}, 1)}
	g.timer = time.AfterFunc(time.Hour, g.paced)
	g.timer.Stop()
	return g
}

// send hands rec to the client now or queues it. promise is called exactly
// once, as by kgo.Client.Produce.
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
		if g.closed {
			// After fail: the closed client fails the record.
			g.inFlight++
			g.mu.Unlock()
			g.client().Produce(ctx, rec, wrapped)
			return
		}
		if g.inFlight == 0 && len(g.queue) == 0 {
			if now := time.Now(); !now.Before(g.lastRound.Add(g.pace)) {
				g.inFlight++
				g.lastRound = now
				g.mu.Unlock()
				g.client().Produce(ctx, rec, wrapped)
				return
			}
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
	if g.inFlight == 0 {
		g.armLocked()
	}
	g.mu.Unlock()
}

// armLocked, called with mu held while nothing is in flight and records
// wait, sets the timer to hand them over when the pace allows.
func (g *gate) armLocked() {
	if !g.timerSet && !g.closed {
		g.timerSet = true
		g.timer.Reset(time.Until(g.lastRound.Add(g.pace)))
	}
}

// finished is called once per record the client finished.
func (g *gate) finished() {
	g.mu.Lock()
	g.inFlight--
	if g.waiting {
		g.waiting = false
		g.signalRoom()
	}
	if batch := g.roundLocked(); batch != nil {
		// Promises must not block on the client: produce elsewhere.
		go g.produce(batch)
	}
}

// paced runs on the timer: the pace allows the next round.
func (g *gate) paced() {
	g.mu.Lock()
	g.timerSet = false
	if batch := g.roundLocked(); batch != nil {
		g.produce(batch)
	}
}

// roundLocked, called with mu held, unlocks it and returns the queue to hand
// to the client when a round may start now; else nil (and the timer is
// armed when only the pace holds the queue back).
func (g *gate) roundLocked() []gated {
	if g.inFlight > 0 || len(g.queue) == 0 || g.closed {
		g.mu.Unlock()
		return nil
	}
	now := time.Now()
	if now.Before(g.lastRound.Add(g.pace)) {
		g.armLocked()
		g.mu.Unlock()
		return nil
	}
	batch := g.queue
	g.queue, g.queuedBytes = nil, 0
	g.inFlight += len(batch)
	g.lastRound = now
	g.waiting = false
	g.mu.Unlock()
	g.signalRoom()
	return batch
}

func (g *gate) produce(batch []gated) {
	cl := g.client()
	for _, q := range batch {
		cl.Produce(q.ctx, q.rec, q.promise)
	}
}

func (g *gate) signalRoom() {
	select {
	case g.room <- struct{}{}:
	default:
	}
}

// buffered returns the records in the gate or in flight.
func (g *gate) buffered() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return int64(g.inFlight + len(g.queue))
}

// fail fails every record still in the gate with err (the client closed);
// the gate hands nothing over afterwards.
func (g *gate) fail(err error) {
	g.mu.Lock()
	g.closed = true
	g.timer.Stop()
	g.timerSet = false
	batch := g.queue
	g.queue, g.queuedBytes = nil, 0
	g.inFlight += len(batch) // finished() runs for each below
	g.waiting = false
	g.mu.Unlock()
	g.signalRoom()
	for _, q := range batch {
		q.promise(q.rec, err)
	}
}
