package replication

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// pollWait is the shortest wait of a receive: how often a watermark that is
// due to be reported, and has not moved yet, is looked at again.
const pollWait = 250 * time.Millisecond

// maxBatchMsgs caps the messages of one batch (small messages would otherwise
// make a batch of BatchBytes hold tens of thousands).
const maxBatchMsgs = 4096

// endCopyTimeout bounds the end-of-stream handshake on shutdown.
const endCopyTimeout = 10 * time.Second

// Message is one message of the replication stream.
type Message struct {
	// WALStart is the WAL position of an XLogData message.
	WALStart pglogrepl.LSN
	// ServerWALEnd is the server's WAL end when the message was sent.
	ServerWALEnd pglogrepl.LSN
	// Keepalive marks a keepalive: Data is nil, and ServerWALEnd is a
	// position the server has sent everything up to.
	Keepalive bool
	// Data is the pgoutput message. It is valid only until the batch holding
	// it is released.
	Data []byte
}

// Batch is a run of consecutive stream messages. The consumer must hand it
// back with Stream.Release once done with it.
type Batch struct {
	Msgs []Message
	buf  []byte
}

func (b *Batch) reset() {
	b.Msgs = b.Msgs[:0]
	b.buf = b.buf[:0]
}

// Position is what the stream reports to Postgres.
type Position interface {
	// Watermark returns the LSN safe to confirm as flushed.
	Watermark() pglogrepl.LSN
	// Settled reports that nothing handed downstream is still waiting for
	// Kafka: the watermark will not move any more by itself.
	Settled() bool
}

// Stream reads the replication stream of a Conn. Run and Release are its only
// methods meant to be used concurrently: Run on one goroutine, Release from
// the consumer.
type Stream struct {
	conn *Conn
	pos  Position
	log  *slog.Logger
	free chan *Batch
	out  chan *Batch

	onStart      func()
	lastSent     pglogrepl.LSN
	lastSentAt   time.Time
	serverWALEnd pglogrepl.LSN
	lastData     pglogrepl.LSN // WAL start of the last XLogData received (0: none yet)
}

// StreamOption sets an optional collaborator.
type StreamOption func(*Stream)

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) StreamOption { return func(s *Stream) { s.log = l } }

// WithOnStart sets a function called once streaming has started.
func WithOnStart(fn func()) StreamOption { return func(s *Stream) { s.onStart = fn } }

// NewStream prepares a stream over c that reports pos. It allocates the batch
// pool; it starts nothing.
func (c *Conn) NewStream(pos Position, opts ...StreamOption) *Stream {
	n := c.cfg.Batches
	s := &Stream{
		conn:     c,
		pos:      pos,
		log:      slog.Default(),
		free:     make(chan *Batch, n),
		out:      make(chan *Batch, n),
		lastSent: c.Start,
	}
	for _, o := range opts {
		o(s)
	}
	for i := 0; i < n; i++ {
		s.free <- &Batch{buf: make([]byte, 0, c.cfg.BatchBytes)}
	}
	return s
}

// Batches returns the channel of filled batches, in stream order. It is
// closed when Run returns.
func (s *Stream) Batches() <-chan *Batch { return s.out }

// Release hands a consumed batch back to the pool. Safe to call from any
// goroutine.
func (s *Stream) Release(b *Batch) {
	b.reset()
	if cap(b.buf) > s.conn.cfg.BatchBytes {
		// Grown for one message larger than BatchBytes: do not keep it.
		b.buf = make([]byte, 0, s.conn.cfg.BatchBytes)
	}
	s.free <- b
}

// Run starts streaming from the slot's confirmed position and returns when
// ctx is done or the connection fails. When ctx is done it stops reading,
// waits (up to Config.ShutdownTimeout) until the Position is settled, reports
// the final watermark, and returns nil. Run closes the connection before it
// returns.
func (s *Stream) Run(ctx context.Context) (err error) {
	defer close(s.out)
	c := s.conn
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(cctx)
	}()

	args := []string{"proto_version '1'", publicationNamesArg(c.cfg.Publication)}
	if !c.cfg.NoMessages {
		args = append(args, "messages 'true'")
	}
	// Start position 0: the server resumes from the slot's confirmed_flush_lsn.
	if err := pglogrepl.StartReplication(ctx, c.conn, c.cfg.Slot, 0, pglogrepl.StartReplicationOptions{PluginArgs: args}); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.ObjectInUse {
			return fmt.Errorf("start replication on slot %s: %w: %s%s", c.cfg.Slot, ErrSlotInUse, pgErr.Message, c.slotHolder(ctx))
		}
		return fmt.Errorf("start replication on slot %s: %w", c.cfg.Slot, err)
	}
	s.log.Info("streaming", "slot", c.cfg.Slot, "publication", c.cfg.Publication, "lsn", c.Start.String())
	if s.onStart != nil {
		s.onStart()
	}

	if err := s.stream(ctx); err != nil {
		return err
	}
	return s.drain()
}

