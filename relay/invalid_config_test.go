package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/replication"
)

// countingListener accepts TCP connections on loopback, counts them and
// closes them at once.
type countingListener struct {
	l net.Listener
	n atomic.Int32
}

func newCountingListener(t *testing.T) *countingListener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &countingListener{l: l}
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			c.n.Add(1)
			_ = conn.Close()
		}
	}()
	t.Cleanup(func() { _ = l.Close() })
	return c
}

// TestInvalidConfigFailsAtStart: options the decoder refuses (duplicate
// header columns) are refused by Run before any connection to Postgres or
// Kafka, as an *OptionError naming the Decoder; they never reach a
// replication session (where they used to fail in every session and be
// retried forever). The command refuses the same setting earlier still
// (config.TestInvalidConfigFailsAtLoad).
func TestInvalidConfigFailsAtStart(t *testing.T) {
	pg, kafka := newCountingListener(t), newCountingListener(t)
	dsn := fmt.Sprintf("postgres://walrelay@%s/app?sslmode=disable&connect_timeout=2", pg.l.Addr())
	opts := testOptions(dsn, []string{kafka.l.Addr().String()}, "invalid")
	opts.Decoder.Tables[0].Columns.HeaderColumns = []string{"trace", "trace"}
	opts.KafkaTimeout = 2 * time.Second
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	err := Run(ctx, opts)
	var oe *OptionError
	if !errors.As(err, &oe) || oe.Option != "Decoder" || !strings.Contains(err.Error(), "trace") {
		t.Fatalf("Run returned %v (%T) after %v; want an *OptionError for Decoder naming the duplicate", err, err, time.Since(start).Round(time.Millisecond))
	}
	if n, m := pg.n.Load(), kafka.n.Load(); n != 0 || m != 0 {
		t.Fatalf("Run connected %d times to Postgres and %d times to Kafka before refusing; want none", n, m)
	}
	t.Logf("refused at start in %v: %v", time.Since(start).Round(time.Millisecond), err)
}

// TestReconnectClassifier: only known transient failures make the relay
// reconnect; everything else, unknown errors included, stops it.
func TestReconnectClassifier(t *testing.T) {
	_, decErr := decoder.New(decoder.Config{Tables: []decoder.Table{{Name: "outbox",
		Columns: decoder.Columns{ID: "id", AggregateType: "t", AggregateID: "a", EventType: "e", Payload: "p", HeaderColumns: []string{"x", "x"}}}}})
	if decErr == nil {
		t.Fatal("decoder accepted duplicate header columns")
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"connection lost", fmt.Errorf("receive from postgres: %w", io.ErrUnexpectedEOF), true},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}, true},
		{"admin shutdown", fmt.Errorf("replication stream: %w", &pgconn.PgError{Code: "57P01"}), true},
		{"cannot connect now", &pgconn.PgError{Code: "57P03"}, true},
		{"slot in use", fmt.Errorf("start: %w", replication.ErrSlotInUse), true},
		{"server ended the stream", fmt.Errorf("replication stream: %w", replication.ErrServerEnded), true},
		{"invalid decoder config in a session", decErr, false},
		{"delivery failure wrapping a network error", &deliveryError{fmt.Errorf("produce: %w", io.EOF)}, false},
		{"authentication failed", &pgconn.PgError{Code: "28P01"}, false},
		{"unknown error", errors.New("something nobody classified"), false},
		{"prerequisite", &replication.PrereqError{Check: "slot"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := reconnectable(tc.err); got != tc.want {
				t.Fatalf("reconnectable(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
