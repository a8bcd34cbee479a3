package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/replication"
	"github.com/walrelay/walrelay/sink"
)

// The exactly-once pipeline over a fake transactional sink: whole sessions
// of real pgoutput messages through the decoder, the pipeline, the tracker
// and the txnProducer, as relay.go runs them.

// eosWAL builds pgoutput transactions of outbox inserts.
type eosWAL struct {
	pos  pglogrepl.LSN
	msgs []replication.Message
	ends []pglogrepl.LSN // end LSN of each transaction
	rel  bool
	xid  uint32
}

// txn appends a transaction of n inserts (aggregate agg) and returns its
// commit LSN.
func (w *eosWAL) txn(agg string, n int) pglogrepl.LSN {
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	if w.pos == 0 {
		w.pos = 0x1000000
	}
	w.xid++
	begin := w.pos
	commit := begin + pglogrepl.LSN(0x10*(n+1))
	end := commit + 0x8
	w.msgs = append(w.msgs, replication.Message{WALStart: begin, ServerWALEnd: end, Data: pgoBegin(commit, at, w.xid)})
	if !w.rel {
		w.msgs = append(w.msgs, replication.Message{WALStart: begin, ServerWALEnd: end, Data: pgoOutboxRelation(16384, "public", "outbox")})
		w.rel = true
	}
	for i := 0; i < n; i++ {
		l := begin + pglogrepl.LSN(0x10*(i+1))
		w.msgs = append(w.msgs, replication.Message{WALStart: l, ServerWALEnd: end,
			Data: pgoOutboxInsert(16384, fmt.Sprintf("00000000-0000-4000-8000-%012x", uint64(l)), "order", agg, "created", `{}`)})
	}
	w.msgs = append(w.msgs, replication.Message{WALStart: commit, ServerWALEnd: end, Data: pgoCommit(commit, end, at)})
	w.ends = append(w.ends, end)
	w.pos = end + 0x20
	return commit
}

// after returns the messages of the transactions that end after pos (what
// a slot at pos sends), with the relation message first.
func (w *eosWAL) after(pos pglogrepl.LSN) []replication.Message {
	var out []replication.Message
	rel := false
	for _, m := range w.msgs {
		if m.ServerWALEnd <= pos || (len(m.Data) > 0 && m.Data[0] == 'R') {
			continue
		}
		if !rel {
			out = append(out, replication.Message{WALStart: m.WALStart, ServerWALEnd: m.ServerWALEnd, Data: pgoOutboxRelation(16384, "public", "outbox")})
			rel = true
		}
		out = append(out, m)
	}
	// The relation message goes after the first Begin.
	if len(out) > 1 {
		out[0], out[1] = out[1], out[0]
	}
	return out
}

// eosSession is one replication session in exactly-once mode.
type eosSession struct {
	tp      *txnProducer
	ident   replication.Identity
	history []replication.TimelineSwitch
	start   pglogrepl.LSN // the slot's position
	walEnd  pglogrepl.LSN // the server's WAL end (IDENTIFY_SYSTEM); 0: unknown
}

// run streams msgs (one batch) through a new pipeline, waits until the
// tracker's watermark reached until (Kafka committed everything up to it) or
// the pipeline stopped, then ends the stream and the session as relay.go
// does, and returns what the session ended with and the final watermark.
func (s eosSession) run(t *testing.T, msgs []replication.Message, until pglogrepl.LSN) (error, pglogrepl.LSN) {
	t.Helper()
	s.tp.walEnd = s.walEnd
	tr, err := s.tp.newSession(s.ident, s.start, s.history)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := decoder.New(decoder.Config{Tables: []decoder.Table{{Schema: "public", Name: "outbox"}}, HeartbeatPrefix: HeartbeatPrefix})
	if err != nil {
		t.Fatal(err)
	}
	failed, fail := context.WithCancelCause(context.Background())
	defer fail(nil)
	var walEnd atomic.Uint64
	p := &pipeline{dec: dec, tr: tr, d: s.tp, onPoison: OnPoisonDLQ, log: s.tp.log, obs: s.tp.obs,
		produceCtx: context.Background(), walEnd: &walEnd, failed: failed, fail: fail}
	src := propSource{ch: make(chan *replication.Batch)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- p.run(ctx, src) }()
	end := func(err error) (error, pglogrepl.LSN) {
		tr.Abort()
		return s.tp.endSession(&deliveryError{err}), tr.Watermark()
	}
	// One batch: no idle commit between its transactions.
	select {
	case src.ch <- &replication.Batch{Msgs: msgs}:
	case err := <-errc:
		return end(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for tr.Watermark() < until {
		select {
		case err := <-errc:
			return end(err)
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("watermark %s, want %s: nothing committed in time", tr.Watermark(), until)
		}
	}
	close(src.ch)
	err = <-errc
	if err != nil {
		return end(err)
	}
	return s.tp.endSession(nil), tr.Watermark()
}

func quietTxnProducer(f *fakeTxnSink, maxRecords, maxInFlight int) *txnProducer {
	tp := newTestTxnProducer(f, maxRecords)
	tp.maxInFlight = maxInFlight
	tp.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	return tp
}

// A Kafka transaction holding a record that failed is never committed, even
// when the failure arrives while the commit flushes and cancels the
// pipeline: the session ends with the record's error (a retriable one
// restarts from the checkpoint, a permanent one stops), the transaction is
// aborted, and nothing of it is confirmed.
func TestEOSNeverCommitsPastAFailedRecord(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		restart bool
	}{
		{"INVALID_RECORD", kerr.InvalidRecord, false},
		{"MESSAGE_TOO_LARGE", kerr.MessageTooLarge, false},
		{"TOPIC_AUTHORIZATION_FAILED", kerr.TopicAuthorizationFailed, false},
		{"NOT_ENOUGH_REPLICAS (retriable)", kerr.NotEnoughReplicas, true},
	} {
		for _, race := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/failure during the flush %v", tc.name, race), func(t *testing.T) {
				eosNeverCommitsPastAFailedRecord(t, tc.err, tc.restart, race)
			})
		}
	}
}

