package config

import (
	"errors"
	"testing"
	"time"

	"github.com/walrelay/walrelay/relay"
)

func TestValidateDelivery(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		key  string
	}{
		{"default", func(*Config) {}, ""},
		{"eos", func(c *Config) { c.Delivery = DeliveryExactlyOnce }, ""},
		{"bad mode", func(c *Config) { c.Delivery = "exactly_once" }, "delivery"},
		{"bad topic", func(c *Config) { c.Delivery = DeliveryExactlyOnce; c.CheckpointTopic = "a b" }, "checkpoint-topic"},
		{"bad rf", func(c *Config) { c.Delivery = DeliveryExactlyOnce; c.CheckpointReplicationFactor = 0 }, "checkpoint-replication-factor"},
		{"bad interval", func(c *Config) { c.Delivery = DeliveryExactlyOnce; c.TxnCommitInterval = 0 }, "txn-commit-interval"},
		{"max records", func(c *Config) { c.Delivery = DeliveryExactlyOnce; c.TxnMaxRecords = -1 }, "txn-max-records"},
		{"max records above in flight", func(c *Config) { c.Delivery = DeliveryExactlyOnce; c.TxnMaxRecords = 3 * c.MaxInFlight }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Defaults()
			tc.mod(&c)
			err := c.validateDelivery()
			var ce *Error
			switch {
			case tc.key == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tc.key != "" && (!errors.As(err, &ce) || ce.Key != tc.key):
				t.Fatalf("error %v, want one for key %s", err, tc.key)
			}
		})
	}
	if id := (Config{Slot: "orders"}).transactionalID(); id != "walrelay-orders" {
		t.Errorf("transactionalID = %q", id)
	}
}

// TestRelayOptions: the runtime's options carry the settings, exactly-once
// with the transactional id derived from the slot and a record cap of twice
// the in-flight cap unless set.
func TestRelayOptions(t *testing.T) {
	cfg, err := loadRun([]string{"--postgres-dsn", "postgres://u@h/db", "--kafka-brokers", "k:9092", "--slot", "orders",
		"--delivery", "exactly-once", "--max-in-flight", "900", "--on-poison", "stop"}, envMap(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	o, err := cfg.Relay(nil)
	if err != nil {
		t.Fatal(err)
	}
	x := o.ExactlyOnce
	if x == nil || x.TransactionalID != "walrelay-orders" || x.MaxRecords != 1800 || x.CommitInterval != 100*time.Millisecond ||
		o.MaxInFlight != 900 || o.Sink.MaxBufferedRecords != 900 || o.OnPoison != relay.OnPoisonStop || o.Replication.Slot != "orders" {
		t.Fatalf("options %+v, exactly-once %+v", o, x)
	}
	if cfg.Delivery = DeliveryAtLeastOnce; func() bool { o, _ := cfg.Relay(nil); return o.ExactlyOnce != nil }() {
		t.Fatal("at-least-once has exactly-once options")
	}
}
