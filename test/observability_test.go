package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// TestObservability runs an active walrelay and a standby on one slot under the fault
// workload and scrapes /metrics:
//   - the standby's walrelay_slot_* metrics (read from pg_replication_slots on an
//     ordinary connection) move while the active instance is frozen with SIGSTOP:
//     retained WAL and confirmed lag grow by at least half the WAL written meanwhile,
//     the slot stays active (held by the frozen one's walsender), wal_status reserved;
//     after SIGCONT the lag falls back;
//   - the e2e latency histogram of the active instance counted exactly one observation
//     per record it produced (records in Kafka, no duplicates without a restart) and
//     equals walrelay_events_acked_total;
//   - every metric named by a query of deploy/grafana/walrelay-dashboard.json and by an
//     expr of deploy/alerts.yaml is exposed by the live /metrics.
func TestObservability(t *testing.T) {
	env := requireEnv(t)
	rng := testRand(t)
	s := newScenario(t, env, "obs")
	args := s.runArgs("--status-interval", "100ms", "--standby-retry-interval", "1s", "--slot-metrics-interval", "500ms")
	active := s.startArgsReady(args...)
	standby := s.startArgs(args...)
	haWaitStandby(t, standby, s.name)

	fw := newFaultWriter(t, s, env.pgDSN, newRandFrom(rng))
	stop := fw.runSteady(faultSteady(t))
	time.Sleep(3 * time.Second)

	slotKey := func(name string) string { return fmt.Sprintf("%s{slot=%q}", name, s.name) }
	retained, lag := slotKey("walrelay_slot_retained_wal_bytes"), slotKey("walrelay_slot_confirmed_lag_bytes")
	reserved := fmt.Sprintf(`walrelay_slot_wal_status{slot=%q,status="reserved"}`, s.name)
	before := obsMetrics(t, standby)
	for k, want := range map[string]float64{slotKey("walrelay_slot_exists"): 1, slotKey("walrelay_slot_active"): 1, reserved: 1} {
		if before[k] != want {
			t.Errorf("standby before the pause: %s = %v, want %v", k, before[k], want)
		}
	}
	t.Logf("standby before the pause: retained %.0f B, confirmed lag %.0f B", before[retained], before[lag])

	// Freeze the active instance: its walsender keeps the slot, nothing is confirmed.
	pid := active.cmd.Process.Pid
	startLSN := currentLSN(t, env.pgDSN)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	var peakRetained, peakLag float64
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end); {
		time.Sleep(500 * time.Millisecond)
		m := obsMetrics(t, standby)
		peakRetained, peakLag = max(peakRetained, m[retained]), max(peakLag, m[lag])
		if m[slotKey("walrelay_slot_active")] != 1 {
			t.Errorf("slot not active while the active instance is frozen (its walsender holds it)")
		}
	}
	written := float64(currentLSN(t, env.pgDSN) - startLSN)
	during := obsMetrics(t, standby)
	resume()
	t.Logf("paused 8 s: %.0f B of WAL written; standby saw retained %.0f -> %.0f B, confirmed lag %.0f -> %.0f B; wal_status reserved=%v",
		written, before[retained], peakRetained, before[lag], peakLag, during[reserved])
	if written < 100_000 {
		t.Fatalf("only %.0f B of WAL written during the pause: the workload did not run", written)
	}
	if peakRetained-before[retained] < written/2 {
		t.Errorf("retained WAL grew by %.0f B while %.0f B were written and nothing was confirmed", peakRetained-before[retained], written)
	}
	if peakLag-before[lag] < written/2 {
		t.Errorf("confirmed lag grew by %.0f B while %.0f B were written and nothing was confirmed", peakLag-before[lag], written)
	}
	if during[reserved] != 1 {
		t.Errorf("wal_status reserved = %v during the pause, want 1", during[reserved])
	}

	// After SIGCONT the active instance catches up: the lag falls well below its peak.
	recovered := false
	var last map[string]float64
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		last = obsMetrics(t, standby)
		if last[lag] < peakLag/4 && last[retained] < peakRetained {
			recovered = true
			break
		}
	}
	if !recovered {
		t.Errorf("slot metrics did not recover within 30 s of SIGCONT: lag %.0f (peak %.0f), retained %.0f (peak %.0f)",
			last[lag], peakLag, last[retained], peakRetained)
	} else {
		t.Logf("recovered after SIGCONT: lag %.0f B, retained %.0f B", last[lag], last[retained])
	}
	if n := haSeries(obsMetrics(t, standby), "walrelay_role"); n[fmt.Sprintf(`walrelay_role{role="standby",slot=%q}`, s.name)] != 1 {
		t.Errorf("the standby took over during an 8 s pause: %v", n)
	}

	res := faultFinish(t, s, fw, stop, active, "observability")
	if res.duplicates != 0 {
		t.Fatalf("%d duplicates without a restart", res.duplicates)
	}
	m := obsMetrics(t, active)
	count, acked := m["walrelay_e2e_latency_seconds_count"], m["walrelay_events_acked_total"]
	t.Logf("e2e latency histogram: count %.0f, sum %.3f s (mean %.1f ms); events acked %.0f; records in Kafka %d",
		count, m["walrelay_e2e_latency_seconds_sum"], 1000*m["walrelay_e2e_latency_seconds_sum"]/max(count, 1), acked, res.delivered)
	if count != float64(res.delivered) || count != acked {
		t.Errorf("e2e latency count %.0f, events acked %.0f, records produced %d: want all equal", count, acked, res.delivered)
	}
	if m[`walrelay_e2e_latency_seconds_bucket{le="60"}`] != count {
		t.Errorf("events slower than 60 s: bucket le=60 %v of %v", m[`walrelay_e2e_latency_seconds_bucket{le="60"}`], count)
	}

	exposed, families := obsExposedNames(t, active)
	obsCheckQueries(t, exposed)
	obsCheckMetricsDoc(t, families)
}

