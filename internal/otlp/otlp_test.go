package otlp

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/walrelay/walrelay/internal/otlp/otlptest"
)

var quietLog = slog.New(slog.DiscardHandler)

func TestOTLPExporterSettings(t *testing.T) {
	cases := []struct {
		name    string
		env     []string
		url     string
		header  http.Header
		timeout time.Duration
		gzip    bool
		errVar  string // the *EnvError's variable ("" : no error)
	}{
		{name: "default endpoint", url: "http://localhost:4318/v1/traces", timeout: 10 * time.Second},
		{name: "general endpoint gets the traces path", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318/"},
			url: "https://collector:4318/v1/traces", timeout: 10 * time.Second},
		{name: "signal endpoint is used as it is", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://b:9999/custom"},
			url: "http://b:9999/custom", timeout: 10 * time.Second},
		{name: "headers, timeout and gzip; the signal's win", env: []string{
			"OTEL_EXPORTER_OTLP_HEADERS", "api-key=general, x-tenant = acme ,authorization=Bearer%20abc",
			"OTEL_EXPORTER_OTLP_TRACES_HEADERS", "api-key=traces",
			"OTEL_EXPORTER_OTLP_TIMEOUT", "2500", "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "gzip"},
			url:    "http://localhost:4318/v1/traces",
			header: http.Header{"Api-Key": {"traces"}, "X-Tenant": {"acme"}, "Authorization": {"Bearer abc"}}, timeout: 2500 * time.Millisecond, gzip: true},
		{name: "not a URL", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"}, errVar: "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{name: "bad header entry", env: []string{"OTEL_EXPORTER_OTLP_HEADERS", "api-key"}, errVar: "OTEL_EXPORTER_OTLP_HEADERS"},
		{name: "bad timeout", env: []string{"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "10s"}, errVar: "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"},
		{name: "bad compression", env: []string{"OTEL_EXPORTER_OTLP_COMPRESSION", "zstd"}, errVar: "OTEL_EXPORTER_OTLP_COMPRESSION"},
		{name: "missing CA file", env: []string{"OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem"}, errVar: "OTEL_EXPORTER_OTLP_CERTIFICATE"},
		{name: "client certificate without key", env: []string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "/x.pem"},
			errVar: "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE, OTEL_EXPORTER_OTLP_CLIENT_KEY"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, err := New(otlptest.Env(tc.env...), quietLog)
			if !wantEnvError(t, err, tc.errVar) {
				return
			}
			if e.url != tc.url || e.timeout != tc.timeout || e.gzip != tc.gzip {
				t.Errorf("url %q timeout %v gzip %v, want %q %v %v", e.url, e.timeout, e.gzip, tc.url, tc.timeout, tc.gzip)
			}
			if tc.header == nil {
				tc.header = http.Header{}
			}
			if !equalHeader(e.header, tc.header) {
				t.Errorf("headers %v, want %v", e.header, tc.header)
			}
		})
	}
}

// wantEnvError checks that err is an *EnvError naming variable, or nil
// when variable is "", and says whether the test goes on (no error).
func wantEnvError(t *testing.T, err error, variable string) bool {
	t.Helper()
	var ee *EnvError
	switch {
	case variable == "" && err != nil:
		t.Fatal(err)
	case variable != "" && (!errors.As(err, &ee) || ee.Var != variable):
		t.Fatalf("error %v, want an *EnvError naming %s", err, variable)
	}
	return variable == ""
}

func equalHeader(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// A header value (an API key) never appears in an error or a log line.
func TestOTLPExporterHidesHeaderValues(t *testing.T) {
	_, err := New(otlptest.Env("OTEL_EXPORTER_OTLP_HEADERS", "api-key=s3cr3t%zz"), quietLog)
	if err == nil || strings.Contains(err.Error(), "s3cr3t") {
		t.Fatalf("error %v: want one that does not quote the value", err)
	}
	_, err = New(otlptest.Env("OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://user:s3cr3t@host"), quietLog)
	if err == nil || strings.Contains(err.Error(), "s3cr3t") {
		t.Fatalf("error %v: want one without the URL's password", err)
	}
}

// testSpans are spans with every kind of field an exporter must carry.
func testSpans(t *testing.T) []sdktrace.ReadOnlySpan {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	res := resource.NewWithAttributes("https://opentelemetry.io/schemas/1.43.0",
		attribute.String("service.name", "walrelay"), attribute.Int("pid", 7))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithResource(res))
	tr := tp.Tracer("scope.a", trace.WithInstrumentationVersion("1.2.3"), trace.WithSchemaURL("https://opentelemetry.io/schemas/1.43.0"),
		trace.WithInstrumentationAttributes(attribute.String("lib", "x")))
	parent := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: trace.FlagsSampled, Remote: true,
	})
	ts, _ := trace.ParseTraceState("vendor=abc")
	parent = parent.WithTraceState(ts)
	start := time.Unix(1_800_000_000, 123)
	_, s := tr.Start(trace.ContextWithRemoteSpanContext(context.Background(), parent), "send topic",
		trace.WithSpanKind(trace.SpanKindProducer), trace.WithTimestamp(start),
		trace.WithLinks(trace.Link{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9}, SpanID: trace.SpanID{8}}),
			Attributes: []attribute.KeyValue{attribute.Bool("linked", true)}}),
		trace.WithAttributes(
			attribute.String("s", "v"), attribute.Bool("b", true), attribute.Int64("i", -3), attribute.Float64("f", 1.5),
			attribute.StringSlice("ss", []string{"a", "b"}), attribute.Int64Slice("is", []int64{1, 2}),
			attribute.BoolSlice("bs", []bool{true, false}), attribute.Float64Slice("fs", []float64{0.5}),
		))
	s.AddEvent("ev", trace.WithTimestamp(start.Add(time.Millisecond)), trace.WithAttributes(attribute.String("k", "v")))
	s.SetStatus(codes.Error, "broker said no")
	s.End(trace.WithTimestamp(start.Add(time.Second)))
	_, root := tp.Tracer("scope.b").Start(context.Background(), "root", trace.WithTimestamp(start))
	root.SetStatus(codes.Ok, "")
	root.End(trace.WithTimestamp(start.Add(2 * time.Second)))
	return rec.Ended()
}

