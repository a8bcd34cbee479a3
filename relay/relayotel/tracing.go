// Package relayotel builds the OpenTelemetry tracer provider of walrelay's
// runtime from OpenTelemetry's standard environment variables, attached from
// outside it (relay.Options.TracerProvider) as franz-go's kotel is to its
// client; the spans themselves are the sink's (sink/tracing.go). The walrelay
// command attaches it; relay.Run traces nothing without a provider.
//
// Entry points: tracing.go (Start, ParseTracingEnv).
package relayotel

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/walrelay/walrelay/internal/otlp"
)

// Tracing is configured by OpenTelemetry's standard environment variables
// only, so the command needs no flag for it. It is off unless an OTLP
// endpoint is set.

// EnvError is a variable whose value walrelay cannot honour (Var names it).
type EnvError = otlp.EnvError

// DefaultSampler is the sampler when OTEL_TRACES_SAMPLER is not set. It
// differs from OpenTelemetry's parentbased_always_on on purpose: walrelay
// does not start traces, it continues the ones the rows carry; a root span
// for every event without a trace context would be a trace per event at
// full throughput. Set OTEL_TRACES_SAMPLER=parentbased_traceidratio (and
// OTEL_TRACES_SAMPLER_ARG) or parentbased_always_on for root spans.
const DefaultSampler = "parentbased_always_off"

// tracingShutdownTimeout bounds the export of the last spans at the stop.
const tracingShutdownTimeout = 5 * time.Second

// TracingConfig is what the OTEL_* environment variables ask of tracing,
// as ParseTracingEnv read them.
type TracingConfig struct {
	// Enabled: an OTLP endpoint is set (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
	// or OTEL_EXPORTER_OTLP_ENDPOINT, or OTEL_TRACES_EXPORTER=otlp for the
	// default http://localhost:4318), OTEL_TRACES_EXPORTER is not "none" and
	// OTEL_SDK_DISABLED is not "true". Off says why not.
	Enabled bool
	Off     string
	// Sampler is OTEL_TRACES_SAMPLER, DefaultSampler when unset; Ratio is
	// the ratio samplers' OTEL_TRACES_SAMPLER_ARG (default 1).
	Sampler string
	Ratio   float64
}

// ParseTracingEnv reads the OTEL_* variables that decide whether and how
// walrelay traces from getenv (os.Getenv for the command). The exporter's own
// variables (endpoint, headers, timeout, compression, certificates) are
// read when it is made (see internal/otlp); the resource's
// (OTEL_SERVICE_NAME, default "walrelay", and OTEL_RESOURCE_ATTRIBUTES) and
// the batch processor's (OTEL_BSP_*) by OpenTelemetry's SDK. A value
// walrelay cannot honour is an *EnvError naming the variable.
func ParseTracingEnv(getenv func(string) string) (TracingConfig, error) {
	env := func(k string) string { return strings.TrimSpace(getenv(k)) }
	bad := func(k, format string, a ...any) error {
		return &EnvError{Var: k, Err: fmt.Errorf(format, a...)}
	}
	var c TracingConfig
	exporter := strings.ToLower(env("OTEL_TRACES_EXPORTER"))
	switch {
	case strings.EqualFold(env("OTEL_SDK_DISABLED"), "true"):
		c.Off = "OTEL_SDK_DISABLED=true"
	case exporter == "none":
		c.Off = "OTEL_TRACES_EXPORTER=none"
	case exporter != "" && exporter != "otlp":
		return c, bad("OTEL_TRACES_EXPORTER", "%q is not supported: walrelay exports traces over OTLP only (otlp or none)", exporter)
	case exporter == "" && env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" && env("OTEL_EXPORTER_OTLP_ENDPOINT") == "":
		c.Off = "no OTLP endpoint set (OTEL_EXPORTER_OTLP_ENDPOINT)"
	default:
		c.Enabled = true
	}
	if !c.Enabled {
		return c, nil
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := env(k); p != "" {
			if p != "http/protobuf" {
				return c, bad(k, "%q is not supported: walrelay exports over OTLP/HTTP with protobuf (http/protobuf, the default; port 4318 of a collector)", p)
			}
			break
		}
	}
	c.Sampler = strings.ToLower(env("OTEL_TRACES_SAMPLER"))
	if c.Sampler == "" {
		c.Sampler = DefaultSampler
	}
	c.Ratio = 1
	switch c.Sampler {
	case "always_on", "always_off", "parentbased_always_on", "parentbased_always_off":
	case "traceidratio", "parentbased_traceidratio":
		if arg := env("OTEL_TRACES_SAMPLER_ARG"); arg != "" {
			r, err := strconv.ParseFloat(arg, 64)
			if err != nil || r < 0 || r > 1 {
				return c, bad("OTEL_TRACES_SAMPLER_ARG", "%q is not a ratio between 0 and 1", arg)
			}
			c.Ratio = r
		}
	default:
		return c, bad("OTEL_TRACES_SAMPLER", "%q is not supported: use always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio", c.Sampler)
	}
	return c, nil
}

// sampler returns the sampler c names.
func (c TracingConfig) sampler() sdktrace.Sampler {
	var s sdktrace.Sampler
	switch strings.TrimPrefix(c.Sampler, "parentbased_") {
	case "always_on":
		s = sdktrace.AlwaysSample()
	case "always_off":
		s = sdktrace.NeverSample()
	default:
		s = sdktrace.TraceIDRatioBased(c.Ratio)
	}
	if strings.HasPrefix(c.Sampler, "parentbased_") {
		return sdktrace.ParentBased(s)
	}
	return s
}

// Start returns a provider built from the environment read through getenv
// (ParseTracingEnv) when that enables tracing, else nil (no spans), and the
// function that exports the spans still queued (within 5 s) and stops it:
// call it after relay.Run returned, when the sink has ended the spans of
// failed records. version is the service.version attribute. The batch
// processor's goroutine runs until stop; the exporter dials nothing before
// its first export, and a receiver that cannot be reached never stops
// walrelay. A variable it cannot honour is an *EnvError.
func Start(ctx context.Context, getenv func(string) string, version string, log *slog.Logger) (tp trace.TracerProvider, stop func(), err error) {
	c, err := ParseTracingEnv(getenv)
	if err != nil {
		return nil, nil, err
	}
	if !c.Enabled {
		log.Debug("tracing off", "why", c.Off)
		return nil, func() {}, nil
	}
	exp, err := otlp.New(getenv, log)
	if err != nil {
		return nil, nil, err // an *EnvError, or an *otlp.EnvError naming the variable
	}
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName("walrelay"), semconv.ServiceVersion(version)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil {
		// A malformed OTEL_RESOURCE_ATTRIBUTES entry: the others are kept.
		log.Warn("tracing: some resource attributes were ignored", "error", err.Error())
	}
	sdk := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(c.sampler()),
	)
	log.Info("tracing on: a span per event, exported over OTLP/HTTP", "endpoint", exp.Endpoint(), "sampler", c.Sampler)
	return sdk, func() {
		sctx, cancel := context.WithTimeout(context.Background(), tracingShutdownTimeout)
		defer cancel()
		if err := sdk.Shutdown(sctx); err != nil {
			log.Warn("tracing: the last spans were not all exported", "error", err.Error())
		}
	}, nil
}
