package sink_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/sink"
)

// TestPositionHeaders: the hand-formatted walrelay.lsn and walrelay.xid
// headers equal pglogrepl's LSN text and the decimal xid, on edge values.
func TestPositionHeaders(t *testing.T) {
	for _, c := range []struct {
		lsn pglogrepl.LSN
		xid uint32
	}{
		{0, 0}, {0x16B3748, 727}, {0xABCDEF_00000001, 1 << 31}, {1<<64 - 1, 1<<32 - 1}, {0x1_0000000A, 10},
	} {
		r := sink.BuildRecord("t", &decoder.Event{ID: "i", LSN: c.lsn, XID: c.xid})
		h := map[string]string{}
		for _, x := range r.Headers {
			h[x.Key] = string(x.Value)
		}
		if h[sink.HeaderLSN] != c.lsn.String() || h[sink.HeaderXID] != strconv.FormatUint(uint64(c.xid), 10) {
			t.Errorf("lsn %v xid %d: headers %q %q", c.lsn, c.xid, h[sink.HeaderLSN], h[sink.HeaderXID])
		}
	}
}

// TestCommitTimeHeader: a record whose timestamp is a mapped column's value
// carries its transaction's commit time in walrelay.commit_time; one whose
// timestamp is the commit time does not.
func TestCommitTimeHeader(t *testing.T) {
	commit := time.Date(2026, 11, 29, 1, 2, 3, 456789000, time.UTC)
	for _, c := range []struct {
		ts   time.Time
		want string
	}{
		{time.Time{}, ""},
		{commit, ""},
		{commit.Add(24 * time.Hour), "2026-11-29T01:02:03.456789Z"},
	} {
		r := sink.BuildRecord("t", &decoder.Event{ID: "i", CommitTime: commit, Timestamp: c.ts})
		got := ""
		for _, h := range r.Headers {
			if h.Key == sink.HeaderCommitTime {
				got = string(h.Value)
			}
		}
		if got != c.want || !r.Timestamp.Equal(commit) && !r.Timestamp.Equal(c.ts) {
			t.Errorf("timestamp %v: commit time header %q, want %q (record timestamp %v)", c.ts, got, c.want, r.Timestamp)
		}
	}
}
