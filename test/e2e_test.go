package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestEndToEnd writes 10,000 events in 1,000 committed transactions over 100 aggregates
// of 3 types, interleaved with 100 rolled-back transactions, and checks that exactly the
// committed events arrive, once each, in commit order per aggregate, with the record
// contract (topic, key, value, headers, timestamp) intact. One topic is also read with
// kcat, a librdkafka client, to make sure other clients see the same records.
func TestEndToEnd(t *testing.T) {
	env := requireEnv(t)
	rng := testRand(t)
	s := newScenario(t, env, "endtoend")
	p := s.startReady()

	w := newWorkload(t, env, s.table, 100, newRandFrom(rng))
	w.nullPayloadEvery = 250 // a few tombstones

	const committedTxns, rolledBackTxns, perTxn = 1000, 100, 10
	plan := make([]bool, committedTxns+rolledBackTxns) // true: roll back
	for i := range rolledBackTxns {
		plan[i] = true
	}
	rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	start := time.Now()
	for i, rb := range plan {
		w.mustWriteTxn(perTxn, rb)
		if i%100 == 0 && p.exited() {
			t.Fatalf("walrelay exited (%s) during the workload\n%s", p.exitStatus(), p.tail(40))
		}
	}
	_, ctxns, cevents, rbevents := w.stats()
	target := w.lastPostLSN()
	t.Logf("wrote %d committed transactions (%d events) and %d rolled-back events in %s; last commit ≤ %s",
		ctxns, cevents, rbevents, time.Since(start).Round(time.Millisecond), target)

	waitSlotLSN(t, env.pgDSN, s.name, target, 120*time.Second, p)
	res := verify(t, s, w)
	t.Log(res.summary("endtoend"))
	res.requireClean(t)
	if res.committed != committedTxns*perTxn || res.delivered != res.committed || res.duplicates != 0 {
		t.Errorf("want exactly %d events delivered once each: committed=%d delivered=%d duplicates=%d",
			committedTxns*perTxn, res.committed, res.delivered, res.duplicates)
	}
	if len(res.records) != len(aggregateTypes) {
		t.Errorf("topics with prefix %s.: %d, want %d (one per aggregate type)", s.name, len(res.records), len(aggregateTypes))
	}

	checkWithKcat(t, env, s.name+"."+aggregateTypes[0], res.records[s.name+"."+aggregateTypes[0]])
}

// kcatRecord is one line of `kcat -C -J`.
type kcatRecord struct {
	Topic     string          `json:"topic"`
	Partition int32           `json:"partition"`
	Offset    int64           `json:"offset"`
	Key       *string         `json:"key"`
	Payload   *string         `json:"payload"`
	Headers   json.RawMessage `json:"headers"`
}

// kcatHeaders decodes kcat's headers, a flat ["k1","v1","k2","v2"] array.
func kcatHeaders(raw json.RawMessage) (map[string]string, error) {
	out := map[string]string{}
	if len(raw) == 0 || string(raw) == "null" {
		return out, nil
	}
	var flat []*string
	if err := json.Unmarshal(raw, &flat); err != nil {
		return nil, fmt.Errorf("headers %s: %w", raw, err)
	}
	for i := 0; i+1 < len(flat); i += 2 {
		if flat[i] != nil && flat[i+1] != nil {
			out[*flat[i]] = *flat[i+1]
		}
	}
	return out, nil
}

// kcatRead reads every record of topic with kcat -J; ok is false when kcat
// is not installed (outside CI, where it must be).
func kcatRead(t *testing.T, env *testEnv, topic string) (recs []kcatRecord, ok bool) {
	t.Helper()
	if _, err := exec.LookPath("kcat"); err != nil {
		if isCI() {
			t.Fatalf("kcat not installed: %v", err)
		}
		t.Logf("kcat not installed, skipping the kcat cross-check: %v", err)
		return nil, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kcat", "-b", env.kafka, "-C", "-t", topic, "-o", "beginning", "-e", "-J", "-q")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kcat -C -t %s: %v\n%s", topic, err, indent(stderr.String()))
	}
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var r kcatRecord
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("kcat output %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs, true
}

