// Package otlp is walrelay's OTLP/HTTP trace exporter (protobuf), which
// Run uses when the OTEL_* environment variables ask for traces and the
// embedding program brings no tracer provider of its own. It is a leaf: it
// imports OpenTelemetry's SDK and protocol types, internal/tlsfiles for its
// TLS and internal/retry for its waits, and nothing of walrelay's stages;
// otlp.go is its entry point (New, Exporter). Its encoding is checked
// against OpenTelemetry's own exporter (otlptracehttp) in the tests.
package otlp

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/walrelay/walrelay/internal/retry"
	"github.com/walrelay/walrelay/internal/tlsfiles"
)

// Exporter sends spans to an OTLP/HTTP receiver as protobuf: one POST
// of an ExportTraceServiceRequest per batch. It is walrelay's own rather
// than OpenTelemetry's otlptracehttp because that one links gRPC (its
// request type's package holds the gRPC service too): 12 MB more binary
// for a feature that is off by default, against under 1 MB for this one.
// TracesData, which it encodes, has the request's wire format.
//
// It reads the standard variables, the TRACES_ form before the general one:
// OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, _HEADERS, _TIMEOUT, _COMPRESSION
// (gzip or none), _CERTIFICATE, _CLIENT_CERTIFICATE, _CLIENT_KEY.
// Answers 429, 502, 503 and 504 and connection failures are retried with
// backoff (Retry-After honoured) within the timeout; then the batch is
// dropped and a warning logged (at most once a minute). Failures never
// reach OpenTelemetry's global error handler.
type Exporter struct {
	url      string
	header   http.Header
	timeout  time.Duration
	gzip     bool
	client   *http.Client
	log      *slog.Logger
	endpoint string // url without credentials, for messages

	mu      sync.Mutex
	warned  time.Time
	dropped int64 // spans dropped since the last warning
}

// OTLP/HTTP defaults (OpenTelemetry's exporter specification).
const (
	otlpDefaultEndpoint = "http://localhost:4318"
	otlpTracesPath      = "/v1/traces"
	otlpDefaultTimeout  = 10 * time.Second
)

// exportWarnEvery spaces the warnings about failed exports.
const exportWarnEvery = time.Minute

// EnvError is a variable's value New cannot use; Var names the variable (or
// two, "A, B").
type EnvError struct {
	Var string
	Err error
}

func (e *EnvError) Error() string { return e.Var + ": " + e.Err.Error() }
func (e *EnvError) Unwrap() error { return e.Err }

// New configures an exporter from getenv. A value it cannot use is an
// *EnvError naming the variable; header values are never quoted. It dials
// nothing before its first export.
func New(getenv func(string) string, log *slog.Logger) (*Exporter, error) {
	env := func(name string) (string, string) {
		if v := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_" + name)); v != "" {
			return v, "OTEL_EXPORTER_OTLP_TRACES_" + name
		}
		return strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_" + name)), "OTEL_EXPORTER_OTLP_" + name
	}
	bad := func(k string, err error) error { return &EnvError{Var: k, Err: err} }
	e := &Exporter{header: http.Header{}, timeout: otlpDefaultTimeout, log: log}

	// The signal's own endpoint is used as it is; the general one gets the
	// traces path.
	e.url = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
	urlVar := "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	if e.url == "" {
		base := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
		if base == "" {
			base = otlpDefaultEndpoint
		}
		e.url, urlVar = strings.TrimSuffix(base, "/")+otlpTracesPath, "OTEL_EXPORTER_OTLP_ENDPOINT"
	}
	u, err := url.Parse(e.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, bad(urlVar, fmt.Errorf("%q is not an http:// or https:// URL", redactURL(e.url)))
	}
	e.endpoint = redactURL(e.url)

	// Headers: the general ones, then the signal's (they win per key).
	for _, k := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		if err := parseOTLPHeaders(getenv(k), e.header); err != nil {
			return nil, bad(k, err)
		}
	}
	if v, k := env("TIMEOUT"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms <= 0 {
			return nil, bad(k, fmt.Errorf("%q is not a positive number of milliseconds", v))
		}
		e.timeout = time.Duration(ms) * time.Millisecond
	}
	switch v, k := env("COMPRESSION"); strings.ToLower(v) {
	case "", "none":
	case "gzip":
		e.gzip = true
	default:
		return nil, bad(k, fmt.Errorf("%q is not gzip or none", v))
	}
	tlsCfg, err := otlpTLS(env)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone() // HTTPS_PROXY and NO_PROXY apply
	tr.TLSClientConfig = tlsCfg
	e.client = &http.Client{Transport: tr}
	return e, nil
}

