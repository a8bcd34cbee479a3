// Package otlptest gives tests an OTLP/HTTP trace receiver that decodes
// what an exporter sends (walrelay's, or OpenTelemetry's for comparison).
package otlptest

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"google.golang.org/protobuf/proto"
)

// Receiver is an OTLP/HTTP trace receiver: it decodes each request
// (protobuf, gzip or not) and answers with Answer (nil: 200 and an empty
// ExportTraceServiceResponse). Set Answer before the first request.
type Receiver struct {
	*httptest.Server
	mu       sync.Mutex
	requests []*coltracepb.ExportTraceServiceRequest
	headers  []http.Header
	Answer   func(n int) (status int, header http.Header, body []byte) // n: the request's number, from 1
}

// NewReceiver starts a receiver, closed when t ends.
func NewReceiver(t *testing.T) *Receiver {
	t.Helper()
	r := &Receiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.Close)
	return r
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "not an OTLP/HTTP protobuf trace export: "+req.Method+" "+req.URL.Path, http.StatusNotFound)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	m := &coltracepb.ExportTraceServiceRequest{}
	if err := proto.Unmarshal(b, m); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.requests = append(r.requests, m)
	r.headers = append(r.headers, req.Header.Clone())
	n, answer := len(r.requests), r.Answer
	r.mu.Unlock()
	status, header, out := http.StatusOK, http.Header(nil), []byte(nil)
	if answer != nil {
		status, header, out = answer(n)
	}
	if out == nil && status == http.StatusOK {
		out, _ = proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	}
	for k, v := range header {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(status)
	_, _ = w.Write(out)
}

// Spans returns every span received, with its resource's attributes.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Span
	for _, req := range r.requests {
		for _, rs := range req.ResourceSpans {
			res := map[string]string{}
			for _, kv := range rs.Resource.GetAttributes() {
				res[kv.Key] = kv.Value.GetStringValue()
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					out = append(out, Span{Span: s, Resource: res, Scope: ss.Scope.GetName()})
				}
			}
		}
	}
	return out
}

// EveryRequestHas checks that each request came with header key: value.
func (r *Receiver) EveryRequestHas(t *testing.T, key, value string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range r.headers {
		if h.Get(key) != value {
			t.Errorf("a request came without %s: %s (headers %v)", key, value, h)
		}
	}
}

// Count is the number of requests received.
func (r *Receiver) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.requests)
}

// Requests are the requests received, in order.
func (r *Receiver) Requests() []*coltracepb.ExportTraceServiceRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.requests)
}

// Headers are the requests' headers, in order.
func (r *Receiver) Headers() []http.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.headers)
}

// Span is a span received, with its resource's attributes and its scope's
// name.
type Span struct {
	*tracepb.Span
	Resource map[string]string
	Scope    string
}

// Attr is the span's attribute key, as text ("" when absent).
func (s Span) Attr(key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			if v, ok := kv.Value.GetValue().(*commonpb.AnyValue_IntValue); ok {
				return strconv.FormatInt(v.IntValue, 10)
			}
			return kv.Value.GetStringValue()
		}
	}
	return ""
}

// Env is a getenv of the variables kv (name, value, name, value, ...).
func Env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}
