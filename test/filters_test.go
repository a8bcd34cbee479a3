package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestFilters: with include/exclude filters on event and aggregate types, the filtered
// events of the real table are never produced, they are counted in
// walrelay_events_filtered_total{reason}, and the slot moves past them, also past a last
// transaction that holds only filtered events.
func TestFilters(t *testing.T) {
	env := requireEnv(t)
	s := newScenario(t, env, "filter")
	p := s.startReady("--include-event-types", "Order*,Invoice?", "--exclude-aggregate-types", "test_*", "--heartbeat-interval", "0")

	type ev struct{ aggType, evType, why string } // why: "" kept, else the filter reason
	txns := [][]ev{
		{{"order", "OrderCreated", ""}, {"order", "Shipped", "event_type"}, {"test_order", "OrderCreated", "aggregate_type"}},
		{{"invoice", "InvoiceX", ""}, {"invoice", "InvoiceXY", "event_type"}},
		{{"test_x", "Shipped", "event_type"}, {"order", "OrderPaid", ""}},
		{{"test_y", "OrderPaid", "aggregate_type"}, {"order", "Refunded", "event_type"}}, // only filtered events
	}
	kept, filtered := map[string]ev{}, map[string]int{}
	for i, txn := range txns {
		var stmts []string
		for j, e := range txn {
			id := newUUID()
			stmts = append(stmts, fmt.Sprintf(`INSERT INTO %s (id, aggregate_type, aggregate_id, event_type, payload)
				VALUES ('%s', '%s', 'a-%d-%d', '%s', '{"n": %d}')`, qtable(s.table), id, e.aggType, i, j, e.evType, j))
			if e.why == "" {
				kept[id] = e
			} else {
				filtered[e.why]++
			}
		}
		pgExec(t, env.pgDSN, "BEGIN; "+strings.Join(stmts, "; ")+"; COMMIT")
	}
	end := currentLSN(t, env.pgDSN)
	waitSlotLSN(t, env.pgDSN, s.name, end, 60*time.Second, p)

	addr := p.metricsAddr()
	for _, reason := range []string{"event_type", "aggregate_type"} {
		if got, _ := metricValue(t, addr, fmt.Sprintf(`walrelay_events_filtered_total{reason=%q}`, reason)); got != float64(filtered[reason]) {
			t.Errorf("walrelay_events_filtered_total{reason=%q} = %v, want %d", reason, got, filtered[reason])
		}
	}
	topics := []string{s.name + ".order", s.name + ".invoice"}
	got := map[string]bool{}
	for _, list := range consumeAll(t, env.kafka, s.name+".", topics) {
		for _, rec := range list {
			id := header(rec, "id")
			if _, ok := kept[id]; !ok {
				t.Errorf("a filtered event was produced: %s %s/%s at %s", id, header(rec, "aggregate_type"), header(rec, "event_type"), rec.Topic)
			}
			got[id] = true
		}
	}
	for _, id := range slices.Sorted(maps.Keys(kept)) {
		if !got[id] {
			t.Errorf("kept event %s (%+v) was not produced", id, kept[id])
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if extra, _ := topicsWithPrefix(ctx, t, env.kafka, s.name+".test_"); len(extra) > 0 {
		t.Errorf("topics of filtered aggregate types exist: %v", extra)
	}
}
