// Package operator holds the operator's tools for the bad day: replay,
// recovery after a lost slot, dead-letter redrive, prune and its guard,
// retention span, cutover from Debezium. They use the same stages as the
// runtime (relay) on the outbox table's rows and on what Kafka holds, and
// are safe to interrupt, retry, run twice or in the wrong order.
//
// Entry points, each with an options type of its own that holds only what
// it uses (the command maps walrelay run's settings to it, so that what a
// tool sends is the record run makes, and what it reads is where run
// wrote):
//   - replay.go: Replay (ReplayOptions) re-publishes kept rows, each through
//     the decoder's DecodeRow and the sink's Prepare as the relay sends its
//     INSERT (replay_query.go reads the rows, replay_send.go produces them,
//     replay_token.go is the resume token);
//   - recover.go: LastDelivered (DeliveredOptions) reads back the newest
//     event in Kafka and its commit time; PlanRecovery, Recovery.CreateSlot,
//     Recovery.HandOver and Recovery.Lost (RecoveryOptions) find where a
//     lost slot left off, make the new slot under RecoveringSlot's name,
//     hand it over once the replay is done, and name the events that could
//     not be replayed;
//   - slotmark.go: MarkSlot (SlotMarkOptions) writes walrelay's mark of the
//     slot a recovery creates, as run does before it creates one;
//   - redrive.go: Redrive (RedriveOptions) sends dead-lettered events to
//     their topics;
//   - prune.go: Prune (PruneOptions) deletes old rows and drops old daily
//     partitions, through pruneguard.go's PruneGuard;
//   - span.go: ReadOutboxSpans, how far back a replay can reach;
//   - cutover.go: Cutover and DropFromSlot (CutoverOptions) take over from
//     Debezium's slot without a gap;
//   - migrate.go: Migrate (MigrateOptions) creates the outbox table.
//
// It stands beside the runtime, not on it: it imports the stages (and
// internal/retry), never relay, and relay never imports it. What both need
// lives below them: the dead-letter reasons and PoisonError in sink
// (reason.go), slot and catalog reads in replication.
//
// Invariants kept here:
//   - a replay never touches the slot, never skips a selected row (its
//     resume token is the acknowledged prefix of the rows it sent:
//     replay_send.go), and in exactly-once mode never fences the relay's
//     producer (a transactional id of its own: replay.go);
//   - a redrive remembers what it sent (its group's committed offsets) only
//     once Kafka acknowledged it, and marks done only records its second
//     pass saw and acted on, reading the very ranges its first pass read
//     (redrive.go: run, settle); its bounded memory of records left behind
//     never stops it short of a selected record for good (planPartition);
//     a dry run decides through the same redrive function as a redrive;
//   - a prune guard lets a row go only once the slot (a logical slot of
//     this database) confirmed past its transaction, or, with the slot gone
//     or another database's, once it is older than the last delivered
//     event's commit time less the margin, and never while a recovery is
//     unfinished (pruneguard.go); a daily partition is
//     dropped only when every row in it may go, checked under its lock
//     (prune.go);
//   - a recovery refuses while the slot is valid, and creates the new slot
//     before the replay reads its snapshot, so nothing falls between them;
//     the slot keeps a name of its own until the replay has sent the gap,
//     so an interrupted recovery leaves the slot missing and a retry starts
//     from the same time (recover.go);
//   - a replay refuses a time column NULL in some rows (timecolumn.go);
//   - cutover drops Debezium's slot only once it is inactive and confirmed
//     walrelay's start, and while walrelay's own slot exists and is valid
//     (cutover.go).
package operator
