package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/walrelay/walrelay/cmd/walrelay/internal/config"
	"github.com/walrelay/walrelay/relay"
	"github.com/walrelay/walrelay/relay/relayotel"
	"github.com/walrelay/walrelay/relay/relayprom"
)

// attachTelemetry attaches walrelay's telemetry to the runtime's options:
// the Prometheus metrics (relayprom, also franz-go's client metrics) served
// with /healthz and /readyz on the metrics address, and the tracing the
// OTEL_* environment variables ask for (relayotel). stop ends them; call it
// after relay.Run returned (the last spans are exported then).
func attachTelemetry(ctx context.Context, cfg config.Config, opts *relay.Options, log *slog.Logger) (stop func(), err error) {
	version, revision := relay.BuildVersion()
	tp, stopTracing, err := relayotel.Start(ctx, os.Getenv, version, log)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	m := relayprom.New(reg, opts.Replication.Slot, relayprom.Build{Version: version, Revision: revision})
	stopHTTP, err := relayprom.Serve(cfg.MetricsAddr, reg, m, cfg.PProf, log)
	if err != nil {
		stopTracing()
		return nil, config.MetricsAddrError(err)
	}
	opts.Observer = m
	opts.TracerProvider = tp
	opts.SinkOptions = append(opts.SinkOptions, relayprom.KafkaHooks(reg))
	return func() {
		stopHTTP()
		stopTracing()
	}, nil
}
