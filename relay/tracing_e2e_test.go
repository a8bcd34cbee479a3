package relay

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walrelay/walrelay/internal/otlp/otlptest"
	"github.com/walrelay/walrelay/internal/testwait"
	"github.com/walrelay/walrelay/relay/relayotel"
	"github.com/walrelay/walrelay/sink"
	"github.com/walrelay/walrelay/test/relaytest"
)

// envTracing attaches the tracer provider relayotel builds from the
// environment, as the walrelay command does; it stops when the test ends.
func envTracing(t *testing.T) func(*Options) {
	return func(o *Options) {
		tp, stop, err := relayotel.Start(context.Background(), os.Getenv, "test", o.Logger)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		o.TracerProvider = tp
	}
}

// otelEnv clears the OTEL_* variables walrelay reads and sets kv.
func otelEnv(t *testing.T, kv ...string) {
	t.Helper()
	for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
		"OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_EXPORTER_OTLP_COMPRESSION",
		"OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_CERTIFICATE"} {
		t.Setenv(k, "")
	}
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50") // ms: export within the test's patience
	for i := 0; i+1 < len(kv); i += 2 {
		t.Setenv(kv[i], kv[i+1])
	}
}

const (
	appTraceID    = "4bf92f3577b34da6a3ce929d0e0e4736"
	appSpanID     = "00f067aa0ba902b7"
	appTracestate = "congo=t61rcWkgMzE"
)

