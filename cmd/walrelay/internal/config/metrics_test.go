package config

import (
	"net"
	"strconv"
	"testing"
)

// TestMetricsAddrDefault: by default /metrics listens on loopback only (a container or a
// host that Prometheus scrapes from elsewhere sets metrics-addr to all interfaces
// explicitly, as deploy/ does), on a port outside 9100-9999, the range of Prometheus
// exporters' default ports (postgres_exporter, which often runs beside walrelay, has 9187).
func TestMetricsAddrDefault(t *testing.T) {
	host, port, err := net.SplitHostPort(Defaults().MetricsAddr)
	if err != nil {
		t.Fatal(err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		t.Errorf("default metrics-addr %q binds %q, want loopback only", Defaults().MetricsAddr, host)
	}
	if n, _ := strconv.Atoi(port); n >= 9100 && n <= 9999 {
		t.Errorf("default metrics port %d is in the exporters' range 9100-9999", n)
	}
}
