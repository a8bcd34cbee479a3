package relay

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/walrelay/walrelay/internal/testwait"
	"github.com/walrelay/walrelay/relay/relayprom"
	"github.com/walrelay/walrelay/test/relaytest"
)

// walrelay's Prometheus metrics attach as an Observer.
var _ Observer = (*relayprom.Metrics)(nil)

// TestRunWithoutTelemetry: Run with no Observer and no tracer provider (the
// polls that only feed metrics configured all the same) delivers every
// event and confirms the slot past them.
func TestRunWithoutTelemetry(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	f := startRelay(t, "no_telemetry", cluster, func(o *Options) {
		o.HeartbeatInterval = 100 * time.Millisecond
		o.SlotMetricsInterval = 50 * time.Millisecond
		o.OutboxSpan = &OutboxSpanOptions{Interval: 50 * time.Millisecond}
		if o.Observer != nil || o.TracerProvider != nil || len(o.SinkOptions) != 0 {
			t.Fatal("the test options attach telemetry")
		}
	})
	for i := range 3 {
		f.InsertTxn(t, "agg-"+string(rune('a'+i)), 2)
	}
	end := f.PG.InsertLSN()
	recs := relaytest.ConsumeAll(t, cluster.ListenAddrs(), f.Name+".order", 6)
	if len(recs) != 6 {
		t.Fatalf("%d records, want 6", len(recs))
	}
	testwait.Eventually(t, 15*time.Second, "the slot to be confirmed past the events", func() bool { return f.PG.Confirmed(f.Name) >= end })
	f.Stop()
}

// TestRuntimeImportsNoTelemetry: the runtime builds without Prometheus,
// OpenTelemetry's SDK and the OTLP exporter; they attach from relayprom and
// relayotel (the trace API the sink's spans use is all it knows of tracing).
func TestRuntimeImportsNoTelemetry(t *testing.T) {
	out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, bad := range []string{"github.com/prometheus/", "github.com/twmb/franz-go/plugin/kprom", "github.com/twmb/franz-go/plugin/kotel", "go.opentelemetry.io/otel/sdk",
			"github.com/walrelay/walrelay/internal/otlp", "github.com/walrelay/walrelay/relay/"} {
			if strings.HasPrefix(dep, bad) {
				t.Errorf("relay depends on %s", dep)
			}
		}
	}
}