func eosNeverCommitsPastAFailedRecord(t *testing.T, recErr error, restart, race bool) {
	{
		{
			f := &fakeTxnSink{sendErrs: []error{nil, recErr}, deferAcks: race}
			tp := quietTxnProducer(f, 100, 1000)
			var w eosWAL
			w.txn("a", 1)
			w.txn("b", 1)
			err, confirmed := eosSession{tp: tp, ident: replication.Identity{SystemID: "1", Timeline: 1}}.run(t, w.after(0), w.ends[1])
			if f.commits != 0 {
				t.Fatalf("committed a Kafka transaction holding a failed record (commits=%d)", f.commits)
			}
			if !errors.Is(err, recErr) {
				t.Fatalf("session ended with %v, want the record's error %v", err, recErr)
			}
			if got := reconnectable(err); got != restart {
				t.Fatalf("reconnectable(%v) = %v, want %v", err, got, restart)
			}
			if f.aborts == 0 || f.inTxn {
				t.Fatalf("the Kafka transaction was not aborted (aborts=%d, open=%v)", f.aborts, f.inTxn)
			}
			if confirmed != 0 {
				t.Fatalf("watermark %s, want nothing confirmed", confirmed)
			}
		}
	}
}

// A checkpoint of another WAL history never skips a transaction of this
// one: on a promoted standby (timeline 2, forked from timeline 1 at
// 0/1000400), a timeline-1 checkpoint past the fork covers only what lies
// before the fork, and a checkpoint of timeline 3 (another branch) or one
// without a timeline (an older release's) covers nothing on timeline 2.
func TestEOSCheckpointOfAnotherTimelineSkipsNothingAfterTheFork(t *testing.T) {
	var w eosWAL
	w.txn("a", 1)            // 0/1000000 .. ends before the fork
	fork := w.ends[0] + 0x10 // the promotion
	w.pos = fork + 0x100     // the new timeline's transactions
	second := w.txn("b", 2)  // after the fork
	hist := []replication.TimelineSwitch{{Timeline: 1, Switch: fork}}
	for _, tc := range []struct {
		name   string
		cp     sink.Checkpoint
		walEnd pglogrepl.LSN
		skip   []bool // of the two transactions
	}{
		{"timeline 1, past the fork", sink.Checkpoint{LSN: second + 0x1000, Timeline: 1}, 0, []bool{true, false}},
		{"timeline 1, before the fork", sink.Checkpoint{LSN: w.ends[0], Timeline: 1}, 0, []bool{true, false}},
		{"timeline 2", sink.Checkpoint{LSN: w.ends[1], Timeline: 2}, 0, []bool{true, true}},
		{"timeline 2, past the server's WAL end (a restored copy)", sink.Checkpoint{LSN: w.ends[1] + 0x1000, Timeline: 2}, w.ends[1] + 0x100, []bool{false, false}},
		{"timeline 3 (another branch)", sink.Checkpoint{LSN: second + 0x1000, Timeline: 3}, 0, []bool{false, false}},
		{"no timeline (older release)", sink.Checkpoint{LSN: second + 0x1000}, 0, []bool{false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeTxnSink{checkpoint: tc.cp}
			tp := quietTxnProducer(f, 100, 1000)
			err, _ := eosSession{tp: tp, ident: replication.Identity{SystemID: "1", Timeline: 2}, history: hist, walEnd: tc.walEnd}.run(t, w.after(0), w.ends[1])
			if err != nil {
				t.Fatal(err)
			}
			want := 0
			for i, skip := range tc.skip {
				if !skip {
					want += []int{1, 2}[i]
				}
			}
			if f.sent-f.commits != want { // one checkpoint record per commit
				t.Fatalf("checkpoint %v on timeline 2: %d events sent, want %d", tc.cp, f.sent-f.commits, want)
			}
		})
	}
}

