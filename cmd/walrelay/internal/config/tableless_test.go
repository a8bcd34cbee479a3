package config

import (
	"testing"

	"github.com/walrelay/walrelay/decoder"
)

// TestTablelessOptIn: the tableless outbox is off unless a message prefix is
// configured, because any role may call pg_logical_emit_message unless
// EXECUTE on it is revoked from PUBLIC: without the prefix the decoder is
// given none, and its messages are foreign (decoder.TestDecodeMessageTypes).
func TestTablelessOptIn(t *testing.T) {
	base := []string{"--postgres-dsn", "postgres://u@h/db", "--kafka-brokers", "k:9092"}
	for _, tc := range []struct {
		name   string
		args   []string
		prefix string
	}{
		{"off by default", base, ""},
		{"on when configured", append(base, "--message-prefix", "walrelay.outbox"), "walrelay.outbox"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := loadRun(tc.args, envMap(nil), nil)
			if err != nil {
				t.Fatal(err)
			}
			dc, err := cfg.Decoder()
			if err != nil {
				t.Fatal(err)
			}
			if dc.MessagePrefix != tc.prefix {
				t.Fatalf("decoder message prefix %q, want %q", dc.MessagePrefix, tc.prefix)
			}
			if _, err := decoder.New(dc); err != nil {
				t.Fatal(err)
			}
		})
	}
}