// stream reads until ctx is done (nil) or the connection fails.
func (s *Stream) stream(ctx context.Context) error {
	var cur *Batch
	flush := func() {
		if cur != nil && len(cur.Msgs) > 0 {
			s.out <- cur // never blocks: out holds as many batches as the pool
			cur = nil
		}
	}
	// Receives block on the connection's read deadline, set only when the
	// next wake-up moves (a status update due), not per message; a stop
	// request moves it to now. A context per receive would cost a timer and
	// a context registration per message, and a fixed short window would
	// wake an idle stream several times a second.
	nc := s.conn.conn.Conn()
	woke := make(chan struct{})
	stopWake := context.AfterFunc(ctx, func() {
		defer close(woke)
		_ = nc.SetReadDeadline(time.Now())
	})
	var deadline time.Time // nc's read deadline; zero: none yet
	lastHeard := time.Now()
	// next makes cur a free batch, waiting for one (backpressure); false when
	// ctx ended meanwhile.
	next := func() (bool, error) {
		b, err := s.acquire(ctx)
		if err != nil || b == nil {
			return false, err
		}
		cur = b
		// Time spent waiting for a batch (backpressure) is not silence.
		lastHeard = time.Now()
		return true, nil
	}
	defer func() {
		if !stopWake() {
			<-woke // a late wake-up must not land on the drain's traffic
		}
		_ = nc.SetReadDeadline(time.Time{})
		if cur != nil {
			s.Release(cur)
		}
	}()
	for {
		if ctx.Err() != nil {
			flush()
			return nil
		}
		if err := s.maybeSendStatus(false); err != nil {
			return err
		}
		if cur == nil {
			if ok, err := next(); !ok {
				return err // nil: ctx done while waiting
			}
		}
		if now := time.Now(); deadline.IsZero() || !now.Before(deadline) || s.wakeAt(now).Before(deadline) {
			deadline = s.wakeAt(now)
			if err := nc.SetReadDeadline(deadline); err != nil {
				return fmt.Errorf("receive from postgres: %w", err)
			}
			if ctx.Err() != nil {
				continue // the stop's wake-up may have been overwritten
			}
		}
		// context.Background: pgconn then watches no context (the deadline
		// above bounds the receive).
		raw, err := s.conn.conn.ReceiveMessage(context.Background())
		if err != nil {
			if pgconn.Timeout(err) {
				flush()
				if ctx.Err() != nil {
					continue
				}
				if silent := time.Since(lastHeard); silent > s.conn.cfg.ServerTimeout {
					return fmt.Errorf("receive from postgres: %w: nothing received for %v although replies were requested", ErrServerSilent, silent.Round(time.Second))
				}
				continue
			}
			return fmt.Errorf("receive from postgres: %w", err)
		}
		lastHeard = time.Now()
		switch msg := raw.(type) {
		case *pgproto3.CopyData:
			f, err := parseFrame(msg.Data, cmp.Or(s.lastData, s.conn.Start))
			if err != nil {
				return fmt.Errorf("receive from postgres: %w", err)
			}
			if f.serverWALEnd > s.serverWALEnd {
				s.serverWALEnd = f.serverWALEnd
			}
			if f.keepalive {
				cur.Msgs = append(cur.Msgs, Message{Keepalive: true, ServerWALEnd: f.serverWALEnd})
				flush()
				if f.replyRequested {
					if err := s.maybeSendStatus(true); err != nil {
						return err
					}
				}
				continue
			}
			s.lastData = f.walStart
			// A batch holds about BatchBytes. Hand the current one over before a
			// message that would overflow it, so that buffers never grow with
			// the transaction: the pool's memory stays Batches x BatchBytes,
			// plus messages larger than BatchBytes, each in a batch of its own.
			if len(cur.buf) > 0 && len(cur.buf)+len(f.data) > s.conn.cfg.BatchBytes {
				flush()
				if ok, err := next(); !ok {
					// nil: ctx done while waiting. This message was not handed
					// over, so its transaction is not confirmed and is read again.
					return err
				}
			}
			// Copy out of pgconn's read buffer, which the next receive reuses.
			start := len(cur.buf)
			cur.buf = append(cur.buf, f.data...)
			cur.Msgs = append(cur.Msgs, Message{WALStart: f.walStart, ServerWALEnd: f.serverWALEnd, Data: cur.buf[start:len(cur.buf):len(cur.buf)]})
			// A commit ends a transaction: hand it over now for latency,
			// unless more of the stream is already received (then the next
			// messages join the batch: one hand-over, not one per
			// transaction, when the stream is busy); otherwise fill the batch.
			if (f.data[0] == 'C' && s.conn.conn.Frontend().ReadBufferLen() == 0) ||
				len(cur.buf) >= s.conn.cfg.BatchBytes || len(cur.Msgs) >= maxBatchMsgs {
				flush()
			}
		case *pgproto3.NoticeResponse:
			if err := skippedPublication(msg, s.conn.cfg.Publication); err != nil {
				// Nothing after it is handed over or confirmed.
				return err
			}
			// Any other server warning is not part of the stream: log it, go on.
			s.log.Info("postgres notice on the replication connection", "slot", s.conn.cfg.Slot,
				"severity", msg.Severity, "message", msg.Message)
		case *pgproto3.ParameterStatus:
			// A reported setting changed (pgconn records it): not part of the stream.
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("replication stream: %w", pgconn.ErrorResponseToPgError(msg))
		case *pgproto3.CopyDone:
			return fmt.Errorf("replication stream: %w (CopyDone)", ErrServerEnded)
		case *pgproto3.CommandComplete:
			return fmt.Errorf("replication stream: %w (CommandComplete)", ErrServerEnded)
		default:
			return fmt.Errorf("replication stream: unexpected message %T", raw)
		}
	}
}