// A checkpoint without a timeline, written by an older release on a server
// that never changed timeline, is used as it stands: an upgrade in place
// neither sends again what it covers nor skips what it does not.
func TestEOSCheckpointOfAnOlderReleaseOnTimelineOne(t *testing.T) {
	var w eosWAL
	w.txn("a", 1)
	w.txn("b", 2)
	f := &fakeTxnSink{checkpoint: sink.Checkpoint{LSN: w.ends[0]}}
	tp := quietTxnProducer(f, 100, 1000)
	err, _ := eosSession{tp: tp, ident: replication.Identity{SystemID: "1", Timeline: 1}}.run(t, w.after(0), w.ends[1])
	if err != nil {
		t.Fatal(err)
	}
	if f.sent != 3 || f.commits != 1 {
		t.Fatalf("sent %d records in %d commits, want the second transaction's 2 events and a checkpoint in one", f.sent, f.commits)
	}
}

// An abort that times out (AbortBufferedRecords returns before the end of
// the transaction, leaving franz-go's client in it) does not livelock the
// producer: the next session delivers.
func TestEOSAbortTimeoutRecovers(t *testing.T) {
	f := &fakeTxnSink{sendErrs: []error{kerr.NotEnoughReplicas}, abortTimeouts: 10}
	tp := quietTxnProducer(f, 100, 1000)
	var w eosWAL
	w.txn("a", 1)
	s := eosSession{tp: tp, ident: replication.Identity{SystemID: "1", Timeline: 1}}
	err, _ := s.run(t, w.after(0), w.ends[0])
	t.Logf("first session: %v (aborts %d, open %v, begins %d, sent %d)", err, f.aborts, f.inTxn, f.begins, f.sent)
	if err == nil {
		t.Fatal("the first session ended without an error, want the failed record's")
	}
	if !reconnectable(err) {
		// Stopping with the cause is the other acceptable answer; it must
		// name the abort.
		if !strings.Contains(err.Error(), "abort") {
			t.Fatalf("session ended with %v: neither retried nor stopped naming the abort", err)
		}
		return
	}
	f.abortTimeouts = 0
	err, confirmed := s.run(t, w.after(0), w.ends[0])
	if err != nil || confirmed < w.ends[0] {
		t.Fatalf("the session after a timed-out abort ended with %v at %s, want the transaction delivered", err, confirmed)
	}
}

// A Postgres transaction that fits the tracker's cap is delivered whatever
// came before it in the open Kafka transaction; one that cannot fit even
// alone stops walrelay with the real limit.
func TestEOSLargestTransactionDoesNotDependOnHistory(t *testing.T) {
	const cap = 40 // tracker units: one per transaction and record
	var w eosWAL
	w.txn("a", 15) // 16 units: below the commit threshold (cap/2) at its end
	w.txn("b", 30) // 31 units: fits alone
	f := &fakeTxnSink{}
	tp := quietTxnProducer(f, 1000, cap)
	s := eosSession{tp: tp, ident: replication.Identity{SystemID: "1", Timeline: 1}}
	var err error
	var confirmed pglogrepl.LSN
	for i := 0; i < 3; i++ {
		if err, confirmed = s.run(t, w.after(s.start), w.ends[1]); err == nil || !reconnectable(err) {
			break
		}
		s.start = confirmed
	}
	if err != nil || confirmed < w.ends[1] {
		t.Fatalf("a 30-event transaction after a 15-event one (cap %d) ended with %v at %s, want both delivered", cap, err, confirmed)
	}

	var big eosWAL
	big.txn("c", cap)
	f = &fakeTxnSink{}
	tp = quietTxnProducer(f, 1000, cap)
	err, _ = eosSession{tp: tp, ident: replication.Identity{SystemID: "1", Timeline: 1}}.run(t, big.after(0), big.ends[0])
	if err == nil || reconnectable(err) || !strings.Contains(err.Error(), "exactly-once") {
		t.Fatalf("a transaction larger than the cap ended with %v, want a permanent error stating the limit", err)
	}
}
