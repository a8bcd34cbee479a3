package relay

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walrelay/walrelay/checkpoint"
	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/replication"
)

// producer is what the pipeline needs from the sink.
type producer interface {
	Produce(ctx context.Context, ev *decoder.Event, done func(error)) error
}

// batchSource is what the pipeline needs from the replication stream.
type batchSource interface {
	Batches() <-chan *replication.Batch
	Release(*replication.Batch)
}

// PoisonError is an event whose values cannot become a valid record.
type PoisonError struct {
	EventID string
	Table   string
	LSN     pglogrepl.LSN
	Err     error
}

func (e *PoisonError) Error() string {
	return fmt.Sprintf("event id=%s table=%s lsn=%s cannot be produced: %v", e.EventID, e.Table, e.LSN, e.Err)
}

func (e *PoisonError) Unwrap() error { return e.Err }

// pipeline decodes stream messages, tracks them in the checkpoint and hands
// events to Kafka. One goroutine runs it; produce callbacks report failures
// through fatal.
type pipeline struct {
	dec        *decoder.Decoder
	tr         *checkpoint.Tracker
	sink       producer
	m          *metrics
	produceCtx context.Context // outlives a graceful drain
	fatal      chan error      // first produce failure; capacity 1
	walEnd     *atomic.Uint64  // highest server WAL end seen (for lag)
	out        decoder.Output
}

func (p *pipeline) fail(err error) {
	select {
	case p.fatal <- err:
	default:
	}
}

// run consumes batches until ctx is done (nil), the stream ends (nil) or an
// event cannot be delivered (error).
func (p *pipeline) run(ctx context.Context, src batchSource) error {
	for {
		if ctx.Err() != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-p.fatal:
			return err
		case b, ok := <-src.Batches():
			if !ok {
				return nil
			}
			err := p.handleBatch(ctx, b)
			src.Release(b)
			if err != nil {
				if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
					return nil
				}
				return err
			}
		}
	}
}

func (p *pipeline) handleBatch(ctx context.Context, b *replication.Batch) error {
	for i := range b.Msgs {
		if err := p.handle(ctx, &b.Msgs[i]); err != nil {
			return err
		}
	}
	return nil
}

func (p *pipeline) handle(ctx context.Context, msg *replication.Message) error {
	if uint64(msg.ServerWALEnd) > p.walEnd.Load() {
		p.walEnd.Store(uint64(msg.ServerWALEnd))
	}
	if msg.Keepalive {
		// Everything before this keepalive has been handed to the tracker
		// (stream order); the WAL end may be confirmed only if nothing is
		// open or in flight.
		if !p.dec.InTxn() {
			p.tr.AdvanceIdle(msg.ServerWALEnd)
		}
		return nil
	}
	out := &p.out
	if err := p.dec.Decode(msg.WALStart, msg.Data, out); err != nil {
		return fmt.Errorf("decode pgoutput at %s: %w", msg.WALStart, err)
	}
	switch out.Kind {
	case decoder.KindBegin:
		return p.tr.Begin(ctx)
	case decoder.KindEvent:
		return p.produce(ctx, &out.Event)
	case decoder.KindCommit:
		p.m.transactions.Inc()
		return p.tr.Commit(out.EndLSN)
	case decoder.KindHeartbeat:
		p.m.heartbeatLast.SetToCurrentTime()
		if ns, err := strconv.ParseInt(string(out.Content), 10, 64); err == nil {
			p.m.heartbeatLatency.Observe(time.Since(time.Unix(0, ns)).Seconds())
		}
	case decoder.KindIgnored:
		p.m.ignored.WithLabelValues(out.Reason).Inc()
	}
	return nil
}

func (p *pipeline) produce(ctx context.Context, ev *decoder.Event) error {
	if ev.Poison != nil {
		p.m.produceFailures.Inc()
		return &PoisonError{EventID: ev.ID, Table: ev.Table, LSN: ev.LSN, Err: ev.Poison}
	}
	ack, err := p.tr.Add(ctx)
	if err != nil {
		return err
	}
	err = p.sink.Produce(p.produceCtx, ev, func(err error) {
		if err != nil {
			p.m.produceFailures.Inc()
			p.fail(err)
			return
		}
		ack.Done()
		p.m.events.Inc()
	})
	if err != nil {
		p.m.produceFailures.Inc()
		return err
	}
	return nil
}
