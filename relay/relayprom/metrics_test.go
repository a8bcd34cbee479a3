package relayprom

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/walrelay/walrelay/internal/promtest"
	"github.com/walrelay/walrelay/replication"
	"github.com/walrelay/walrelay/sink"
)

var gather = promtest.Gather

// TestLabelledSeriesExistFromStart: every labelled series is there, at 0,
// before anything happened, so rate()/increase() and the alerts see the
// first event.
func TestLabelledSeriesExistFromStart(t *testing.T) {
	reg := prometheus.NewRegistry()
	New(reg, "s1", Build{Version: "v1", Revision: "r1"})
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
			if got := slotStateOf(&tc.slot); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestObserveSlot(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg, "s1", Build{Version: "v1", Revision: "r1"})
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
