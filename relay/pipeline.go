package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/walrelay/walrelay/checkpoint"
	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/internal/retry"
	"github.com/walrelay/walrelay/replication"
	"github.com/walrelay/walrelay/sink"
)

// producer is what the pipeline needs from the sink.
type producer interface {
	Prepare(ctx context.Context, ev *decoder.Event) (sink.Record, error)
	PrepareDeadLetter(ctx context.Context, ev *decoder.Event, intended, reason string, cause error) (sink.Record, error)
	Send(ctx context.Context, r sink.Record, done func(error))
	Topic(ev *decoder.Event) (string, error)
}

// batchSource is what the pipeline needs from the replication stream.
type batchSource interface {
	Batches() <-chan *replication.Batch
	Release(*replication.Batch)
}

// pipeline decodes stream messages, tracks them in the checkpoint and hands
// events to Kafka through its delivery mode. One goroutine runs it; produce
// callbacks report failures through fail.
type pipeline struct {
	dec        *decoder.Decoder
	tr         *checkpoint.Tracker
	d          delivery
	onPoison   string
	log        *slog.Logger
	obs        Observer
	produceCtx context.Context // outlives a graceful drain
	walEnd     *atomic.Uint64  // highest server WAL end seen (for lag)
	out        decoder.Output

	// failed ends with the first produce failure of any session (records
	// of an earlier session may fail after a reconnect); fail cancels it.
	failed context.Context
	fail   context.CancelCauseFunc

	opened   bool // d.open ran: the slot streams to this process
	skipping bool // the open transaction was delivered before
}

func (p *pipeline) failure() error {
	if p.failed.Err() != nil {
		return context.Cause(p.failed)
	}
	return nil
}

// run consumes batches until ctx is done (nil), the stream ends (nil) or an
// event cannot be delivered (error). A produce failure stops it, also when
// it is blocked at the in-flight cap.
func (p *pipeline) run(parent context.Context, src batchSource) error {
	ctx, abort := context.WithCancelCause(parent)
	defer abort(nil)
	stop := context.AfterFunc(p.failed, func() { abort(context.Cause(p.failed)) })
	defer stop()
	for {
		if ctx.Err() != nil {
			return p.failure()
		}
		if !p.dec.InTxn() && p.d.ready() {
			// The mode acts as soon as the stream has nothing more
			// buffered (exactly-once: commit), between transactions.
			select {
			case b, ok := <-src.Batches():
				if done, err := p.take(ctx, src, b, ok); done || err != nil {
					return err
				}
			default:
				if err := p.d.idle(ctx); err != nil {
					return p.cause(ctx, err)
				}
			}
			continue
		}
		select {
		case <-ctx.Done():
			return p.failure()
		case b, ok := <-src.Batches():
			if done, err := p.take(ctx, src, b, ok); done || err != nil {
				return err
			}
		case <-p.d.wake():
			if err := p.d.woken(ctx, p.dec.InTxn()); err != nil {
				return p.cause(ctx, err)
			}
		}
	}
}

// take handles batch b received from src (ok false: the stream ended, and
// done is true). err is what run must return.
func (p *pipeline) take(ctx context.Context, src batchSource, b *replication.Batch, ok bool) (done bool, err error) {
	if !ok {
		return true, nil
	}
	if !p.opened {
		// The slot streams to this process: now the mode may act on it.
		if err := p.d.open(ctx); err != nil {
			src.Release(b)
			return true, err
		}
		p.opened = true
	}
	err = p.handleBatch(ctx, b)
	src.Release(b)
	if err != nil {
		return true, p.cause(ctx, err)
	}
	return false, nil
}

// cause returns what run returns for err: when err is only ctx's end, the
// produce failure that ended it (nil when ctx ended for a shutdown), never a
// bare cancellation that would hide it.
func (p *pipeline) cause(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return p.failure()
	}
	return err
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
		return fmt.Errorf("replication stream (after confirmed position %s): %w", p.tr.Watermark(), err)
	}
	switch out.Kind {
	case decoder.KindBegin:
		skip, err := p.d.begin(ctx, out.CommitLSN)
		if err != nil {
			return err
		}
		p.skipping = skip
		return p.tr.Begin(ctx)
	case decoder.KindEvent:
		if err := p.d.event(p.skipping); err != nil || p.skipping {
			return err
		}
		return p.produce(ctx, &out.Event)
	case decoder.KindCommit:
		p.obs.TransactionRead()
		if err := p.tr.CommitAt(out.EndLSN, out.CommitTime); err != nil {
			return err
		}
		p.skipping = false
		return p.d.end(ctx, out.EndLSN)
	case decoder.KindHeartbeat:
		var emitted time.Time
		if ns, err := strconv.ParseInt(string(out.Content), 10, 64); err == nil {
			emitted = time.Unix(0, ns)
		}
		p.obs.HeartbeatDecoded(emitted)
	case decoder.KindIgnored:
		p.obs.ChangeIgnored(out.Reason)
	case decoder.KindFiltered:
		// Read past, never tracked: the transaction is confirmed like any
		// other once its published events are in Kafka.
		p.obs.EventFiltered(out.Reason)
	}
	return nil
}

