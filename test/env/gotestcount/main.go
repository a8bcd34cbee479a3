// Command gotestcount reads `go test -json` on stdin and prints what plain
// `go test` would: the ok/FAIL/? line of every package, and the whole output
// of failing tests (their subtests included) and of packages that failed
// outside a test (build errors, panics, timeouts). It counts the tests and
// subtests that passed, failed and were skipped, appends "PASSED FAILED
// SKIPPED" as one line to the -counts file, and exits 1 when anything failed.
//
// With -v it prints all output as it comes, like go test -v. With -packages
// it counts packages instead of tests (the fuzz steps of
// test/env/run-tests.sh count as their package's result).
//
// With -progress D, every D while tests run it prints one line, so that a
// long silent package shows it is alive: what passed, failed and was skipped
// so far and the top-level tests running, longest first, with how long
// they have run. With -skipped FILE it appends one line per skipped test
// to FILE: its package, name and reason (the last line it logged).
//
//	go test -json ./... | go run ./test/env/gotestcount -counts counts.txt
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Time       time.Time
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // build-output, build-fail
}

type counts struct{ passed, failed, skipped int }

// counter turns the event stream into plain go test output and counts.
type counter struct {
	out        io.Writer
	byPackage  bool
	verbose    bool // print every output line as it comes, like go test -v
	counts     counts
	buf        map[string][]string // package + "\x00" + test -> its output, while it runs
	running    map[string]bool     // package + "\x00" + test of tests seen, not ended
	pkgFailed  map[string]bool
	testFailed map[string]bool // packages with a failed test
	// started holds when each running top-level test started, by key.
	started map[string]time.Time
	// skips are the skipped tests: "package test: reason".
	skips []string
	// mu serializes handle and progress lines (printed from a ticker).
	mu sync.Mutex
}

func newCounter(out io.Writer, byPackage bool) *counter {
	return &counter{out: out, byPackage: byPackage, buf: map[string][]string{}, running: map[string]bool{},
		pkgFailed: map[string]bool{}, testFailed: map[string]bool{}, started: map[string]time.Time{}}
}

// modulePrefix is left out of package names in progress and skip lines.
const modulePrefix = "github.com/walrelay/walrelay/"

func shortPackage(pkg string) string {
	if s := strings.TrimPrefix(pkg, modulePrefix); s != "" {
		return s
	}
	return pkg
}

// progressLine says what passed, failed and was skipped so far and which
// top-level tests are running at now, longest first (three at most); ""
// when none is.
func (c *counter) progressLine(now time.Time) string {
	if len(c.started) == 0 {
		return ""
	}
	keys := make([]string, 0, len(c.started))
	for k := range c.started {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if !c.started[keys[i]].Equal(c.started[keys[j]]) {
			return c.started[keys[i]].Before(c.started[keys[j]])
		}
		return keys[i] < keys[j]
	})
	var names []string
	for _, k := range keys[:min(3, len(keys))] {
		pkg, test, _ := strings.Cut(k, "\x00")
		names = append(names, fmt.Sprintf("%s %s (%s)", shortPackage(pkg), test, now.Sub(c.started[k]).Round(time.Second)))
	}
	if len(keys) > 3 {
		names = append(names, fmt.Sprintf("%d more", len(keys)-3))
	}
	return fmt.Sprintf("go test: %d passed, %d failed, %d skipped so far; running %s",
		c.counts.passed, c.counts.failed, c.counts.skipped, strings.Join(names, ", "))
}

// skipReason is the last line a skipped test logged (its t.Skip message).
func skipReason(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" && !noise(l) {
			return l
		}
	}
	return "(no reason given)"
}

func key(pkg, test string) string { return pkg + "\x00" + test }

// parent is the test a subtest's output joins when the subtest fails.
func parent(test string) string {
	if i := strings.LastIndexByte(test, '/'); i >= 0 {
		return test[:i]
	}
	return ""
}

// noise is what plain (non -v) go test does not print.
func noise(line string) bool {
	t := strings.TrimSpace(line)
	for _, p := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME", "--- PASS", "--- SKIP"} {
		if strings.HasPrefix(t, p) {
			return true
		}
	}
	return t == "PASS"
}

// headerFirst moves test's "--- FAIL: test" line, which test2json reports
// after the output of its subtests, in front of its output.
func headerFirst(lines []string, test string) []string {
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "--- FAIL: "+test+" ") {
			out := append([]string{strings.TrimLeft(l, " ")}, lines[:i]...)
			return append(out, lines[i+1:]...)
		}
	}
	return lines
}

func (c *counter) print(lines []string) {
	for _, l := range lines {
		if !noise(l) {
			fmt.Fprint(c.out, l)
		}
	}
}

