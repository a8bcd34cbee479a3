package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
)

// TestRunTelemetrySettingsRefused: the telemetry the command attaches to the
// runtime refuses what it cannot honour before anything connects, naming
// the variable (OTEL_*) or the setting (metrics-addr), with the
// configuration's exit code.
func TestRunTelemetrySettingsRefused(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	base := []string{"run", "--postgres-dsn", "postgres://u@127.0.0.1:1/db?connect_timeout=1", "--kafka-brokers", "127.0.0.1:1"}
	for _, tc := range []struct {
		name    string
		otelEnv []string
		args    []string
		want    string
	}{
		{"unknown sampler", []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1", "OTEL_TRACES_SAMPLER", "xray"}, nil, "OTEL_TRACES_SAMPLER"},
		{"grpc", []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}, nil, "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{"metrics address taken", nil, []string{"--metrics-addr", taken.Addr().String()}, "--metrics-addr / WALRELAY_METRICS_ADDR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
				"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_TRACES_SAMPLER"} {
				t.Setenv(k, "")
			}
			for i := 0; i+1 < len(tc.otelEnv); i += 2 {
				t.Setenv(tc.otelEnv[i], tc.otelEnv[i+1])
			}
			var out, errOut bytes.Buffer
			code := Main(context.Background(), append(append([]string{}, base...), tc.args...), envMap(nil), &out, &errOut)
			if code != ExitConfig {
				t.Fatalf("exit %d, want %d; stderr %s", code, ExitConfig, errOut.String())
			}
			if !strings.Contains(errOut.String(), tc.want) {
				t.Errorf("stderr does not name %q:\n%s", tc.want, errOut.String())
			}
		})
	}
}
