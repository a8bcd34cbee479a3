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

// fieldsOf returns the fields err names, nil when it names none.
func fieldsOf(err error) []string {
	var f interface{ Fields() []string }
	if !errors.As(err, &f) {
		return nil
	}
	return f.Fields()
}

func TestOptionErrorFields(t *testing.T) {
	for _, tc := range []struct {
		option string
		want   []string
	}{
		{"MaxInFlight", []string{"relay.Options.MaxInFlight"}},
		{"StandbyRetryInterval, ShutdownTimeout, KafkaTimeout", []string{"relay.Options.StandbyRetryInterval", "relay.Options.ShutdownTimeout", "relay.Options.KafkaTimeout"}},
		{"ExactlyOnce.MaxRecords", []string{"relay.Options.ExactlyOnce.MaxRecords"}},
	} {
		if got := fieldsOf(&OptionError{Option: tc.option, Err: errors.New("bad")}); !slices.Equal(got, tc.want) {
			t.Errorf("%s: Fields() = %q, want %q", tc.option, got, tc.want)
		}
	}
	if got := fieldsOf(&sink.PoisonError{Err: errors.New("too large")}); !slices.Equal(got, []string{"relay.Options.OnPoison"}) {
		t.Errorf("sink.PoisonError: Fields() = %q", got)
	}
}

// TestRunUnreachableBrokersFields: Run stops on brokers it cannot reach with
// the fix in words and the brokers' field as data.
func TestRunUnreachableBrokersFields(t *testing.T) {
	o := testOptions("postgres://x@127.0.0.1:1/db", []string{"127.0.0.1:1"}, "unreachable")
	o.KafkaTimeout = time.Second
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := Run(ctx, o)
	if err == nil || !strings.Contains(err.Error(), "check the Kafka brokers setting") || !slices.Equal(fieldsOf(err), []string{"sink.Config.Brokers"}) {
		t.Fatalf("Run = %v (fields %q), want the brokers to check and the field sink.Config.Brokers", err, fieldsOf(err))
	}
}
