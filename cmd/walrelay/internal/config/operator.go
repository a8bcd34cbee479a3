package config

import (
	"log/slog"

	"github.com/walrelay/walrelay/operator"
	"github.com/walrelay/walrelay/relay"
)

// The operator's tools take walrelay run's settings (so that what they send
// is what run makes, and what they read is where run wrote): each maps the
// runtime's Options to its own options type here.

// Replay is the replay's options: run's tables, mapping, routing, Kafka and
// delivery settings, the selection, the time column, the rate, the resume
// token and the id; log is the logger.
func (c ReplayConfig) Replay(log *slog.Logger) (operator.ReplayOptions, error) {
	o, err := c.Relay(log)
	ro := operator.ReplayOptions{DSN: o.Replication.DSN, PasswordSource: o.Replication.PasswordSource, Decoder: o.Decoder, Sink: o.Sink, MaxInFlight: o.MaxInFlight,
		StopOnPoison: o.OnPoison == relay.OnPoisonStop, ShutdownTimeout: o.ShutdownTimeout, KafkaTimeout: o.KafkaTimeout, Logger: log,
		Selection: operator.ReplaySelection{Since: c.Since, Until: c.Until, IDs: c.EventIDs, AggregateTypes: c.AggregateTypes,
			AggregateIDs: c.AggregateIDs, EventTypes: c.EventTypes},
		TimeColumn: c.CreatedAtColumn, Rate: c.Rate, DryRun: c.DryRun, Resume: c.Resume, ID: c.ReplayID}
	if x := o.ExactlyOnce; x != nil {
		ro.ExactlyOnce = &operator.ExactlyOnce{TransactionalID: x.TransactionalID, CommitInterval: x.CommitInterval, MaxRecords: x.MaxRecords}
	}
	return ro, err
}

// Recovery is the recovery's options (replay --since-last-delivered).
func (c ReplayConfig) Recovery(log *slog.Logger) (operator.RecoveryOptions, error) {
	o, err := c.Relay(log)
	return operator.RecoveryOptions{Replication: o.Replication, Delivered: delivered(o), Margin: c.RecoveryMargin}, err
}

// SlotMark is where a recovery marks the slot it creates: run's slot, Kafka
// settings and checkpoint topic (the marks' topic in both delivery modes).
func (c Config) SlotMark(log *slog.Logger) (operator.SlotMarkOptions, error) {
	o, err := c.Relay(log)
	return operator.SlotMarkOptions{Replication: o.Replication, Sink: o.Sink, Topic: o.SlotMarkTopic,
		ReplicationFactor: o.SlotMarkReplicationFactor, Logger: log}, err
}

// Redrive is the redrive's options: run's tables, mapping, routing and
// Kafka settings, the selection of dead letters and the group.
func (c RedriveConfig) Redrive(log *slog.Logger) (operator.RedriveOptions, error) {
	o, err := c.Relay(log)
	return operator.RedriveOptions{DSN: o.Replication.DSN, PasswordSource: o.Replication.PasswordSource, Decoder: o.Decoder, Sink: o.Sink, KafkaTimeout: o.KafkaTimeout, Logger: log,
		Reasons: c.Reasons, Topics: c.IntendedTopics, Since: c.Since, Until: c.Until, Group: c.Group, DryRun: c.DryRun}, err
}

// delivered is what operator.LastDelivered needs of run's options o.
func delivered(o relay.Options) operator.DeliveredOptions {
	d := operator.DeliveredOptions{Sink: o.Sink, DSN: o.Replication.DSN, PasswordSource: o.Replication.PasswordSource, Slot: o.Replication.Slot, Logger: o.Logger}
	if o.ExactlyOnce != nil {
		d.CheckpointTopic = o.ExactlyOnce.CheckpointTopic
	}
	return d
}
