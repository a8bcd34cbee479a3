package sink_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walrelay/walrelay/sink"
)

// syncBuffer is a bytes.Buffer for a log handler written from franz-go's
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.FieldsFunc(b.b.String(), func(r rune) bool { return r == '\n' })
}

// franz-go's warnings (here: a broker that refuses connections) reach the
// sink's logger, tagged component=kafka-client; its debug and info lines do
// not, even with a handler at debug; Ping's client stays silent (its error
// says it all).
func TestKafkaClientWarningsReachLog(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: every dial is refused

	h := &syncBuffer{}
	s, err := sink.New(sink.Config{Brokers: []string{addr}}, sink.WithLogger(slog.New(slog.NewTextHandler(h, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	if err := s.Ping(ctx); err == nil {
		t.Fatal("ping of a closed port succeeded")
	}
	cancel()
	if lines := h.lines(); len(lines) != 0 {
		t.Errorf("Ping logged %q, want nothing", lines)
	}

	ctx, cancel = context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := s.Prepare(ctx, event(1, "order", "order-7")); err == nil {
		t.Fatal("prepare without a broker succeeded")
	}
	var kafka []string
	for _, l := range h.lines() {
		if strings.Contains(l, "component=kafka-client") {
			kafka = append(kafka, l)
		}
	}
	found := false
	for _, l := range kafka {
		if !strings.Contains(l, " level=WARN ") && !strings.Contains(l, " level=ERROR ") {
			t.Errorf("franz-go line below warn: %s", l)
		}
		found = found || (strings.Contains(l, "unable to open connection to broker") && strings.Contains(l, addr))
	}
	if !found {
		t.Errorf("no franz-go warning about the refused connection to %s in %q", addr, h.lines())
	}
}