// parseOTLPHeaders adds the headers of s ("k1=v1,k2=v2", values
// percent-encoded) to h, replacing earlier values of the same key.
func parseOTLPHeaders(s string, h http.Header) error {
	for i, kv := range strings.Split(s, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return fmt.Errorf("entry %d is not key=value", i+1)
		}
		dv, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("the value of %q is not percent-encoded", k)
		}
		h.Set(k, dv)
	}
	return nil
}

// otlpTLS returns the TLS configuration the certificate variables ask for
// (nil: Go's defaults, the system's roots), built by tlsfiles.
func otlpTLS(env func(string) (string, string)) (*tls.Config, error) {
	ca, caVar := env("CERTIFICATE")
	cert, certVar := env("CLIENT_CERTIFICATE")
	key, keyVar := env("CLIENT_KEY")
	if ca == "" && cert == "" && key == "" {
		return nil, nil
	}
	pair := (cert == "") == (key == "")
	f := tlsfiles.Files{CAFile: ca}
	if pair {
		f.CertFile, f.KeyFile = cert, key
	}
	cfg, err := tlsfiles.Client(f)
	var fe *tlsfiles.Error
	switch {
	case errors.As(err, &fe) && fe.CA:
		return nil, &EnvError{Var: caVar, Err: err}
	case err != nil:
		return nil, &EnvError{Var: certVar + ", " + keyVar, Err: err}
	case !pair:
		return nil, &EnvError{Var: certVar + ", " + keyVar, Err: errors.New("set both or neither")}
	}
	return cfg, nil
}

// Endpoint is the URL spans go to, without credentials: for messages.
func (e *Exporter) Endpoint() string { return e.endpoint }

// redactURL drops the credentials from an endpoint URL.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	u.User = nil
	return u.String()
}

// ExportSpans sends spans, retrying within the timeout; it logs what it
// could not send and returns nil (the batch processor would hand an error
// to OpenTelemetry's global handler).
func (e *Exporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if len(spans) == 0 {
		return nil
	}
	body, err := proto.Marshal(&tracepb.TracesData{ResourceSpans: resourceSpans(spans)})
	if err != nil {
		e.warn(int64(len(spans)), fmt.Errorf("encode spans: %w", err))
		return nil
	}
	rejected, err := e.send(ctx, body)
	switch {
	case err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled):
		// The processor was shut down.
	case err != nil:
		e.warn(int64(len(spans)), err)
	case rejected != nil:
		e.warn(rejected.n, rejected)
	}
	return nil
}

// Shutdown closes idle connections; the batch processor sends nothing after.
func (e *Exporter) Shutdown(context.Context) error {
	e.client.CloseIdleConnections()
	return nil
}

func (e *Exporter) warn(spans int64, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.dropped += spans
	if now := time.Now(); now.Sub(e.warned) >= exportWarnEvery {
		e.log.Warn("tracing: spans could not be exported; dropped", "endpoint", e.endpoint, "spans", e.dropped,
			"error", err.Error(), "next_warning_in", exportWarnEvery.String())
		e.warned, e.dropped = now, 0
	}
}

// rejectedError is a receiver's partial success: n spans refused.
type rejectedError struct {
	n   int64
	msg string
}

func (e *rejectedError) Error() string {
	return fmt.Sprintf("the receiver rejected %d spans: %s", e.n, e.msg)
}

// send posts body until it is accepted, the timeout passes or an answer
// that must not be retried comes.
func (e *Exporter) send(ctx context.Context, body []byte) (*rejectedError, error) {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	encoding := ""
	if e.gzip {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		if _, err := zw.Write(body); err != nil {
			return nil, err
		}
		if err := zw.Close(); err != nil {
			return nil, err
		}
		body, encoding = b.Bytes(), "gzip"
	}
	wait := 500 * time.Millisecond
	for attempt := 1; ; attempt++ {
		rejected, retryAfter, err := e.post(ctx, body, encoding)
		if err == nil || retryAfter < 0 {
			return rejected, err
		}
		if retryAfter == 0 {
			retryAfter = retry.Jitter(wait)
			wait = min(2*wait, 5*time.Second)
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < retryAfter {
			return nil, fmt.Errorf("%w (gave up after %d attempts within %v)", err, attempt, e.timeout)
		}
		t := time.NewTimer(retryAfter)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (gave up after %d attempts within %v)", err, attempt, e.timeout)
		case <-t.C:
		}
	}
}

