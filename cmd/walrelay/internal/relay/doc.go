// Package relay wires walrelay's stages together: the replication stream
// feeds the decoder, whose events are tracked by the checkpoint and produced
// by the sink; the checkpoint's watermark flows back to the stream, which
// reports it to Postgres. It also holds the configuration loader and the
// operator commands (migrate, doctor, status).
//
// Invariants kept here:
//   - an event is added to the checkpoint before it is handed to Kafka, and
//     acknowledged only from the sink's success callback;
//   - a record that fails for good stops the relay (it is never skipped), so
//     the watermark stays before its transaction;
//   - a keepalive's WAL end only becomes the watermark when the decoder has no
//     open transaction and nothing is in flight (checkpoint.AdvanceIdle);
//   - after the replication connection is lost, the half-read transaction is
//     abandoned and read again from the slot after reconnecting.
package relay
