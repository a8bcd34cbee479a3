package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestFaultSIGTERMFinalLSN extends TestSIGTERMDrains with exact WAL positions. An
// observer slot (pgoutput, same publication, messages on: it decodes exactly the
// transactions walrelay's slot decodes, heartbeats included) gives the end LSN of every
// transaction. Under load, right after two 3,000-event transactions, walrelay gets
// SIGTERM and must exit 0 within --shutdown-timeout. Then, before any restart:
//
//   - the slot's confirmed_flush_lsn equals the final position walrelay logged;
//   - let T be the first workload transaction not completely in Kafka: no later one
//     has any record in Kafka (walrelay reads in order), every transaction ending
//     before T is complete, and confirmed_flush_lsn lies in [end of the last decoded
//     transaction before T, end of T): at least everything acknowledged is confirmed,
//     nothing unacknowledged is. It equals the former unless a keepalive (sentPtr, when
//     nothing was open or in flight) moved the watermark past it; the summary says which;
//   - after a restart everything arrives, and no transaction ending at or before the
//     confirmed LSN is delivered twice.
func TestFaultSIGTERMFinalLSN(t *testing.T) {
	env := requireEnv(t)
	rng := testRand(t)
	s := newScenario(t, env, "fterm")
	const shutdownTimeout = 20 * time.Second
	p := s.startReady("--shutdown-timeout", shutdownTimeout.String(), "--heartbeat-interval", "1s")

	obs := s.name + "_obs"
	pgExec(t, env.pgDSN, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", obs)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := dropSlot(ctx, t, env.pgDSN, obs); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})

	fw := newFaultWriter(t, s, env.pgDSN, newRandFrom(rng))
	burst, burstDone := make(chan int, 2), make(chan *txnRec, 2)
	o := faultSteady(t)
	o.burst, o.burstDone = burst, burstDone
	stop := fw.runSteady(o)
	time.Sleep(3*time.Second + time.Duration(rng.Int64N(int64(time.Second))))
	commitBursts(t, burst, burstDone, 3000, 3000)
	time.Sleep(time.Duration(rng.Int64N(int64(50 * time.Millisecond))))

	p.sigterm()
	termAt := time.Now()
	if !p.waitExit(shutdownTimeout + 10*time.Second) {
		t.Fatalf("walrelay did not exit within %s of SIGTERM\n%s", shutdownTimeout+10*time.Second, p.tail(40))
	}
	took := time.Since(termAt)
	if code := p.exitCode(); code != 0 {
		t.Errorf("exit code after SIGTERM: %d (%s), want 0\n%s", code, p.exitStatus(), p.tail(40))
	}
	if took > shutdownTimeout+2*time.Second {
		t.Errorf("shutdown took %s, more than --shutdown-timeout %s", took, shutdownTimeout)
	}
	time.Sleep(500 * time.Millisecond) // the workload goes on a little while nobody reads
	if err := stop(); err != nil {
		t.Fatalf("workload: %v", err)
	}
	// At least one committed transaction after the exit bounds the check below.
	if _, err := fw.writeTxn(5, false); err != nil {
		t.Fatalf("workload: %v", err)
	}
	confirmed := slotLSN(t, env.pgDSN, s.name)

	// What walrelay says it confirmed last.
	var logged lsn
	for _, m := range p.logLines() {
		if m["msg"] == "final position confirmed" {
			if l, ok := m["lsn"].(string); ok {
				logged, _ = parseLSN(l)
			}
		}
	}
	if logged == 0 {
		t.Errorf("walrelay logged no \"final position confirmed\" line after SIGTERM\n%s", p.tail(20))
	} else if logged != confirmed {
		t.Errorf("slot confirmed_flush_lsn %s differs from the final position walrelay logged, %s", confirmed, logged)
	}

	// Exact end LSN of every transaction in the stream.
	ends := faultCommitEnds(t, env.pgDSN, obs, s.name)
	allEnds := slices.Sorted(maps.Values(ends))

	// What is in Kafka after the first run.
	fw.mu.Lock()
	var txns []*txnRec
	for _, tx := range fw.txns {
		if tx.Committed {
			txns = append(txns, tx)
		}
	}
	fw.mu.Unlock()
	inKafka := map[*txnRec]int{}
	evByID := map[string]*eventRec{}
	for _, tx := range txns {
		for _, ev := range tx.Events {
			evByID[ev.ID] = ev
		}
	}
	var maxLSNHeader lsn
	seen := map[string]bool{}
	for _, typ := range aggregateTypes {
		topic := s.name + "." + typ
		for _, rec := range consumeAll(t, env.kafka, topic, []string{topic})[topic] {
			id := header(rec, "id")
			if ev := evByID[id]; ev != nil && !seen[id] {
				seen[id] = true
				inKafka[ev.Txn]++
				if l, err := parseLSN(header(rec, "walrelay.lsn")); err == nil {
					maxLSNHeader = max(maxLSNHeader, l)
				}
			}
		}
	}
	var star *txnRec
	for _, tx := range txns {
		end, ok := ends[tx.XID]
		if !ok {
			t.Fatalf("the observer slot has no commit for txn %d (xid %d)", tx.Index, tx.XID)
		}
		if star == nil && inKafka[tx] < len(tx.Events) {
			star = tx
			t.Logf("first transaction not complete in Kafka: txn %d (xid %d, %d of %d events in Kafka), ends at %s",
				tx.Index, tx.XID, inKafka[tx], len(tx.Events), end)
			continue
		}
		if star != nil && inKafka[tx] > 0 {
			t.Errorf("txn %d (after txn %d, which is incomplete) has %d events in Kafka: walrelay read out of order",
				tx.Index, star.Index, inKafka[tx])
		}
	}
	var lastAcked, lastWorkload lsn
	limit := lsn(1<<64 - 1)
	if star != nil {
		limit = ends[star.XID]
	}
	for _, e := range allEnds {
		if e < limit {
			lastAcked = e
		}
	}
	for _, tx := range txns {
		if e := ends[tx.XID]; e < limit {
			lastWorkload = max(lastWorkload, e)
		}
	}
	relation := "equal"
	switch {
	case confirmed < lastAcked:
		relation = fmt.Sprintf("below_by_%d", lastAcked-confirmed)
		t.Errorf("confirmed_flush_lsn %s is below %s, the end of the last transaction before the first incomplete one: the final watermark was not confirmed",
			confirmed, lastAcked)
	case star != nil && confirmed >= limit:
		relation = "past_unacked"
		t.Errorf("confirmed_flush_lsn %s is at or past %s, the end of txn %d, which is not complete in Kafka",
			confirmed, limit, star.Index)
	case confirmed > lastAcked:
		relation = fmt.Sprintf("keepalive_plus_%d", confirmed-lastAcked)
		t.Logf("confirmed_flush_lsn %s is %d bytes past the last transaction end %s and before %s: a keepalive position (confirmed when nothing is open or in flight)",
			confirmed, confirmed-lastAcked, lastAcked, limit)
	}
	t.Logf("after SIGTERM: confirmed %s, walrelay logged %s, last decoded transaction before the first incomplete one ends at %s (last workload one %s), max walrelay.lsn in Kafka %s",
		confirmed, logged, lastAcked, lastWorkload, maxLSNHeader)

	// Second run: the rest arrives; nothing confirmed is delivered again.
	p2 := s.startReady("--shutdown-timeout", shutdownTimeout.String())
	res := faultFinish(t, s, fw, func() error { return nil }, p2, "fault_sigterm",
		"exit="+strconv.Itoa(p.exitCode()), "shutdown="+took.Round(time.Millisecond).String(),
		"confirmed="+confirmed.String(), "last_acked_txn_end="+lastAcked.String(), "confirmed_vs_last_acked="+relation)
	dup := slices.Collect(maps.Keys(res.dupEvents))
	sort.Slice(dup, func(i, j int) bool { return dup[i].Index < dup[j].Index })
	for _, tx := range dup {
		e := ends[tx.XID]
		t.Logf("  duplicates: txn %d (%d of %d events twice), ends at %s; first run confirmed %s", tx.Index, res.dupEvents[tx], len(tx.Events), e, confirmed)
		if e <= confirmed {
			t.Errorf("txn %d ends at %s, at or before the confirmed %s, and was delivered again after the restart", tx.Index, e, confirmed)
		}
	}
	if len(dup) > 1 {
		t.Errorf("duplicates from %d transactions; at most the one open at SIGTERM may repeat", len(dup))
	}
}

// faultCommitEnds peeks the observer slot (pgoutput, publication pub, messages on) and
// returns the end LSN of every transaction it decodes, by xid. For a COMMIT message the
// lsn column of pg_logical_slot_peek_binary_changes is the end of the commit record, the
// TransactionEndLSN a client confirms.
func faultCommitEnds(t *testing.T, dsn, slot, pub string) map[uint32]lsn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out := map[uint32]lsn{}
	err := pgPool(t, dsn).with(ctx, func(c *pgx.Conn) error {
		rows, err := c.Query(ctx, `SELECT lsn::text, xid::text FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
			'proto_version', '1', 'publication_names', $2, 'messages', 'true') WHERE substr(data, 1, 1) = 'C'::bytea`, slot, pub)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var l, x string
			if err := rows.Scan(&l, &x); err != nil {
				return err
			}
			end, err := parseLSN(l)
			if err != nil {
				return err
			}
			xid, err := strconv.ParseUint(x, 10, 32)
			if err != nil {
				return err
			}
			out[uint32(xid)] = end
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatalf("peek observer slot %s: %v", slot, err)
	}
	t.Logf("observer slot: %d transactions decoded", len(out))
	return out
}
