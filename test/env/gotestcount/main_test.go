package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// stream is `go test -json` of a package with a passing test (with a log
// line), a skipped one, a subtest failure and a panic, plus a package that
// does not build.
const stream = `{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestOK"}
{"Action":"output","Package":"p","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"output","Package":"p","Test":"TestOK","Output":"    a_test.go:3: hidden\n"}
{"Action":"output","Package":"p","Test":"TestOK","Output":"--- PASS: TestOK (0.00s)\n"}
{"Action":"pass","Package":"p","Test":"TestOK"}
{"Action":"output","Package":"p","Test":"TestSkip","Output":"--- SKIP: TestSkip (0.00s)\n"}
{"Action":"skip","Package":"p","Test":"TestSkip"}
{"Action":"output","Package":"p","Test":"TestSubs","Output":"=== RUN   TestSubs\n"}
{"Action":"output","Package":"p","Test":"TestSubs/good","Output":"--- PASS: TestSubs/good (0.00s)\n"}
{"Action":"pass","Package":"p","Test":"TestSubs/good"}
{"Action":"output","Package":"p","Test":"TestSubs/bad","Output":"    a_test.go:7: diagnosis line\n"}
{"Action":"output","Package":"p","Test":"TestSubs/bad","Output":"    --- FAIL: TestSubs/bad (0.00s)\n"}
{"Action":"fail","Package":"p","Test":"TestSubs/bad"}
{"Action":"output","Package":"p","Test":"TestSubs","Output":"--- FAIL: TestSubs (0.00s)\n"}
{"Action":"fail","Package":"p","Test":"TestSubs"}
{"Action":"output","Package":"p","Test":"TestHang","Output":"    a_test.go:12: waiting\n"}
{"Action":"output","Package":"p","Output":"panic: test timed out after 1s\n"}
{"Action":"output","Package":"p","Output":"FAIL\tp\t1.0s\n"}
{"Action":"fail","Package":"p"}
{"ImportPath":"q","Action":"build-output","Output":"q/x.go:1:1: syntax error\n"}
{"ImportPath":"q","Action":"build-fail"}
{"Action":"output","Package":"q","Output":"FAIL\tq [build failed]\n"}
{"Action":"fail","Package":"q"}
{"Action":"output","Package":"r","Output":"ok  \tr\t0.1s\n"}
{"Action":"pass","Package":"r"}
`

func TestCounts(t *testing.T) {
	for _, tc := range []struct {
		name       string
		byPackage  bool
		want       counts
		wantOut    []string
		notWantOut []string
	}{
		{"tests", false, counts{passed: 2, failed: 2 + 1 + 1, skipped: 1},
			[]string{
				"--- FAIL: TestSubs (0.00s)\n    --- FAIL: TestSubs/bad (0.00s)\n        a_test.go:7: diagnosis line\n",
				"a_test.go:12: waiting", "panic: test timed out", "FAIL\tp\t1.0s", "q/x.go:1:1: syntax error", "ok  \tr\t0.1s",
			},
			[]string{"hidden", "=== RUN", "--- PASS", "--- SKIP"}},
		{"packages", true, counts{passed: 1, failed: 2}, []string{"FAIL\tq [build failed]"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			c, err := run(strings.NewReader(stream), &out, tc.byPackage, false)
			if err != nil {
				t.Fatal(err)
			}
			if c.counts != tc.want {
				t.Errorf("counts %+v, want %+v", c.counts, tc.want)
			}
			if !c.failed() {
				t.Error("failed() = false")
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			for _, w := range tc.notWantOut {
				if strings.Contains(out.String(), w) {
					t.Errorf("output has %q:\n%s", w, out.String())
				}
			}
		})
	}
	c, err := run(strings.NewReader(`{"Action":"pass","Package":"r","Test":"TestA"}`+"\n"+`{"Action":"pass","Package":"r"}`+"\n"), &strings.Builder{}, false, false)
	if err != nil || c.failed() || c.counts != (counts{passed: 1}) {
		t.Errorf("all passing: %+v failed=%v err=%v", c.counts, c.failed(), err)
	}
}

func TestVerbosePrintsEverything(t *testing.T) {
	var out strings.Builder
	c, err := run(strings.NewReader(stream), &out, false, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"=== RUN   TestOK", "a_test.go:3: hidden", "--- PASS: TestOK", "diagnosis line"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("verbose output lacks %q", w)
		}
	}
	if c.counts != (counts{passed: 2, failed: 4, skipped: 1}) {
		t.Errorf("counts %+v", c.counts)
	}
}