// sortedRequest orders a request's scopes by name, for comparisons.
func sortedRequest(m *coltracepb.ExportTraceServiceRequest) *coltracepb.ExportTraceServiceRequest {
	for _, rs := range m.ResourceSpans {
		slices.SortFunc(rs.ScopeSpans, func(a, b *tracepb.ScopeSpans) int { return strings.Compare(a.Scope.GetName(), b.Scope.GetName()) })
	}
	return m
}

// walrelay's exporter sends what OpenTelemetry's own OTLP/HTTP exporter
// sends for the same spans, field for field.
func TestOTLPExporterMatchesOpenTelemetrys(t *testing.T) {
	spans := testSpans(t)
	ours, theirs := otlptest.NewReceiver(t), otlptest.NewReceiver(t)
	e, err := New(otlptest.Env("OTEL_EXPORTER_OTLP_ENDPOINT", ours.URL), quietLog)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.ExportSpans(context.Background(), spans); err != nil {
		t.Fatal(err)
	}
	ref, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(theirs.URL+"/v1/traces"))
	if err != nil {
		t.Fatal(err)
	}
	if err := ref.ExportSpans(context.Background(), spans); err != nil {
		t.Fatal(err)
	}
	_ = ref.Shutdown(context.Background())
	if ours.Count() != 1 || theirs.Count() != 1 {
		t.Fatalf("requests: ours %d, OpenTelemetry's %d; want 1 each", ours.Count(), theirs.Count())
	}
	got, want := sortedRequest(ours.Requests()[0]), sortedRequest(theirs.Requests()[0])
	if !proto.Equal(got, want) {
		t.Errorf("walrelay's request differs from OpenTelemetry's:\nours:   %v\ntheirs: %v", got, want)
	}
	if n := len(got.GetResourceSpans()); n != 1 || len(got.ResourceSpans[0].ScopeSpans) != 2 {
		t.Errorf("request holds %d resources: %v", n, got)
	}
}