// insertWithHeaders commits one outbox row per headers value (a JSON
// object) in one transaction, aggregate ids agg-0, agg-1, ...
func (f *relayFixture) insertWithHeaders(t *testing.T, headers ...string) {
	t.Helper()
	tx, err := f.PG.Conn.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range headers {
		if _, err := tx.Exec(context.Background(), fmt.Sprintf(
			"INSERT INTO public.%s_outbox (aggregate_type, aggregate_id, event_type, payload, headers) VALUES ('order', $1, 'created', '{}', $2::jsonb)", f.Name),
			fmt.Sprintf("agg-%d", i), h); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func byKey(recs []*kgo.Record) map[string]*kgo.Record {
	m := map[string]*kgo.Record{}
	for _, r := range recs {
		m[string(r.Key)] = r
	}
	return m
}

// End to end with an OTLP/HTTP receiver in the test: a row's trace
// continues in walrelay's span, and the record points at that span.
func TestTracingEndToEnd(t *testing.T) {
	cases := []struct {
		name string
		env  []string
		mod  func(*Options)
		// rootSampled: the row without a trace context gets a root span.
		rootSampled bool
		service     string
	}{
		{name: "default sampler", service: "walrelay"},
		{name: "roots sampled, service named", env: []string{"OTEL_TRACES_SAMPLER", "parentbased_always_on", "OTEL_SERVICE_NAME", "orders-relay"},
			rootSampled: true, service: "orders-relay"},
		{name: "exactly-once", service: "walrelay", mod: func(o *Options) {
			o.ExactlyOnce = &ExactlyOnce{TransactionalID: "walrelay-trace-eos", CheckpointTopic: "trace_eos.checkpoints",
				CheckpointReplicationFactor: -1, CommitInterval: 100 * time.Millisecond, MaxRecords: 100}
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rcv := otlptest.NewReceiver(t)
			otelEnv(t, append([]string{"OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL, "OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20s3cr3t"}, tc.env...)...)
			cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
			if err != nil {
				t.Fatal(err)
			}
			defer cluster.Close()
			mods := []func(*Options){envTracing(t)}
			if tc.mod != nil {
				mods = append(mods, tc.mod)
			}
			f := startRelay(t, fmt.Sprintf("trace_e2e_%d", i), cluster, mods...)
			traceparent := "00-" + appTraceID + "-" + appSpanID + "-01"
			f.insertWithHeaders(t, fmt.Sprintf(`{"traceparent": %q, "tracestate": %q, "tenant": "acme"}`, traceparent, appTracestate), `{"tenant": "acme"}`)
			recs := byKey(relaytest.ConsumeAll(t, cluster.ListenAddrs(), f.Name+".order", 2))
			traced, plain := recs["agg-0"], recs["agg-1"]

			want := 1
			if tc.rootSampled {
				want = 2
			}
			testwait.Eventually(t, 10*time.Second, "the spans to be exported", func() bool { return len(rcv.Spans()) >= want })
			f.Stop() // flushes the rest: nothing more may come
			spans := rcv.Spans()
			if len(spans) != want {
				t.Fatalf("%d spans exported, want %d", len(spans), want)
			}
			var sp, root otlptest.Span
			for _, s := range spans {
				if hex.EncodeToString(s.TraceId) == appTraceID {
					sp = s
				} else {
					root = s
				}
			}
			if sp.Span == nil {
				t.Fatalf("no span in the row's trace %s: %v", appTraceID, spans)
			}
			if got := hex.EncodeToString(sp.ParentSpanId); got != appSpanID {
				t.Errorf("parent span %s, want the row's %s", got, appSpanID)
			}
			if got := relaytest.HeaderValue(traced, "traceparent"); got != fmt.Sprintf("00-%s-%x-01", appTraceID, sp.SpanId) {
				t.Errorf("record traceparent %q, want walrelay's span %x in the row's trace", got, sp.SpanId)
			}
			if got := relaytest.HeaderValue(traced, "tracestate"); got != appTracestate || sp.TraceState != appTracestate {
				t.Errorf("tracestate: record %q, span %q; want the row's %q", got, sp.TraceState, appTracestate)
			}
			if relaytest.HeaderValue(traced, "tenant") != "acme" {
				t.Error("the row's other header was lost")
			}
			start := time.Unix(0, int64(sp.StartTimeUnixNano))
			if !start.Truncate(time.Millisecond).Equal(traced.Timestamp) {
				t.Errorf("span starts %v, want the commit time (the record's timestamp %v)", start, traced.Timestamp)
			}
			if sp.EndTimeUnixNano < sp.StartTimeUnixNano {
				t.Errorf("span ends before it starts")
			}
			for k, v := range map[string]string{
				"messaging.system": "kafka", "messaging.operation.type": "send", "messaging.destination.name": f.Name + ".order",
				"messaging.kafka.message.key": "agg-0", "messaging.message.id": relaytest.HeaderValue(traced, "id"),
				"walrelay.table": "public." + f.Name + "_outbox", "walrelay.lsn": relaytest.HeaderValue(traced, "walrelay.lsn"),
				"messaging.destination.partition.id": fmt.Sprint(traced.Partition), "messaging.kafka.offset": fmt.Sprint(traced.Offset),
			} {
				if got := sp.Attr(k); got != v {
					t.Errorf("attribute %s = %q, want %q", k, got, v)
				}
			}
			if sp.Resource["service.name"] != tc.service || sp.Resource["service.version"] == "" || sp.Scope != sink.TracerName {
				t.Errorf("resource %v scope %q, want service.name %q with a version, scope %s", sp.Resource, sp.Scope, tc.service, sink.TracerName)
			}
			if tc.rootSampled {
				if len(root.ParentSpanId) != 0 || relaytest.HeaderValue(plain, "traceparent") != fmt.Sprintf("00-%x-%x-01", root.TraceId, root.SpanId) {
					t.Errorf("row without trace context: span parent %x, record traceparent %q; want a root span the record points at",
						root.ParentSpanId, relaytest.HeaderValue(plain, "traceparent"))
				}
			} else if got := relaytest.HeaderValue(plain, "traceparent"); got != "" {
				t.Errorf("row without trace context got traceparent %q, want none (roots are not sampled)", got)
			}
			rcv.EveryRequestHas(t, "Authorization", "Bearer s3cr3t") // from OTEL_EXPORTER_OTLP_HEADERS
			logs := f.Logs.String()
			if !strings.Contains(logs, "tracing on") || strings.Contains(logs, "s3cr3t") {
				t.Errorf("log: want a 'tracing on' line and no header value:\n%s", logs)
			}
		})
	}
}

// With tracing off, no span is made and the record's trace headers are the
// row's, also when an endpoint is set (OTEL_SDK_DISABLED).
func TestTracingOffEndToEnd(t *testing.T) {
	for i, env := range [][]string{
		nil,
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "", "OTEL_SDK_DISABLED", "true"}, // the endpoint is set below
	} {
		rcv := otlptest.NewReceiver(t)
		if env != nil {
			env[1] = rcv.URL
		}
		otelEnv(t, env...)
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
		if err != nil {
			t.Fatal(err)
		}
		f := startRelay(t, fmt.Sprintf("trace_off_%d", i), cluster, envTracing(t))
		traceparent := "00-" + appTraceID + "-" + appSpanID + "-01"
		f.insertWithHeaders(t, fmt.Sprintf(`{"traceparent": %q, "tracestate": %q}`, traceparent, appTracestate))
		rec := relaytest.ConsumeAll(t, cluster.ListenAddrs(), f.Name+".order", 1)[0]
		f.Stop()
		cluster.Close()
		if got := relaytest.HeaderValue(rec, "traceparent"); got != traceparent || relaytest.HeaderValue(rec, "tracestate") != appTracestate {
			t.Errorf("env %q: record traceparent %q tracestate %q, want the row's", env, got, relaytest.HeaderValue(rec, "tracestate"))
		}
		if n := rcv.Count(); n != 0 {
			t.Errorf("env %q: %d exports, want none", env, n)
		}
		if strings.Contains(f.Logs.String(), "tracing on") {
			t.Errorf("env %q: the log says tracing is on", env)
		}
	}
}