// checkWithKcat reads topic with kcat and compares it, record by record, with what
// franz-go read.
func checkWithKcat(t *testing.T, env *testEnv, topic string, want []*kgo.Record) {
	t.Helper()
	recs, ok := kcatRead(t, env, topic)
	if !ok {
		return
	}
	type pos struct {
		p int32
		o int64
	}
	got := map[pos]kcatRecord{}
	for _, r := range recs {
		got[pos{r.Partition, r.Offset}] = r
	}
	if len(got) != len(want) {
		t.Errorf("kcat read %d records from %s, franz-go %d", len(got), topic, len(want))
	}
	bad := 0
	for _, w := range want {
		k, ok := got[pos{w.Partition, w.Offset}]
		var problem string
		switch {
		case !ok:
			problem = "missing in kcat output"
		case k.Key == nil || *k.Key != string(w.Key):
			problem = fmt.Sprintf("kcat key %v, franz-go %q", deref(k.Key), w.Key)
		case (k.Payload == nil) != (w.Value == nil) || (k.Payload != nil && *k.Payload != string(w.Value)):
			problem = fmt.Sprintf("kcat payload %v, franz-go %q", deref(k.Payload), w.Value)
		default:
			h, err := kcatHeaders(k.Headers)
			if err != nil {
				problem = err.Error()
			} else if h["id"] != header(w, "id") || h["traceparent"] != header(w, "traceparent") {
				problem = fmt.Sprintf("kcat headers %v, franz-go id=%q traceparent=%q", h, header(w, "id"), header(w, "traceparent"))
			}
		}
		if problem != "" {
			bad++
			if bad <= 10 {
				t.Errorf("kcat %s/%d@%d: %s", topic, w.Partition, w.Offset, problem)
			}
		}
	}
	t.Logf("kcat cross-check of %s: %d records, %d mismatches", topic, len(got), bad)
}

func deref(s *string) string {
	if s == nil {
		return "null"
	}
	return fmt.Sprintf("%q", *s)
}

// TestIdleSlotAdvances: with no outbox writes but other activity in the database, the
// slot must keep advancing (or Postgres retains WAL forever). Once through the keepalive
// rule alone (--heartbeat-interval 0), once with heartbeats.
func TestIdleSlotAdvances(t *testing.T) {
	env := requireEnv(t)
	for _, tc := range []struct {
		name      string
		heartbeat string
	}{
		{"keepalive", "0"},
		{"heartbeat", "1s"},
	} {
		// Sequential on purpose: a heartbeat of one walrelay is decoded by every slot and
		// would move the other's slot, hiding a broken keepalive rule.
		t.Run(tc.name, func(t *testing.T) {
			s := newScenario(t, env, "idle_"+tc.name[:2])
			other := pgx.Identifier{"public", s.name + "_other"}.Sanitize()
			pgExec(t, env.pgDSN, "CREATE TABLE "+other+" (id bigserial PRIMARY KEY, v text)")
			t.Cleanup(func() { pgExec(t, env.pgDSN, "DROP TABLE IF EXISTS "+other) })

			p := s.startReady("--heartbeat-interval", tc.heartbeat, "--status-interval", "1s")
			first := slotLSN(t, env.pgDSN, s.name)

			const period, markBefore = 15 * time.Second, 5 * time.Second
			start := time.Now()
			var mark lsn
			var samples []string
			for i := 0; time.Since(start) < period; i++ {
				pgExec(t, env.pgDSN, "INSERT INTO "+other+" (v) VALUES ($1)", strings.Repeat("x", 100))
				if mark == 0 && time.Since(start) >= period-markBefore {
					mark = currentLSN(t, env.pgDSN)
				}
				if i%10 == 0 {
					samples = append(samples, slotLSN(t, env.pgDSN, s.name).String())
					if p.exited() {
						t.Fatalf("walrelay exited (%s)\n%s", p.exitStatus(), p.tail(40))
					}
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Logf("confirmed_flush_lsn once per second: %s", strings.Join(samples, " "))
			// The mark was taken 5 s (5 status intervals) before the end; a short grace
			// only absorbs polling granularity.
			final := waitSlotLSN(t, env.pgDSN, s.name, mark, 3*time.Second, p)
			if final <= first {
				t.Errorf("slot did not advance: %s -> %s", first, final)
			}
			t.Logf("scenario=idle_%s start=%s mark=%s end=%s", tc.name, first, mark, final)
		})
	}
}