// wakeAt returns when a receive must give up waiting so that the next
// status update goes out on time: StatusInterval after the last one while
// something handed over (or WAL the server reported) is not confirmed yet,
// otherwise KeepaliveInterval after it, and never sooner than pollWait from
// now. An idle, confirmed stream thus wakes once per KeepaliveInterval; the
// server's silence is checked at each wake-up (ServerTimeout is at least
// three KeepaliveIntervals).
func (s *Stream) wakeAt(now time.Time) time.Time {
	wait := s.conn.cfg.KeepaliveInterval
	if s.unconfirmed() {
		wait = s.conn.cfg.StatusInterval
	}
	return maxTime(s.lastSentAt.Add(wait), now.Add(min(pollWait, wait)))
}

// unconfirmed reports that the last status update does not cover everything
// received: a message handed over at or after it, or a higher server WAL end.
func (s *Stream) unconfirmed() bool {
	return (s.lastData != 0 && s.lastData >= s.lastSent) || s.serverWALEnd > s.lastSent
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// acquire takes a free batch, reporting status while the consumer holds all
// of them (that is the backpressure: no WAL is read meanwhile). It returns nil
// when ctx is done.
func (s *Stream) acquire(ctx context.Context) (*Batch, error) {
	select {
	case b := <-s.free:
		return b, nil
	default:
	}
	t := time.NewTicker(s.conn.cfg.StatusInterval)
	defer t.Stop()
	for {
		select {
		case b := <-s.free:
			return b, nil
		case <-ctx.Done():
			return nil, nil
		case <-t.C:
			if err := s.maybeSendStatus(false); err != nil {
				return nil, err
			}
		}
	}
}

// maybeSendStatus reports the watermark when it moved and StatusInterval
// passed, when KeepaliveInterval passed, or at once when force is set.
func (s *Stream) maybeSendStatus(force bool) error {
	if !force && time.Since(s.lastSentAt) < s.conn.cfg.StatusInterval {
		return nil // nothing can be due yet; spare the watermark lock per message
	}
	w := s.pos.Watermark()
	if w < s.lastSent {
		w = s.lastSent // never report a lower position
	}
	since := time.Since(s.lastSentAt)
	due := force || since >= s.conn.cfg.KeepaliveInterval ||
		(w > s.lastSent && since >= s.conn.cfg.StatusInterval)
	if !due || w == 0 {
		return nil
	}
	// Ask for a reply on timer updates: the server's keepalive then carries
	// its WAL end, which lets an idle stream confirm past unrelated WAL.
	return s.sendStatus(w, !force)
}

func (s *Stream) sendStatus(w pglogrepl.LSN, reply bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := pglogrepl.SendStandbyStatusUpdate(ctx, s.conn.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: w,
		WALFlushPosition: w,
		WALApplyPosition: w,
		ClientTime:       time.Now(),
		ReplyRequested:   reply,
	})
	if err != nil {
		return fmt.Errorf("send standby status: %w", err)
	}
	if w != s.lastSent {
		s.log.Debug("confirmed", "lsn", w.String(), "slot", s.conn.cfg.Slot)
	}
	s.lastSent, s.lastSentAt = w, time.Now()
	return nil
}

