package relay

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/walrelay/walrelay/replication"
	"github.com/walrelay/walrelay/sink"
)

// gather returns "name{k=v,...}" -> value for every gauge and counter of reg.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, lp.GetName()+"="+lp.GetValue())
			}
			key := mf.GetName()
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[key] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[key] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[key+"_count"] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// TestLabelledSeriesExistFromStart: every labelled series is there, at 0,
// before anything happened, so rate()/increase() and the alerts see the
// first event.
func TestLabelledSeriesExistFromStart(t *testing.T) {
	reg := prometheus.NewRegistry()
	newMetrics(reg, "s1")
	got := gather(t, reg)
	var want []string
	for _, r := range sink.DeadLetterReasons() {
		want = append(want, "walrelay_dead_letters_total{reason="+string(r)+"}")
	}
	for _, r := range ignoredReasons {
		want = append(want, "walrelay_changes_ignored_total{reason="+r+"}")
	}
	for _, r := range filteredReasons {
		want = append(want, "walrelay_events_filtered_total{reason="+r+"}")
	}
	for _, c := range reconnectCauses {
		want = append(want, "walrelay_reconnects_total{cause="+c+"}")
	}
	for _, s := range []string{"reserved", "extended", "unreserved", "lost"} {
		want = append(want, "walrelay_slot_wal_status{slot=s1,status="+s+"}")
	}
	want = append(want, "walrelay_role{role=active,slot=s1}", "walrelay_role{role=standby,slot=s1}",
		"walrelay_e2e_latency_seconds_count", "walrelay_slot_retained_wal_bytes{slot=s1}")
	for _, k := range want {
		v, ok := got[k]
		if !ok {
			t.Errorf("series %s missing at start", k)
			continue
		}
		if v != 0 {
			t.Errorf("series %s = %v at start, want 0", k, v)
		}
	}
	var info string
	for k, v := range got {
		if strings.HasPrefix(k, "walrelay_build_info{") {
			info = fmt.Sprintf("%s=%v", k, v)
		}
	}
	if !strings.Contains(info, "goversion=go") || !strings.HasSuffix(info, "=1") || !strings.Contains(info, "version=") {
		t.Errorf("walrelay_build_info: got %q", info)
	}
}

func TestBuildVersion(t *testing.T) {
	vcs := func(rev string, modified bool) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: fmt.Sprint(modified)}}
	}
	const rev = "5ac03b4eb9204c1f6b0a2f8a4b1d0e3c9a8b7c6d"
	for _, tc := range []struct {
		name              string
		version, revision string
		bi                *debug.BuildInfo
		wantV, wantR      string
	}{
		{"make build (-X both)", "v1.2.3-4-gabc", "abc", &debug.BuildInfo{Settings: vcs(rev, false)}, "v1.2.3-4-gabc", "abc"},
		{"go install module@version", "dev", "", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "v1.2.3", "unknown"},
		{"go build in a checkout", "dev", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs(rev, false)}, rev[:12], rev},
		{"go build in a modified checkout", "dev", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs(rev, true)}, rev[:12] + "-dirty", rev},
		{"nothing known", "dev", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev", "unknown"},
		{"no build info", "", "", nil, "dev", "unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, r := buildVersion(tc.version, tc.revision, tc.bi)
			if v != tc.wantV || r != tc.wantR {
				t.Errorf("buildVersion = %q, %q; want %q, %q", v, r, tc.wantV, tc.wantR)
			}
		})
	}
}