// TestProgressAndSkippedTests: while tests run, progressLine says how many passed so
// far and which top-level tests run, longest first, for how long; a skipped test is
// named with its reason (the last line it logged).
func TestProgressAndSkippedTests(t *testing.T) {
	const partial = `{"Time":"2026-01-02T10:00:00Z","Action":"run","Package":"github.com/walrelay/walrelay/test","Test":"TestLong"}
{"Time":"2026-01-02T10:00:00Z","Action":"output","Package":"github.com/walrelay/walrelay/test","Test":"TestLong","Output":"=== RUN   TestLong\n"}
{"Time":"2026-01-02T10:00:05Z","Action":"run","Package":"github.com/walrelay/walrelay/test","Test":"TestOK"}
{"Time":"2026-01-02T10:00:06Z","Action":"pass","Package":"github.com/walrelay/walrelay/test","Test":"TestOK"}
{"Time":"2026-01-02T10:00:30Z","Action":"run","Package":"github.com/walrelay/walrelay/test","Test":"TestShort"}
{"Time":"2026-01-02T10:00:30Z","Action":"run","Package":"github.com/walrelay/walrelay/test","Test":"TestShort/sub"}
{"Time":"2026-01-02T10:00:31Z","Action":"run","Package":"github.com/walrelay/walrelay/test","Test":"TestSkipped"}
{"Time":"2026-01-02T10:00:31Z","Action":"output","Package":"github.com/walrelay/walrelay/test","Test":"TestSkipped","Output":"    x_test.go:9: needs a schema registry\n"}
{"Time":"2026-01-02T10:00:31Z","Action":"output","Package":"github.com/walrelay/walrelay/test","Test":"TestSkipped","Output":"--- SKIP: TestSkipped (0.00s)\n"}
{"Time":"2026-01-02T10:00:31Z","Action":"skip","Package":"github.com/walrelay/walrelay/test","Test":"TestSkipped"}
`
	c, err := run(strings.NewReader(partial), &strings.Builder{}, false, false)
	if err != nil {
		t.Fatal(err)
	}
	now, _ := time.Parse(time.RFC3339, "2026-01-02T10:01:10Z")
	want := "go test: 1 passed, 0 failed, 1 skipped so far; running test TestLong (1m10s), test TestShort (40s)"
	if got := c.progressLine(now); got != want {
		t.Errorf("progress\n  %q\nwant\n  %q", got, want)
	}
	if want := []string{"test TestSkipped: x_test.go:9: needs a schema registry"}; !slices.Equal(c.skips, want) {
		t.Errorf("skipped %q, want %q", c.skips, want)
	}
	// Nothing running: no line.
	c, _ = run(strings.NewReader(stream), &strings.Builder{}, false, false)
	if got := c.progressLine(now); got != "" {
		t.Errorf("progress with nothing running: %q", got)
	}
}

// TestProgressPrintedWhileWaiting: with an interval, the line comes while go test is
// silent.
func TestProgressPrintedWhileWaiting(t *testing.T) {
	r, w := io.Pipe()
	var out syncBuilder
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := runProgress(r, &out, false, false, 20*time.Millisecond); err != nil {
			t.Error(err)
		}
	}()
	fmt.Fprintf(w, `{"Time":%q,"Action":"run","Package":"p","Test":"TestSlow"}`+"\n", time.Now().Format(time.RFC3339Nano))
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "running p TestSlow (") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	w.Close()
	<-done
	if !strings.Contains(out.String(), "go test: 0 passed, 0 failed, 0 skipped so far; running p TestSlow (") {
		t.Errorf("no progress line while waiting:\n%s", out.String())
	}
}

type syncBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuilder) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuilder) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }
