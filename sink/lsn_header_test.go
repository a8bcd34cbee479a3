package sink_test

import (
	"strconv"
	"testing"

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