func TestSlotStateOf(t *testing.T) {
	size := int64(123)
	for _, tc := range []struct {
		name string
		slot replication.Slot
		want slotState
	}{
		{"healthy", replication.Slot{WALEnd: 0x101000, RestartLSN: 0x1000, ConfirmedFlushLSN: 0x100000, WALStatus: "reserved", Active: true},
			slotState{exists: true, retained: 1048576, lag: 4096, walStatus: "reserved", safeWAL: -1, active: true}},
		{"at risk, inactive", replication.Slot{WALEnd: 5e9 + 1, RestartLSN: 1, ConfirmedFlushLSN: 1, WALStatus: "unreserved", SafeWALSize: &size},
			slotState{exists: true, retained: 5e9, lag: 5e9, walStatus: "unreserved", safeWAL: 123}},
		{"lost", replication.Slot{WALEnd: 0x5000, ConfirmedFlushLSN: 0x5000, WALStatus: "lost"},
			slotState{exists: true, walStatus: "lost", safeWAL: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := slotStateOf(tc.slot); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestObserveSlot(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg, "s1")
	m.observeSlot(slotState{exists: true, retained: 100, lag: 10, walStatus: "unreserved", safeWAL: 5, active: true})
	got := gather(t, reg)
	for k, want := range map[string]float64{
		"walrelay_slot_exists{slot=s1}": 1, "walrelay_slot_active{slot=s1}": 1,
		"walrelay_slot_retained_wal_bytes{slot=s1}": 100, "walrelay_slot_confirmed_lag_bytes{slot=s1}": 10,
		"walrelay_slot_safe_wal_size_bytes{slot=s1}":          5,
		"walrelay_slot_wal_status{slot=s1,status=unreserved}": 1, "walrelay_slot_wal_status{slot=s1,status=reserved}": 0,
		"walrelay_slot_wal_status{slot=s1,status=lost}": 0, "walrelay_slot_wal_status{slot=s1,status=extended}": 0,
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
	if got["walrelay_slot_poll_last_success_timestamp_seconds{slot=s1}"] < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Error("last success timestamp not set")
	}
	m.observeSlot(slotState{}) // the slot disappeared
	got = gather(t, reg)
	for _, k := range []string{"walrelay_slot_exists{slot=s1}", "walrelay_slot_active{slot=s1}", "walrelay_slot_wal_status{slot=s1,status=unreserved}"} {
		if got[k] != 0 {
			t.Errorf("missing slot: %s = %v, want 0", k, got[k])
		}
	}
}

// TestStandbyRetries: a slot in use gives the fixed interval (not the
// backoff), one log line per standby period, one count, role standby; a
// stream that starts makes the instance active; a lost connection uses the
// backoff and clears the role.
func TestStandbyRetries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg, "s1")
	var logs bytes.Buffer
	sb := newStandby(time.Second, "s1", m, slog.New(slog.NewJSONHandler(&logs, nil)))
	inUse := fmt.Errorf("start replication on slot s1: %w: active for PID 42", replication.ErrSlotInUse)
	role := func() string {
		g := gather(t, reg)
		switch {
		case g["walrelay_role{role=active,slot=s1}"] == 1 && g["walrelay_role{role=standby,slot=s1}"] == 0:
			return "active"
		case g["walrelay_role{role=active,slot=s1}"] == 0 && g["walrelay_role{role=standby,slot=s1}"] == 1:
			return "standby"
		case g["walrelay_role{role=active,slot=s1}"] == 0 && g["walrelay_role{role=standby,slot=s1}"] == 0:
			return ""
		}
		return "both"
	}
	for i := range 5 {
		wait, standing := sb.after(inUse, 16*time.Second)
		if wait < 800*time.Millisecond || wait >= 1200*time.Millisecond || !standing {
			t.Fatalf("try %d: wait %v standing %v, want 1s ± 20%% true", i, wait, standing)
		}
	}
	if n := strings.Count(logs.String(), "standing by"); n != 1 {
		t.Errorf("%d standing-by log lines for 5 tries, want 1:\n%s", n, logs.String())
	}
	if got := gather(t, reg)["walrelay_reconnects_total{cause=slot_in_use}"]; got != 1 {
		t.Errorf("slot_in_use count %v, want 1 (one standby period)", got)
	}
	if r := role(); r != "standby" {
		t.Errorf("role %q, want standby", r)
	}
	sb.streaming()
	if r := role(); r != "active" {
		t.Errorf("role %q after streaming, want active", r)
	}
	if !strings.Contains(logs.String(), "took over") {
		t.Errorf("no takeover log line:\n%s", logs.String())
	}
	// A second standby period logs and counts again.
	sb.after(inUse, time.Second)
	if n := strings.Count(logs.String(), "standing by"); n != 2 {
		t.Errorf("%d standing-by log lines after a second standby period, want 2", n)
	}
	wait, standing := sb.after(errors.New("unexpected EOF"), 4*time.Second)
	if wait != 4*time.Second || standing {
		t.Errorf("lost connection: wait %v standing %v, want the backoff 4s, false", wait, standing)
	}
	if r := role(); r != "" {
		t.Errorf("role %q while reconnecting, want neither", r)
	}
	if got := gather(t, reg)["walrelay_reconnects_total{cause=connection}"]; got != 1 {
		t.Errorf("connection count %v, want 1", got)
	}
}
