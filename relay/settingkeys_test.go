package relay

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/walrelay/walrelay/sink"
)

// settingKeys returns the keys err carries, nil when it carries none.
func settingKeys(err error) []string {
	var sk interface{ SettingKeys() []string }
	if !errors.As(err, &sk) {
		return nil
	}
	return sk.SettingKeys()
}

func TestOptionErrorKeys(t *testing.T) {
	for _, tc := range []struct {
		option string
		want   []string
	}{
		{"MaxInFlight", []string{"max-in-flight"}},
		{"OnPoison", []string{"on-poison"}},
		{"StandbyRetryInterval, ShutdownTimeout, KafkaTimeout", []string{"standby-retry-interval", "shutdown-timeout", "kafka-timeout"}},
		{"HeartbeatInterval, SlotMetricsInterval", []string{"heartbeat-interval", "slot-metrics-interval"}},
		{"ExactlyOnce", []string{"transactional-id", "checkpoint-topic"}},
		{"ExactlyOnce.CommitInterval", []string{"txn-commit-interval"}},
		{"ExactlyOnce.MaxRecords", []string{"txn-max-records"}},
		{"Decoder", []string{"table"}},
	} {
		if got := settingKeys(&OptionError{Option: tc.option, Err: errors.New("bad")}); !slices.Equal(got, tc.want) {
			t.Errorf("%s: SettingKeys() = %q, want %q", tc.option, got, tc.want)
		}
	}
	if got := settingKeys(&sink.PoisonError{Err: errors.New("too large")}); !slices.Equal(got, []string{"on-poison"}) {
		t.Errorf("sink.PoisonError: SettingKeys() = %q", got)
	}
}

// TestRunUnreachableBrokersKeys: Run stops on brokers it cannot reach with
// the fix in words and the brokers' setting as data.
func TestRunUnreachableBrokersKeys(t *testing.T) {
	o := testOptions("postgres://x@127.0.0.1:1/db", []string{"127.0.0.1:1"}, "unreachable")
	o.KafkaTimeout = time.Second
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := Run(ctx, o)
	if err == nil || !strings.Contains(err.Error(), "check the Kafka brokers setting") || !slices.Equal(settingKeys(err), []string{"kafka-brokers"}) {
		t.Fatalf("Run = %v (keys %q), want the brokers to check and the key kafka-brokers", err, settingKeys(err))
	}
}
