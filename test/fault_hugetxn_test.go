package e2e

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestFaultHugeTransaction: one transaction with 200,000 events (WALRELAY_FAULT_HUGE_EVENTS;
// 1,000,000 for a long local run), inserted with generate_series in one statement, every
// 997th row deleted again in the same transaction, while the normal workload runs at a
// low rate around it. Every event of the huge transaction must arrive exactly as
// inserted, in order per aggregate, and walrelay's memory must stay bounded (sampled
// VmRSS and VmHWM under WALRELAY_FAULT_HUGE_RSS_MB, default 192 MiB; measured
// 95–116 MiB for 200,000 and for 1,000,000 events): the transaction is
// far larger than the in-flight cap, so walrelay must stream it through, not hold it.
func TestFaultHugeTransaction(t *testing.T) {
	env := requireEnv(t)
	rng := testRand(t)
	s := newScenario(t, env, "fhuge")
	p := s.startArgsReady(s.runArgs()...)
	rss := startFaultRSS(t, p.cmd.Process.Pid, 200*time.Millisecond)
	n := faultEnvInt(t, "WALRELAY_FAULT_HUGE_EVENTS", 200000)
	boundMiB := float64(faultEnvInt(t, "WALRELAY_FAULT_HUGE_RSS_MB", 192))

	fw := newFaultWriter(t, s, env.pgDSN, newRandFrom(rng))
	o := faultSteady(t)
	o.rate = 10
	stop := fw.runSteady(o)
	time.Sleep(time.Second)

	tag := randHex(rng, 12)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, env.pgDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	outbox := pgx.Identifier(strings.Split(s.table, ".")).Sanitize()
	start := time.Now()
	r, err := multiResult(ctx, conn, "BEGIN; SELECT pg_current_xact_id()::text")
	if err != nil {
		t.Fatal(err)
	}
	xid, _ := strconv.ParseUint(r[0], 10, 64)
	if _, err := conn.Exec(ctx, `INSERT INTO `+outbox+` (id, aggregate_type, aggregate_id, event_type, payload, headers)
		SELECT md5($1 || ':' || i)::uuid, 'huge', 'huge-' || (i % 1000), 'created',
		       jsonb_build_object('seq', i, 'tag', $1::text), '{"src": "huge"}'::jsonb
		FROM generate_series(1, $2::int) AS i`, tag, n); err != nil {
		t.Fatalf("huge insert: %v", err)
	}
	ct, err := conn.Exec(ctx, `DELETE FROM `+outbox+` WHERE aggregate_type = 'huge' AND payload->>'tag' = $1
		AND (payload->>'seq')::int % 997 = 0`, tag)
	if err != nil {
		t.Fatalf("huge delete: %v", err)
	}
	r, err = multiResult(ctx, conn, "COMMIT; SELECT pg_current_wal_lsn()::text")
	if err != nil {
		t.Fatalf("huge commit: %v", err)
	}
	post, _ := parseLSN(r[0])
	insertTook := time.Since(start)
	t.Logf("huge transaction: xid %d, %d events (%d deleted again in it), committed in %s, commit ≤ %s",
		xid, n, ct.RowsAffected(), insertTook.Round(time.Millisecond), post)

	waitSlotLSN(t, env.pgDSN, s.name, post, 15*time.Minute, p)
	deliverTook := time.Since(start) - insertTook
	hugePeak, hugeHWM, _ := rss.peak()

	hc := faultCheckHuge(t, env.kafka, s.name+".huge", tag, n, uint32(xid))
	hugeLine := fmt.Sprintf("scenario=fault_huge_txn huge_events=%d delivered=%d distinct=%d lost=%d duplicates=%d order_violations=%d field_errors=%d deleted_in_txn=%d insert=%s delivery=%s consume=%s rss_peak=%.1fMiB vmhwm=%.1fMiB bound=%.0fMiB",
		n, hc.delivered, hc.distinct, n-hc.distinct, hc.duplicates, hc.orderViolations, hc.fieldErrors, ct.RowsAffected(),
		insertTook.Round(100*time.Millisecond), deliverTook.Round(100*time.Millisecond), hc.took.Round(100*time.Millisecond),
		hugePeak, hugeHWM, boundMiB)
	t.Log(hugeLine)
	if hc.distinct != n || hc.orderViolations != 0 || hc.fieldErrors != 0 {
		t.Errorf("huge transaction not delivered intact: %s", hugeLine)
	}
	if hugePeak > boundMiB || hugeHWM > boundMiB {
		t.Errorf("walrelay's memory exceeded the bound: %s", hugeLine)
	}
	faultFinish(t, s, fw, stop, p, "fault_huge_txn_background")
}

type faultHugeCheck struct {
	delivered, distinct, duplicates, orderViolations, fieldErrors int
	took                                                          time.Duration
}

// faultCheckHuge reads topic to its end offsets, record by record without keeping them,
// and checks every record against the generate_series that produced it.
func faultCheckHuge(t *testing.T, brokers, topic, tag string, n int, xid uint32) faultHugeCheck {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	adm := newKafkaClient(t, brokers)
	defer adm.Close()
	ends, err := kadm.NewClient(adm).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("end offsets of %s: %v", topic, err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("end offset %s/%d: %v", o.Topic, o.Partition, o.Err)
		}
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	cl := newKafkaClient(t, brokers, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(500*time.Millisecond), kgo.FetchMaxBytes(16<<20), kgo.WithDecompressor(newTestDecompressor()))
	defer cl.Close()

	var hc faultHugeCheck
	seen := make([]bool, n+1)
	last := map[string]int{}
	problems := 0
	bad := func(format string, args ...any) {
		hc.fieldErrors++
		if problems++; problems <= 10 {
			t.Logf("  huge: "+format, args...)
		}
	}
	next := map[int32]int64{}
	done := func() bool {
		for p, end := range want {
			if next[p] < end {
				return false
			}
		}
		return true
	}
	prefix := `{"seq": `
	suffix := `, "tag": "` + tag + `"}`
	xidStr := strconv.FormatUint(uint64(xid), 10)
	for !done() {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consume %s: timed out at %v of %v", topic, next, want)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Logf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= next[r.Partition] {
				next[r.Partition] = r.Offset + 1
			}
			hc.delivered++
			v := string(r.Value)
			if !strings.HasPrefix(v, prefix) || !strings.HasSuffix(v, suffix) {
				bad("%s/%d@%d: value %.80q is not from this transaction", r.Topic, r.Partition, r.Offset, v)
				return
			}
			seq, err := strconv.Atoi(v[len(prefix) : len(v)-len(suffix)])
			if err != nil || seq < 1 || seq > n {
				bad("%s/%d@%d: value %.80q: bad seq", r.Topic, r.Partition, r.Offset, v)
				return
			}
			sum := md5.Sum([]byte(tag + ":" + strconv.Itoa(seq)))
			h := hex.EncodeToString(sum[:])
			id := h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
			key := "huge-" + strconv.Itoa(seq%1000)
			if header(r, "id") != id || string(r.Key) != key || header(r, "walrelay.xid") != xidStr ||
				header(r, "event_type") != "created" || header(r, "aggregate_type") != "huge" || header(r, "src") != "huge" {
				bad("%s/%d@%d seq %d: id %q key %q xid %q (want %s, %s, %s)", r.Topic, r.Partition, r.Offset, seq,
					header(r, "id"), r.Key, header(r, "walrelay.xid"), id, key, xidStr)
			}
			if seen[seq] {
				hc.duplicates++
				return
			}
			seen[seq] = true
			hc.distinct++
			if l, ok := last[key]; ok && seq < l {
				hc.orderViolations++
				if problems++; problems <= 10 {
					t.Logf("  huge: order: %s: seq %d after %d", key, seq, l)
				}
			}
			last[key] = max(last[key], seq)
		})
	}
	missing := 0
	for seq := 1; seq <= n; seq++ {
		if !seen[seq] {
			if missing++; missing <= 10 {
				t.Logf("  huge: lost seq %d", seq)
			}
		}
	}
	hc.took = time.Since(start)
	return hc
}
