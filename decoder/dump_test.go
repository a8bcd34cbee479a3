package decoder

import (
	"flag"
	"testing"
)

var dump = flag.Bool("dump", false, "TestDumpCapture: print the decoded capture")

func TestDumpCapture(t *testing.T) {
	if !*dump {
		t.Skip("run with -dump")
	}
	d, err := New(captureConfig())
	if err != nil {
		t.Fatal(err)
	}
	var out Output
	for i, m := range readCapture(t, "testdata/capture/pg15.pgo") {
		err := d.Decode(m.walStart, m.data, &out)
		p := out.Event.Payload
		if len(p) > 80 {
			p = p[:80]
		}
		t.Logf("%2d %s %c len=%d kind=%s err=%v xid=%d commit=%s end=%s reason=%s table=%s content=%q",
			i, m.walStart, m.data[0], len(m.data), out.Kind, err, out.XID, out.CommitLSN, out.EndLSN, out.Reason, out.Table, out.Content)
		if out.Kind == KindEvent {
			e := out.Event
			t.Logf("     ev table=%s id=%s at=%s aid=%q null=%v et=%s payload=%q (%d) headers=%q ts=%s ct=%s lsn=%s xid=%d poison=%v",
				e.Table, e.ID, e.AggregateType, e.AggregateID, e.AggregateIDNull, e.EventType, p, len(e.Payload), e.Headers, e.Timestamp, e.CommitTime, e.LSN, e.XID, e.Poison)
		}
		if m.data[0] == 'R' || m.data[0] == 'Y' || m.data[0] == 'O' {
			t.Logf("     raw %q", m.data)
		}
	}
}
