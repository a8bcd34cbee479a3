package relay

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/walrelay/walrelay/replication"
)

// TestShrinkWindow: the rate is how fast the readings fell since they last
// grew (the slot moved), given only once they have fallen for min; readings
// older than the span are forgotten.
func TestShrinkWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	w := &shrinkWindow{span: time.Minute, min: 20 * time.Second}
	if r := w.add(t0, 1000); r != 0 {
		t.Errorf("one reading: rate %v, want 0", r)
	}
	if r := w.add(t0.Add(10*time.Second), 900); r != 0 {
		t.Errorf("shrinking for 10 s (< min): rate %v, want 0", r)
	}
	if r := w.add(t0.Add(20*time.Second), 800); r != 10 {
		t.Errorf("1000 -> 800 in 20 s: rate %v, want 10", r)
	}
	if r := w.add(t0.Add(30*time.Second), 1000); r != 0 {
		t.Errorf("grown back (the slot moved): rate %v, want 0", r)
	}
	if r := w.add(t0.Add(45*time.Second), 1000); r != 0 {
		t.Errorf("steady for 15 s: rate %v, want 0", r)
	}
	w.reset()
	w.add(t0, 5000)
	w.add(t0.Add(30*time.Second), 4000)
	w.add(t0.Add(100*time.Second), 3000)
	if r := w.add(t0.Add(110*time.Second), 2000); r != (4000-2000)/80.0 {
		t.Errorf("after the span: rate %v, want %v (the reading 80 s back is the oldest kept)", r, (4000-2000)/80.0)
	}
}

// TestHolderLogWarnsOncePerHolder: a holder older than the threshold is
// logged once with its pid, not at every reading; a new holder is logged
// again; the age returned is the oldest transaction's, prepared ones
// included; with no threshold nothing is logged.
func TestHolderLogWarnsOncePerHolder(t *testing.T) {
	var buf bytes.Buffer
	l := &holderLog{after: time.Minute, slot: "s", log: slog.New(slog.NewTextHandler(&buf, nil))}
	young := replication.Holders{Sessions: []replication.Session{{PID: 7, State: "idle in transaction", XactAge: 10 * time.Second}}}
	if age := l.observe(young); age != 10*time.Second || buf.Len() != 0 {
		t.Fatalf("young holder: age %v, log %q", age, buf.String())
	}
	old := replication.Holders{Sessions: []replication.Session{{PID: 7, State: "idle in transaction", XactAge: 2 * time.Minute}}}
	l.observe(old)
	l.observe(old)
	if n := strings.Count(buf.String(), "pid 7"); n != 1 {
		t.Errorf("holder pid 7 logged %d times, want once:\n%s", n, buf.String())
	}
	other := replication.Holders{Sessions: []replication.Session{{PID: 8, State: "active", XactAge: 3 * time.Minute}},
		Prepared: []replication.Prepared{{GID: "g", Age: 5 * time.Minute}}}
	if age := l.observe(other); age != 5*time.Minute {
		t.Errorf("age %v, want the prepared transaction's 5m", age)
	}
	if !strings.Contains(buf.String(), `prepared transaction \"g\"`) {
		t.Errorf("the older prepared transaction is not named:\n%s", buf.String())
	}
	buf.Reset()
	off := &holderLog{slot: "s", log: slog.New(slog.NewTextHandler(&buf, nil))}
	if off.observe(old); buf.Len() != 0 {
		t.Errorf("logged with no threshold: %s", buf.String())
	}
}