// post makes one attempt. retryAfter < 0: do not retry err; 0: retry after
// the backoff; > 0: retry after that (the receiver's Retry-After).
func (e *Exporter) post(ctx context.Context, body []byte, encoding string) (rejected *rejectedError, retryAfter time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		return nil, -1, err
	}
	for k, v := range e.header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	if encoding != "" {
		req.Header.Set("Content-Encoding", encoding)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("post to %s: %w", e.endpoint, err) // the client's errors hide URL passwords
	}
	defer resp.Body.Close()
	respBody, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		return partialSuccess(respBody), 0, nil
	case code == http.StatusTooManyRequests, code == http.StatusBadGateway,
		code == http.StatusServiceUnavailable, code == http.StatusGatewayTimeout:
		retryAfter = 0
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			retryAfter = time.Duration(s) * time.Second
		}
		return nil, retryAfter, fmt.Errorf("%s answered %s", e.endpoint, resp.Status)
	default:
		return nil, -1, fmt.Errorf("%s answered %s", e.endpoint, resp.Status)
	}
}

// partialSuccess reads an ExportTraceServiceResponse's partial_success
// (field 1: rejected_spans = 1, error_message = 2); nil when every span was
// accepted or the answer cannot be read (receivers may answer empty).
func partialSuccess(b []byte) *rejectedError {
	var r rejectedError
	walk := func(b []byte, field func(num protowire.Number, typ protowire.Type, v []byte, x uint64)) {
		for len(b) > 0 {
			num, typ, n := protowire.ConsumeTag(b)
			if n < 0 {
				return
			}
			b = b[n:]
			var v []byte
			var x uint64
			switch typ {
			case protowire.VarintType:
				x, n = protowire.ConsumeVarint(b)
			case protowire.BytesType:
				v, n = protowire.ConsumeBytes(b)
			default:
				n = protowire.ConsumeFieldValue(num, typ, b)
			}
			if n < 0 {
				return
			}
			b = b[n:]
			field(num, typ, v, x)
		}
	}
	walk(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) {
		if num != 1 || typ != protowire.BytesType {
			return
		}
		walk(v, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) {
			switch {
			case num == 1 && typ == protowire.VarintType:
				r.n = int64(x)
			case num == 2 && typ == protowire.BytesType:
				r.msg = string(v)
			}
		})
	})
	if r.n <= 0 {
		return nil // a message alone is a warning about accepted spans
	}
	return &r
}

// resourceSpans groups spans by resource and instrumentation scope, in the
// order they first appear.
func resourceSpans(spans []sdktrace.ReadOnlySpan) []*tracepb.ResourceSpans {
	type scopeKey struct {
		res                      *resource.Resource
		name, version, schemaURL string
	}
	var out []*tracepb.ResourceSpans
	byRes := map[*resource.Resource]*tracepb.ResourceSpans{}
	byScope := map[scopeKey]*tracepb.ScopeSpans{}
	for _, s := range spans {
		res := s.Resource()
		rs := byRes[res]
		if rs == nil {
			rs = &tracepb.ResourceSpans{Resource: &resourcepb.Resource{Attributes: keyValues(res.Attributes())}, SchemaUrl: res.SchemaURL()}
			byRes[res] = rs
			out = append(out, rs)
		}
		is := s.InstrumentationScope()
		k := scopeKey{res, is.Name, is.Version, is.SchemaURL}
		ss := byScope[k]
		if ss == nil {
			ss = &tracepb.ScopeSpans{SchemaUrl: is.SchemaURL,
				Scope: &commonpb.InstrumentationScope{Name: is.Name, Version: is.Version, Attributes: keyValues(is.Attributes.ToSlice())}}
			byScope[k] = ss
			rs.ScopeSpans = append(rs.ScopeSpans, ss)
		}
		ss.Spans = append(ss.Spans, spanProto(s))
	}
	return out
}

