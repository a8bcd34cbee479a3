package relayotel

import (
	"errors"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/walrelay/walrelay/internal/otlp/otlptest"
)

func TestParseTracingEnv(t *testing.T) {
	cases := []struct {
		name    string
		env     []string
		enabled bool
		sampler string
		ratio   float64
		errVar  string
	}{
		{name: "nothing set: off"},
		{name: "service name alone: off", env: []string{"OTEL_SERVICE_NAME", "x"}},
		{name: "general endpoint: on, walrelay's sampler", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"},
			enabled: true, sampler: "parentbased_always_off", ratio: 1},
		{name: "traces endpoint: on", env: []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318/v1/traces"},
			enabled: true, sampler: "parentbased_always_off", ratio: 1},
		{name: "exporter otlp without endpoint: on (localhost)", env: []string{"OTEL_TRACES_EXPORTER", "otlp"},
			enabled: true, sampler: "parentbased_always_off", ratio: 1},
		{name: "SDK disabled wins", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318", "OTEL_SDK_DISABLED", "TRUE"}},
		{name: "exporter none wins", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318", "OTEL_TRACES_EXPORTER", "none"}},
		{name: "ratio sampler", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c", "OTEL_TRACES_SAMPLER", "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG", "0.25"},
			enabled: true, sampler: "parentbased_traceidratio", ratio: 0.25},
		{name: "http/protobuf named", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"},
			enabled: true, sampler: "parentbased_always_off", ratio: 1},
		{name: "grpc refused", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}, errVar: "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{name: "traces protocol checked first", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c", "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf",
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"}, errVar: "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"},
		{name: "unknown sampler", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c", "OTEL_TRACES_SAMPLER", "xray"}, errVar: "OTEL_TRACES_SAMPLER"},
		{name: "bad ratio", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c", "OTEL_TRACES_SAMPLER", "traceidratio", "OTEL_TRACES_SAMPLER_ARG", "2"}, errVar: "OTEL_TRACES_SAMPLER_ARG"},
		{name: "another exporter", env: []string{"OTEL_TRACES_EXPORTER", "zipkin"}, errVar: "OTEL_TRACES_EXPORTER"},
		{name: "settings of tracing that is off are not checked", env: []string{"OTEL_TRACES_SAMPLER", "xray", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseTracingEnv(otlptest.Env(tc.env...))
			var ee *EnvError
			if tc.errVar != "" {
				if !errors.As(err, &ee) || ee.Var != tc.errVar {
					t.Fatalf("error %v, want an *EnvError naming %s", err, tc.errVar)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Enabled != tc.enabled || (tc.enabled && (c.Sampler != tc.sampler || c.Ratio != tc.ratio)) {
				t.Errorf("got %+v, want enabled %v sampler %q ratio %v", c, tc.enabled, tc.sampler, tc.ratio)
			}
			if !c.Enabled && c.Off == "" {
				t.Error("off without a reason")
			}
		})
	}
}

// The samplers the names make decide as their names say.
func TestTracingSamplers(t *testing.T) {
	root := sdktrace.SamplingParameters{TraceID: [16]byte{1}, Name: "send"}
	for name, sampled := range map[string]bool{
		"always_on": true, "always_off": false, "parentbased_always_on": true, "parentbased_always_off": false,
		"traceidratio": true, "parentbased_traceidratio": true,
	} {
		s := TracingConfig{Sampler: name, Ratio: 1}.sampler()
		if got := s.ShouldSample(root).Decision == sdktrace.RecordAndSample; got != sampled {
			t.Errorf("%s samples a root: %v, want %v", name, got, sampled)
		}
		if strings.HasPrefix(name, "parentbased_") != strings.HasPrefix(s.Description(), "ParentBased") {
			t.Errorf("%s is %s", name, s.Description())
		}
	}
	if (TracingConfig{Sampler: "traceidratio", Ratio: 0}).sampler().ShouldSample(root).Decision != sdktrace.Drop {
		t.Error("ratio 0 samples")
	}
}