func (p *pipeline) produce(ctx context.Context, ev *decoder.Event) error {
	// Track first: whatever happens to the event, the watermark waits for it.
	ack, err := p.tr.Add(ctx)
	if err != nil {
		return err
	}
	committed := ev.CommitTime
	done := func(err error) {
		if err != nil {
			p.obs.ProduceFailed()
			p.fail(err)
			return
		}
		// Counted before the ack can move the watermark: a confirmed
		// position implies its events are in the metrics.
		p.obs.EventAcked(committed)
		ack.Done()
	}
	if reason, cause := sink.PoisonOf(ev); cause != nil {
		intended, _ := p.d.Topic(ev) // best effort: for the dead-letter header
		return p.deadLetter(ctx, ev, intended, reason, cause, done)
	}
	// ctx (not produceCtx) bounds the topic look-ups: a shutdown must not
	// wait for Kafka to come back.
	rec, err := p.d.Prepare(ctx, ev)
	for attempt := 1; err != nil && sink.IsRetryable(err); attempt++ {
		if werr := p.awaitKafka(ctx, ev, attempt, err); werr != nil {
			return werr
		}
		rec, err = p.d.Prepare(ctx, ev)
	}
	if err == nil {
		p.d.Send(p.produceCtx, rec, done)
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err() // shutting down: the event was not produced, nor confirmed
	}
	var pe *sink.ProduceError
	if errors.As(err, &pe) {
		if reason, ok := sink.RefusalReason(err); ok {
			return p.deadLetter(ctx, ev, pe.Topic, reason, err, done)
		}
	}
	p.obs.ProduceFailed()
	return err
}

// awaitKafka waits before attempt+1 of preparing ev while Kafka is
// unavailable (err), with backoff, until ctx ends. The pipeline reads nothing
// meanwhile: the stream stops at the in-flight cap, as when produce requests
// are retried, and the watermark stays before ev.
func (p *pipeline) awaitKafka(ctx context.Context, ev *decoder.Event, attempt int, err error) error {
	wait := retry.KafkaWait(attempt)
	p.obs.KafkaRetried()
	var topic string
	var pe *sink.ProduceError
	if errors.As(err, &pe) {
		topic = pe.Topic
	}
	what := "kafka unavailable while preparing an event's record; retrying"
	if errors.Is(err, sink.ErrRegistryUnavailable) {
		what = "schema registry unavailable while encoding an event's record; retrying"
	}
	p.log.Warn(what, "topic", topic, "id", ev.ID, "lsn", ev.LSN.String(), "xid", ev.XID,
		"attempt", attempt, "retry_in", wait.String(), "error", err.Error())
	return retry.Sleep(ctx, wait)
}

// deadLetter sends ev to the dead-letter topic, or stops with a
// *PoisonError under --on-poison=stop. Either way the event is accounted for:
// never skipped.
func (p *pipeline) deadLetter(ctx context.Context, ev *decoder.Event, intended string, reason sink.DeadLetterReason, cause error, done func(error)) error {
	if p.onPoison == OnPoisonStop {
		p.obs.ProduceFailed()
		return &sink.PoisonError{EventID: ev.ID, Table: ev.Table, LSN: ev.LSN, Reason: string(reason), Err: cause}
	}
	rec, err := p.d.PrepareDeadLetter(ctx, ev, intended, string(reason), cause)
	for attempt := 1; err != nil && sink.IsRetryable(err); attempt++ {
		if werr := p.awaitKafka(ctx, ev, attempt, err); werr != nil {
			return werr
		}
		rec, err = p.d.PrepareDeadLetter(ctx, ev, intended, string(reason), cause)
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		p.obs.ProduceFailed()
		return err
	}
	p.obs.DeadLettered(string(reason))
	p.log.Warn("event dead-lettered", "id", ev.ID, "lsn", ev.LSN.String(), "xid", ev.XID, "table", ev.Table, "topic", intended,
		"reason", reason, "error", cause.Error())
	p.d.Send(p.produceCtx, rec, done)
	return nil
}
