package schema

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// fakeRegistry is srfake's registry with a count of the requests it got
// (by "METHOD path") and a switch that makes it answer a status instead.
type fakeRegistry struct {
	*srfake.Registry
	requests atomic.Int64
	mu       sync.Mutex
	byPath   map[string]int
	down     atomic.Int32 // HTTP status to answer instead, 0 for none
	downBody atomic.Value // string
	lastAuth atomic.Value // string: the last request's Authorization header
}

func newFakeRegistry(t *testing.T, opts ...srfake.Option) *fakeRegistry {
	t.Helper()
	f := &fakeRegistry{Registry: srfake.New(opts...), byPath: map[string]int{}}
	t.Cleanup(f.Close)
	f.downBody.Store("")
	f.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		f.requests.Add(1)
		f.lastAuth.Store(r.Header.Get("Authorization"))
		f.mu.Lock()
		f.byPath[r.Method+" "+r.URL.Path]++
		f.mu.Unlock()
		if code := f.down.Load(); code != 0 {
			w.WriteHeader(int(code))
			_, _ = w.Write([]byte(f.downBody.Load().(string)))
			return true
		}
		return false
	})
	return f
}

// count is the number of requests with method to path.
func (f *fakeRegistry) count(method, path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.byPath[method+" "+path]
}

// versions is subject's versions.
func (f *fakeRegistry) versions(t *testing.T, subject string) []int {
	t.Helper()
	cl, err := sr.NewClient(sr.URLs(f.URL()))
	if err != nil {
		t.Fatal(err)
	}
	v, err := cl.SubjectVersions(context.Background(), subject)
	if err != nil {
		t.Fatalf("versions of %s: %v", subject, err)
	}
	return v
}

// writeFile writes text to dir/name and returns its path.
func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

var quiet = slog.New(slog.DiscardHandler)

// newEncoder builds an encoder for one rule against url.
func newEncoder(t *testing.T, url string, rules ...Rule) *Encoder {
	t.Helper()
	e, err := New(Config{URLs: []string{url}, Rules: rules, Timeout: 2 * time.Second}, quiet)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return e
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// wantErr fails unless err's text contains every part.
func wantErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one containing %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q does not contain %q", err, p)
		}
	}
}

// wantFields fails unless err (or an error it wraps) names exactly fields
// (of Config, without the schema.Config. prefix) as the ones that fix it.
func wantFields(t *testing.T, err error, fields ...string) {
	t.Helper()
	var f interface{ Fields() []string }
	if !errors.As(err, &f) || !slices.Equal(f.Fields(), configFields(fields...)) {
		t.Fatalf("error %v: fields %v, want %v", err, f, fields)
	}
}