// spanProto is s in OTLP's form.
func spanProto(s sdktrace.ReadOnlySpan) *tracepb.Span {
	sc, parent := s.SpanContext(), s.Parent()
	tid, sid := sc.TraceID(), sc.SpanID()
	p := &tracepb.Span{
		TraceId:                tid[:],
		SpanId:                 sid[:],
		TraceState:             sc.TraceState().String(),
		Flags:                  spanFlags(sc.TraceFlags(), parent.IsRemote()),
		Name:                   s.Name(),
		Kind:                   tracepb.Span_SpanKind(s.SpanKind()), // the enums agree: unspecified 0 ... consumer 5
		StartTimeUnixNano:      unixNano(s.StartTime()),
		EndTimeUnixNano:        unixNano(s.EndTime()),
		Attributes:             keyValues(s.Attributes()),
		DroppedAttributesCount: count(s.DroppedAttributes()),
		DroppedEventsCount:     count(s.DroppedEvents()),
		DroppedLinksCount:      count(s.DroppedLinks()),
	}
	if parent.SpanID().IsValid() {
		psid := parent.SpanID()
		p.ParentSpanId = psid[:]
	}
	if st := s.Status(); st.Code != codes.Unset {
		p.Status = &tracepb.Status{Message: st.Description, Code: tracepb.Status_STATUS_CODE_OK}
		if st.Code == codes.Error {
			p.Status.Code = tracepb.Status_STATUS_CODE_ERROR
		}
	}
	for _, ev := range s.Events() {
		p.Events = append(p.Events, &tracepb.Span_Event{TimeUnixNano: unixNano(ev.Time), Name: ev.Name,
			Attributes: keyValues(ev.Attributes), DroppedAttributesCount: count(ev.DroppedAttributeCount)})
	}
	for _, l := range s.Links() {
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		p.Links = append(p.Links, &tracepb.Span_Link{TraceId: ltid[:], SpanId: lsid[:], TraceState: l.SpanContext.TraceState().String(),
			Attributes: keyValues(l.Attributes), DroppedAttributesCount: count(l.DroppedAttributeCount),
			Flags: spanFlags(l.SpanContext.TraceFlags(), l.SpanContext.IsRemote())})
	}
	return p
}

// spanFlags: the W3C trace flags, and whether the parent (or linked span)
// is remote, which the SDK always knows.
func spanFlags(tf trace.TraceFlags, remote bool) uint32 {
	f := uint32(tf) | uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK)
	if remote {
		f |= uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK)
	}
	return f
}

func unixNano(t time.Time) uint64 {
	if t.IsZero() || t.UnixNano() < 0 {
		return 0
	}
	return uint64(t.UnixNano())
}

func count(n int) uint32 { return uint32(min(max(n, 0), math.MaxUint32)) }

func keyValues(kvs []attribute.KeyValue) []*commonpb.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	out := make([]*commonpb.KeyValue, len(kvs))
	for i, kv := range kvs {
		out[i] = &commonpb.KeyValue{Key: string(kv.Key), Value: anyValue(kv.Value)}
	}
	return out
}

func anyValue(v attribute.Value) *commonpb.AnyValue {
	a := &commonpb.AnyValue{}
	switch v.Type() {
	case attribute.BOOL:
		a.Value = &commonpb.AnyValue_BoolValue{BoolValue: v.AsBool()}
	case attribute.INT64:
		a.Value = &commonpb.AnyValue_IntValue{IntValue: v.AsInt64()}
	case attribute.FLOAT64:
		a.Value = &commonpb.AnyValue_DoubleValue{DoubleValue: v.AsFloat64()}
	case attribute.STRING:
		a.Value = &commonpb.AnyValue_StringValue{StringValue: v.AsString()}
	case attribute.BYTESLICE:
		a.Value = &commonpb.AnyValue_BytesValue{BytesValue: v.AsByteSlice()}
	case attribute.BOOLSLICE:
		a.Value = arrayOf(v.AsBoolSlice(), attribute.BoolValue)
	case attribute.INT64SLICE:
		a.Value = arrayOf(v.AsInt64Slice(), attribute.Int64Value)
	case attribute.FLOAT64SLICE:
		a.Value = arrayOf(v.AsFloat64Slice(), attribute.Float64Value)
	case attribute.STRINGSLICE:
		a.Value = arrayOf(v.AsStringSlice(), attribute.StringValue)
	case attribute.SLICE:
		a.Value = arrayOf(v.AsSlice(), func(v attribute.Value) attribute.Value { return v })
	case attribute.MAP:
		a.Value = &commonpb.AnyValue_KvlistValue{KvlistValue: &commonpb.KeyValueList{Values: keyValues(v.AsMap())}}
	}
	return a
}

func arrayOf[T any](vs []T, value func(T) attribute.Value) *commonpb.AnyValue_ArrayValue {
	arr := &commonpb.ArrayValue{Values: make([]*commonpb.AnyValue, len(vs))}
	for i, v := range vs {
		arr.Values[i] = anyValue(value(v))
	}
	return &commonpb.AnyValue_ArrayValue{ArrayValue: arr}
}