// Confirmed returns the last position reported to Postgres. Only meaningful
// on the Run goroutine or after Run returned.
func (s *Stream) Confirmed() pglogrepl.LSN { return s.lastSent }

// drain waits until the Position settles (or the shutdown timeout), keeping
// the walsender alive, then reports the final watermark.
func (s *Stream) drain() error {
	deadline := time.Now().Add(s.conn.cfg.ShutdownTimeout)
	for !s.pos.Settled() {
		if time.Now().After(deadline) {
			s.log.Warn("shutdown timeout: records still unacknowledged; they will be sent again after restart",
				"slot", s.conn.cfg.Slot, "lsn", s.pos.Watermark().String())
			break
		}
		if err := s.maybeSendStatus(false); err != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
	w := s.pos.Watermark()
	if w < s.lastSent {
		w = s.lastSent
	}
	if w == 0 {
		return nil
	}
	if err := s.sendStatus(w, false); err != nil {
		return err
	}
	// Closing now could reset the connection while the walsender is still
	// writing, and the update would be lost with it. End the copy properly:
	// the server handles our messages in order, so once it answers CopyDone
	// it has applied the update.
	slotLSN, err := s.endCopy()
	if err != nil {
		s.log.Warn("could not end the replication stream cleanly; the final position may be applied late",
			"slot", s.conn.cfg.Slot, "lsn", w.String(), "error", err)
		return nil
	}
	s.log.Info("final position confirmed", "slot", s.conn.cfg.Slot, "lsn", w.String(), "slot_confirmed_flush_lsn", slotLSN)
	return nil
}

// endCopy ends the COPY BOTH stream (discarding what the server still sends)
// and reads back the slot's confirmed position.
func (s *Stream) endCopy() (string, error) {
	nc := s.conn.conn.Conn()
	if err := nc.SetDeadline(time.Now().Add(endCopyTimeout)); err != nil {
		return "", err
	}
	if _, err := pglogrepl.SendStandbyCopyDone(context.Background(), s.conn.conn); err != nil {
		return "", fmt.Errorf("end copy: %w", err)
	}
	if err := nc.SetDeadline(time.Time{}); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), endCopyTimeout)
	defer cancel()
	slot, err := ReadSlot(ctx, s.conn.querier(), s.conn.cfg.Slot)
	if err != nil {
		return "", fmt.Errorf("read back slot position: %w", err)
	}
	return slot.ConfirmedFlushLSN.String(), nil
}

// skippedPublication returns the error of a notice by which pgoutput says
// it skips the changes of a publication missing at that point in the WAL
// (Postgres 18 warns and goes on where older servers failed the stream):
// the changes it skips from there on are outbox events walrelay would never
// see, while the stream went on and the slot moved past them.
func skippedPublication(n *pgproto3.NoticeResponse, publication string) error {
	// The message, not the SQLSTATE: 18.6 did not stop on a check of the
	// code (42704 in the source this was written from).
	if !strings.HasPrefix(n.Message, "skipped loading publication") {
		return nil
	}
	return &PrereqError{Check: "publication",
		Problem: fmt.Sprintf("publication %q is missing at this point in the WAL (%s): Postgres skips the changes it would publish, so events after the slot's position would never be relayed", publication, n.Message),
		Fix:     "recreate the publication, then recover the outbox rows committed since it was dropped from the table (replay)",
		Config:  []string{"Publication"}, Err: ErrMissing}
}

// slotHolder describes the walsender that holds the slot (", held by
// walsender pid ..."), "" when it cannot be read: the name of a stale
// walsender left by a walrelay that lost its connection. It reads on a
// connection of its own: after a refused START_REPLICATION the replication
// connection still has the server's ReadyForQuery to read.
func (c *Conn) slotHolder(ctx context.Context) string {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := Connect(cctx, c.cfg.DSN, c.cfg.PasswordSource)
	if err != nil {
		return ""
	}
	defer conn.Close(context.Background())
	q := NewQuerier(conn)
	s, err := ReadSlot(cctx, q, c.cfg.Slot)
	if err != nil || s.ActivePID == 0 {
		return ""
	}
	w, err := ReadWalsender(cctx, q, s.ActivePID)
	if err != nil {
		return fmt.Sprintf(", held by pid %d", s.ActivePID)
	}
	return ", held by " + w.String()
}
