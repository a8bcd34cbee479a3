// Package operator holds the operator's tools for the bad day: replay,
// recovery after a lost slot, dead-letter redrive, prune and its guard,
// retention span, cutover from Debezium. They use the same stages as the
// runtime (relay) on the outbox table's rows and on what Kafka holds:
// Replay re-publishes kept rows (each row through the decoder's DecodeRow
// and the sink's Prepare, as the relay sends its INSERT); PlanRecovery and
// LastDelivered find where a lost slot left off; Redrive sends
// dead-lettered events to their topics; PruneGuard and Prune delete only
// the rows whose events are in Kafka; Cutover takes over from Debezium's
// slot without a gap.
//
// Invariants kept here:
//   - a replay never touches the slot, never skips a selected row (its
//     resume token is the acknowledged prefix of the rows it sent), and in
//     exactly-once mode never fences the relay's producer (a transactional
//     id of its own);
//   - a redrive remembers what it sent only once Kafka acknowledged it, and
//     a prune guard lets a row go only once the slot confirmed past its
//     transaction.
package operator