func (c *counter) handle(e event) {
	switch e.Action {
	case "build-output":
		fmt.Fprint(c.out, e.Output)
		return
	case "build-fail":
		return // the package's own fail event follows
	}
	if e.Test == "" {
		c.handlePackage(e)
		return
	}
	k := key(e.Package, e.Test)
	c.running[k] = true
	switch e.Action {
	case "run":
		if !strings.Contains(e.Test, "/") {
			t := e.Time
			if t.IsZero() {
				t = time.Now()
			}
			c.started[k] = t
		}
	case "pass", "skip", "fail":
		delete(c.running, k)
		delete(c.started, k)
	}
	switch e.Action {
	case "output":
		if c.verbose {
			fmt.Fprint(c.out, e.Output)
			return
		}
		c.buf[k] = append(c.buf[k], e.Output)
	case "pass", "skip":
		if e.Action == "skip" && !c.byPackage {
			c.skips = append(c.skips, fmt.Sprintf("%s %s: %s", shortPackage(e.Package), e.Test, skipReason(c.buf[k])))
		}
		delete(c.buf, k)
		if !c.byPackage {
			if e.Action == "pass" {
				c.counts.passed++
			} else {
				c.counts.skipped++
			}
		}
	case "fail":
		c.testFailed[e.Package] = true
		if !c.byPackage {
			c.counts.failed++
		}
		lines := headerFirst(c.buf[k], e.Test)
		delete(c.buf, k)
		if p := parent(e.Test); p != "" {
			// Nested under the parent's "--- FAIL" line, as plain go test shows it.
			pk := key(e.Package, p)
			for _, l := range lines {
				c.buf[pk] = append(c.buf[pk], "    "+l)
			}
		} else {
			c.print(lines)
		}
	}
}

func (c *counter) handlePackage(e event) {
	switch e.Action {
	case "output":
		if c.verbose || !noise(e.Output) {
			fmt.Fprint(c.out, e.Output)
		}
	case "pass", "skip":
		c.flush(e.Package, false)
		if c.byPackage {
			c.counts.passed++
		}
	case "fail":
		c.pkgFailed[e.Package] = true
		// Tests still running when the package failed (a panic, a timeout)
		// never end: print their output and count them as failed.
		unfinished := c.flush(e.Package, true)
		switch {
		case c.byPackage:
			c.counts.failed++
		case unfinished == 0 && !c.testFailed[e.Package]:
			c.counts.failed++ // failed outside any test: build error, TestMain, vet
		default:
			c.counts.failed += unfinished
		}
	}
}

// flush drops (or, with show, prints) the output of pkg's unfinished tests
// and returns how many top-level tests were unfinished.
func (c *counter) flush(pkg string, show bool) int {
	var keys []string
	for k := range c.buf {
		if strings.HasPrefix(k, pkg+"\x00") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys) // a parent before its subtests
	for _, k := range keys {
		if show {
			c.print(c.buf[k])
		}
		delete(c.buf, k)
	}
	n := 0
	for k := range c.running {
		if strings.HasPrefix(k, pkg+"\x00") {
			if !strings.Contains(k[len(pkg)+1:], "/") {
				n++
			}
			delete(c.running, k)
			delete(c.started, k)
		}
	}
	return n
}

func (c *counter) failed() bool { return c.counts.failed > 0 || len(c.pkgFailed) > 0 }

func run(in io.Reader, out io.Writer, byPackage, verbose bool) (*counter, error) {
	return runProgress(in, out, byPackage, verbose, 0)
}

// runProgress is run, printing a progress line every interval while tests
// run (0: never).
func runProgress(in io.Reader, out io.Writer, byPackage, verbose bool, interval time.Duration) (*counter, error) {
	c := newCounter(out, byPackage)
	c.verbose = verbose
	if interval > 0 {
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			t := time.NewTicker(interval)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case now := <-t.C:
					c.mu.Lock()
					if l := c.progressLine(now); l != "" {
						fmt.Fprintln(c.out, l)
					}
					c.mu.Unlock()
				}
			}
		}()
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		c.mu.Lock()
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(out, "%s\n", line) // not test2json: pass it on
		} else {
			c.handle(e)
		}
		c.mu.Unlock()
	}
	return c, sc.Err()
}

func main() {
	countsFile := flag.String("counts", "", "append \"PASSED FAILED SKIPPED\" to this file")
	byPackage := flag.Bool("packages", false, "count packages instead of tests")
	verbose := flag.Bool("v", false, "print all test output, as go test -v does")
	progress := flag.Duration("progress", 0, "print a progress line this often while tests run (0: never)")
	skippedFile := flag.String("skipped", "", "append one line per skipped test (package, name, reason) to this file")
	flag.Parse()
	c, err := runProgress(os.Stdin, os.Stdout, *byPackage, *verbose, *progress)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gotestcount:", err)
		os.Exit(2)
	}
	if *skippedFile != "" && len(c.skips) > 0 {
		if err := appendLines(*skippedFile, c.skips); err != nil {
			fmt.Fprintln(os.Stderr, "gotestcount:", err)
			os.Exit(2)
		}
	}
	if *countsFile != "" {
		if err := appendLines(*countsFile, []string{fmt.Sprintf("%d %d %d", c.counts.passed, c.counts.failed, c.counts.skipped)}); err != nil {
			fmt.Fprintln(os.Stderr, "gotestcount:", err)
			os.Exit(2)
		}
	}
	if c.failed() {
		os.Exit(1)
	}
}

// appendLines appends lines to the file at path.
func appendLines(path string, lines []string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprint(f, strings.Join(lines, "\n")+"\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