// obsMetrics scrapes p's /metrics (see walrelayProc.metrics) or fails the test.
func obsMetrics(t *testing.T, p *walrelayProc) map[string]float64 {
	t.Helper()
	m, err := p.metrics()
	if err != nil {
		t.Fatalf("scrape %s: %v", p.name, err)
	}
	return m
}

// obsExposedNames returns the sample names p's /metrics exposes (every family, with the
// _bucket/_sum/_count series of histograms and summaries) and the family names.
func obsExposedNames(t *testing.T, p *walrelayProc) (names, families map[string]bool) {
	t.Helper()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + p.metricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	names, families = map[string]bool{}, map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		if line[0] != '#' {
			names[strings.FieldsFunc(line, func(r rune) bool { return r == '{' || r == ' ' })[0]] = true
		} else if f := strings.Fields(line); len(f) >= 3 && f[1] == "TYPE" {
			families[f[2]] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return names, families
}

// obsCheckMetricsDoc requires the metrics table of docs/operations.md (section Metrics) to list
// exactly the walrelay_* families /metrics exposes (walrelay_kafka_* are kprom's, listed
// as a group; their names are checked to be exposed when listed).
func obsCheckMetricsDoc(t *testing.T, families map[string]bool) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	start := strings.Index(text, "\n## Metrics\n")
	if start < 0 {
		t.Fatal("docs/operations.md has no ## Metrics section")
	}
	section := text[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	listed := map[string]bool{}
	name := regexp.MustCompile("`(walrelay_[a-z0-9_]+)")
	kafka := regexp.MustCompile("`([a-z_]+_(total|bytes))`")
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		for _, m := range name.FindAllStringSubmatch(line, -1) {
			if !strings.HasSuffix(m[1], "_") { // walrelay_kafka_* and the like
				listed[m[1]] = true
			}
		}
		if strings.HasPrefix(line, "| `walrelay_kafka_*`") {
			// The names before "error counters" are the ones every run exposes.
			always, _, _ := strings.Cut(line, "error counters")
			for _, m := range kafka.FindAllStringSubmatch(always, -1) {
				listed["walrelay_kafka_"+m[1]] = true
			}
		}
	}
	for n := range listed {
		if !families[n] && !(obsOnlyWithFailover[n] && !families["walrelay_failover_protected_standbys"]) {
			t.Errorf("docs/operations.md lists %s, which /metrics does not expose", n)
		}
	}
	for n := range families {
		if strings.HasPrefix(n, "walrelay_") && !strings.HasPrefix(n, "walrelay_kafka_") && !listed[n] {
			t.Errorf("/metrics exposes %s, which the metrics table of docs/operations.md does not list", n)
		}
	}
	t.Logf("docs/operations.md lists %d metric families", len(listed))
}

// obsOnlyWithFailover are the metric families walrelay exposes only with --slot-failover
// (after its first reading of the standbys), so that their alerts never fire for a slot
// that is not a failover slot; TestFailoverSlotHealth checks them on Postgres 17+.
var obsOnlyWithFailover = map[string]bool{
	"walrelay_failover_slot_protected":     true,
	"walrelay_failover_slot_lag_bytes":     true,
	"walrelay_failover_protected_standbys": true,
}

// obsCheckQueries requires every metric named by the dashboard's queries and template
// variables and by the alert rules to be in exposed (`up` is Prometheus' own; the
// obsOnlyWithFailover ones when exposed has them).
func obsCheckQueries(t *testing.T, exposed map[string]bool) {
	t.Helper()
	root := ".."                 // go test runs in test/
	exprs := map[string]string{} // expr -> where
	raw, err := os.ReadFile(filepath.Join(root, "deploy/grafana/walrelay-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct {
				Name  string
				Query any
			}
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs[tg.Expr] = "dashboard panel " + p.Title
		}
	}
	labelValues := regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,`)
	for _, v := range dash.Templating.List {
		q := ""
		switch x := v.Query.(type) {
		case string:
			q = x
		case map[string]any:
			q, _ = x["query"].(string)
		}
		if m := labelValues.FindStringSubmatch(q); m != nil {
			exprs[m[1]] = "dashboard variable " + v.Name
		}
	}
	raw, err = os.ReadFile(filepath.Join(root, "deploy/alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string
				Expr  string
			}
		}
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs[r.Expr] = "alert " + r.Alert
		}
	}
	if len(exprs) < 20 {
		t.Fatalf("only %d queries found in the dashboard and alerts", len(exprs))
	}
	used := map[string]bool{}
	for expr, where := range exprs {
		names := promqlMetricNames(expr)
		if len(names) == 0 {
			t.Errorf("%s: no metric name found in %q", where, expr)
		}
		for _, n := range names {
			used[n] = true
			if !exposed[n] && n != "up" && !(obsOnlyWithFailover[n] && !exposed["walrelay_failover_protected_standbys"]) {
				t.Errorf("%s: metric %s is not exposed by /metrics (expr %q)", where, n, expr)
			}
		}
	}
	t.Logf("%d dashboard and alert queries name %d metrics: %v", len(exprs), len(used), slices.Sorted(mapKeys(used)))
}

func mapKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

var (
	promStrings   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promMatchers  = regexp.MustCompile(`\{[^}]*\}`)
	promRanges    = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping  = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promNumbers   = regexp.MustCompile(`(^|[^a-zA-Z0-9_:])(\d+(\.\d+)?([eE][+-]?\d+)?([smhdwy]|ms)?)`)
	promIdent     = regexp.MustCompile(`\$?[a-zA-Z_:][a-zA-Z0-9_:]*`)
	promlKeywords = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
		"group_left", "group_right", "inf", "nan", "Inf", "NaN"}
)

// promqlMetricNames returns the metric names a PromQL expression selects: identifiers
// outside strings, label matchers, ranges and grouping clauses that are neither
// functions/aggregations (followed by "("), keywords, numbers nor $variables. It is a
// scanner for our own queries, not a full PromQL parser.
func promqlMetricNames(expr string) []string {
	e := promStrings.ReplaceAllString(expr, `""`)
	e = promMatchers.ReplaceAllString(e, " ")
	e = promRanges.ReplaceAllString(e, " ")
	e = promGrouping.ReplaceAllString(e, " ")
	e = promNumbers.ReplaceAllString(e, "$1 ")
	seen := map[string]bool{}
	var out []string
	for _, loc := range promIdent.FindAllStringIndex(e, -1) {
		id := e[loc[0]:loc[1]]
		rest := strings.TrimLeft(e[loc[1]:], " \t\n")
		if strings.HasPrefix(id, "$") || strings.HasPrefix(rest, "(") || slices.Contains(promlKeywords, id) || seen[id] {
			continue
		}
		seen[id] = true
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// TestPromQLMetricNames checks the query scanner TestObservability relies on.
func TestPromQLMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`up{job="walrelay"} == 0`, []string{"up"}},
		{`walrelay_ready == 0 unless on(instance, job) walrelay_role{role="standby"} == 1`, []string{"walrelay_ready", "walrelay_role"}},
		{`histogram_quantile(0.99, sum by (le, instance) (rate(walrelay_e2e_latency_seconds_bucket{instance=~"$instance"}[$__rate_interval]))) > 5`,
			[]string{"walrelay_e2e_latency_seconds_bucket"}},
		{`(time() - walrelay_heartbeat_last_timestamp_seconds > 120 and walrelay_heartbeat_last_timestamp_seconds > 0)`,
			[]string{"walrelay_heartbeat_last_timestamp_seconds"}},
		{`max by (slot) (walrelay_slot_retained_wal_bytes) > 5e9`, []string{"walrelay_slot_retained_wal_bytes"}},
		{`min by (slot) (walrelay_slot_safe_wal_size_bytes >= 0) < 1e9`, []string{"walrelay_slot_safe_wal_size_bytes"}},
		{`rate(walrelay_x_total[5m] offset 1h) / ignoring(a) group_left(b) walrelay_y`, []string{"walrelay_x_total", "walrelay_y"}},
		{`sum without (reason) (walrelay_dead_letters_total{reason="a b"})`, []string{"walrelay_dead_letters_total"}},
	} {
		got := promqlMetricNames(tc.expr)
		if !slices.Equal(got, tc.want) {
			t.Errorf("promqlMetricNames(%q) = %v, want %v", tc.expr, got, tc.want)
		}
	}
}