// Answers 429, 502, 503 and 504 are retried (after Retry-After when
// given), others are not; every failure ends in one logged warning, and a
// partial success too.
func TestOTLPExporterRetriesAndWarns(t *testing.T) {
	cases := []struct {
		name     string
		answers  []int // status of each request in turn; then 200
		retryHdr string
		timeout  string // OTEL_EXPORTER_OTLP_TIMEOUT; default 5000 (ms)
		requests int
		warning  string // "" : no warning
	}{
		{name: "accepted", answers: nil, requests: 1},
		{name: "unavailable then accepted", answers: []int{503, 502}, requests: 3},
		{name: "throttled with retry-after", answers: []int{429}, retryHdr: "1", requests: 2},
		{name: "refused for good", answers: []int{400, 400}, requests: 1, warning: "answered 400 Bad Request"},
		{name: "unavailable past the timeout", answers: []int{504, 504, 504, 504, 504, 504, 504, 504}, timeout: "1200", requests: 2, warning: "gave up after 2 attempts"},
		{name: "partial success", answers: []int{-1}, requests: 1, warning: "rejected 3 spans: span too old"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := otlptest.NewReceiver(t)
			var lastAt time.Time
			var gaps []time.Duration
			r.Answer = func(n int) (int, http.Header, []byte) {
				now := time.Now()
				if n > 1 {
					gaps = append(gaps, now.Sub(lastAt))
				}
				lastAt = now
				if n > len(tc.answers) {
					return 200, nil, nil
				}
				if tc.answers[n-1] == -1 {
					b, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{PartialSuccess: &coltracepb.ExportTracePartialSuccess{RejectedSpans: 3, ErrorMessage: "span too old"}})
					return 200, nil, b
				}
				h := http.Header{}
				if tc.retryHdr != "" {
					h.Set("Retry-After", tc.retryHdr)
				}
				return tc.answers[n-1], h, []byte("no")
			}
			var logs bytes.Buffer
			var mu sync.Mutex
			log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return logs.Write(p) }), nil))
			if tc.timeout == "" {
				tc.timeout = "5000"
			}
			e, err := New(otlptest.Env("OTEL_EXPORTER_OTLP_ENDPOINT", r.URL, "OTEL_EXPORTER_OTLP_TIMEOUT", tc.timeout,
				"OTEL_EXPORTER_OTLP_HEADERS", "api-key=s3cr3t"), log)
			if err != nil {
				t.Fatal(err)
			}
			if err := e.ExportSpans(context.Background(), testSpans(t)); err != nil {
				t.Fatalf("ExportSpans returned %v; failures are logged, not returned", err)
			}
			if got := r.Count(); got != tc.requests {
				t.Errorf("%d requests, want %d", got, tc.requests)
			}
			mu.Lock()
			out := logs.String()
			mu.Unlock()
			if tc.warning == "" && out != "" {
				t.Errorf("logged %q, want nothing", out)
			}
			if tc.warning != "" && (!strings.Contains(out, "level=WARN") || !strings.Contains(out, tc.warning) || strings.Count(out, "\n") != 1) {
				t.Errorf("logged %q, want one warning with %q", out, tc.warning)
			}
			if strings.Contains(out, "s3cr3t") {
				t.Errorf("the log shows a header value: %q", out)
			}
			if tc.retryHdr != "" && (len(gaps) != 1 || gaps[0] < 900*time.Millisecond) {
				t.Errorf("retried after %v, want Retry-After's 1s", gaps)
			}
			r.EveryRequestHas(t, "Api-Key", "s3cr3t")
		})
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestOTLPExporterGzip(t *testing.T) {
	r := otlptest.NewReceiver(t)
	e, err := New(otlptest.Env("OTEL_EXPORTER_OTLP_ENDPOINT", r.URL, "OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"), quietLog)
	if err != nil {
		t.Fatal(err)
	}
	_ = e.ExportSpans(context.Background(), testSpans(t))
	if r.Count() != 1 || r.Headers()[0].Get("Content-Encoding") != "gzip" || len(r.Spans()) != 2 {
		t.Fatalf("%d requests, %d spans: want one gzip request with 2 spans", r.Count(), len(r.Spans()))
	}
}
