package operator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walrelay/walrelay/replication"
	"github.com/walrelay/walrelay/sink"
)

// Recovery after a lost slot (dropped, invalidated by
// max_slot_wal_keep_size, or missing on a promoted standby): the events
// committed after its last confirmed position may never have reached Kafka,
// and the slot that knew that position is gone. What was delivered is read
// back from Kafka instead, and the outbox rows committed since then are
// replayed.

// DefaultRecoveryMargin is how far before the last delivered event a
// recovery replays by default. A row's created_at is its transaction's
// start, earlier than its commit: the margin must cover the longest
// transaction that writes outbox rows, and, in at-least-once mode, the
// commit times of the records that were in flight when walrelay stopped
// (a later record may have been acknowledged before an earlier one).
const DefaultRecoveryMargin = time.Hour

// LastDelivery is the newest event walrelay delivered, read back from the
// outbox topics and the dead-letter topic as a read_committed consumer sees
// them (replays' records left out).
type LastDelivery struct {
	Found bool
	// Time is its transaction's commit time: the walrelay.commit_time
	// header when the record has one (its timestamp is then a mapped
	// column's value, from whatever clock the application used), else the
	// record's timestamp.
	Time      time.Time
	Topic     string
	Partition int32
	Offset    int64
	ID        string // the id header
	LSN       string // the walrelay.lsn header
	// Checkpoint is the slot's last committed exactly-once checkpoint,
	// when there is one: every transaction ending at or before its LSN is
	// in Kafka, and the records above are those transactions' newest.
	Checkpoint *sink.Checkpoint
	Topics     int // topics read
}

// DeliveredOptions are what LastDelivered reads Kafka with: walrelay run's
// Kafka settings and topic templates (give it the relay's), and in
// exactly-once mode its checkpoint topic, DSN and slot.
type DeliveredOptions struct {
	Sink sink.Config
	// CheckpointTopic is the exactly-once checkpoint topic; "" in
	// at-least-once mode.
	CheckpointTopic string
	// DSN and Slot (default walrelay) key the slot's checkpoint with the
	// server's system identifier; PasswordSource supplies the password of
	// the connection to DSN (nil: the DSN's).
	DSN, Slot      string
	PasswordSource replication.PasswordSource
	Logger         *slog.Logger // nil: slog.Default()
}

// readbackWindow is how many offsets at the end of a partition are read
// first for its newest committed record; a window without one is widened.
const readbackWindow = 64

// LastDelivered finds the newest event delivered to Kafka with opts' sink
// settings: the newest committed record, by timestamp, among the newest of
// every partition of the topics opts' templates render (and the dead-letter
// topic). Records of replays are left out (theirs are old events). In
// exactly-once mode it also reads the slot's checkpoint (the system
// identifier comes from Postgres; without the privilege to read it, the
// checkpoint is left out). Nothing is produced and no producer is fenced.
func LastDelivered(ctx context.Context, opts DeliveredOptions) (LastDelivery, error) {
	var last LastDelivery
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	snk, err := sink.New(opts.Sink, sink.WithLogger(log))
	if err != nil {
		return last, err
	}
	defer snk.Close()
	cl, err := snk.NewReadbackClient()
	if err != nil {
		return last, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topics, err := outboxTopics(ctx, adm, opts.Sink)
	if err != nil {
		return last, err
	}
	if cp := opts.CheckpointTopic; cp != "" {
		topics = slices.DeleteFunc(topics, func(t string) bool { return t == cp })
	}
	last.Topics = len(topics)
	if len(topics) > 0 {
		if err := newestCommitted(ctx, cl, adm, topics, &last); err != nil {
			return last, err
		}
	}
	if opts.CheckpointTopic != "" {
		cp, ok, err := slotCheckpoint(ctx, snk, opts)
		if err != nil {
			log.Warn("recovery: the exactly-once checkpoint could not be read; the newest records alone say what was delivered", "error", err.Error())
		} else if ok {
			last.Checkpoint = &cp
		}
	}
	return last, nil
}

// outboxTopics lists the topics of the cluster that cfg's templates render,
// and the dead-letter topic.
func outboxTopics(ctx context.Context, adm *kadm.Client, cfg sink.Config) ([]string, error) {
	tmpls, err := cfg.Templates()
	if err != nil {
		return nil, err
	}
	td, err := adm.ListTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("kafka: list topics: %w", err)
	}
	dlq := cfg.DeadLetterTopic()
	var out []string
	for _, name := range td.Names() {
		if name == dlq {
			out = append(out, name)
			continue
		}
		for _, t := range tmpls {
			if t.Matches(name) {
				out = append(out, name)
				break
			}
		}
	}
	return out, nil
}

// newestCommitted reads the end of every partition of topics and keeps in
// last the committed record (not a replay's) with the newest timestamp.
func newestCommitted(ctx context.Context, cl *kgo.Client, adm *kadm.Client, topics []string, last *LastDelivery) error {
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return fmt.Errorf("kafka: list start offsets: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("kafka: list end offsets: %w", err)
	}
	// Partitions without a committed record yet, and how far back their
	// window reaches.
	type tp struct {
		topic string
		p     int32
	}
	pending := map[tp]sink.OffsetRange{}
	ends.Each(func(o kadm.ListedOffset) {
		s, _ := starts.Lookup(o.Topic, o.Partition)
		if o.Offset > s.Offset {
			pending[tp{o.Topic, o.Partition}] = sink.OffsetRange{From: max(s.Offset, o.Offset-readbackWindow), To: o.Offset}
		}
	})
	for window := int64(readbackWindow); len(pending) > 0; window *= 8 {
		ranges := map[string]map[int32]sink.OffsetRange{}
		for k, r := range pending {
			if ranges[k.topic] == nil {
				ranges[k.topic] = map[int32]sink.OffsetRange{}
			}
			ranges[k.topic][k.p] = r
		}
		found := map[tp]bool{}
		err := sink.ReadRanges(ctx, cl, ranges, func(r *kgo.Record, st sink.RecordState) error {
			if st != sink.RecordCommitted || recordHeader(r, sink.HeaderReplay) != "" || recordHeader(r, sink.HeaderID) == "" {
				return nil // not an event walrelay delivered (a replay's, or another producer's)
			}
			found[tp{r.Topic, r.Partition}] = true
			if !last.Found || newer(r, last) {
				*last = LastDelivery{Found: true, Time: commitTime(r), Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
					ID: recordHeader(r, sink.HeaderID), LSN: recordHeader(r, sink.HeaderLSN), Topics: last.Topics}
			}
			return nil
		})
		if err != nil {
			return err
		}
		for k, r := range pending {
			s, _ := starts.Lookup(k.topic, k.p)
			if found[k] || r.From <= s.Offset {
				delete(pending, k) // found, or nothing committed in the whole partition
				continue
			}
			pending[k] = sink.OffsetRange{From: max(s.Offset, r.To-window*8), To: r.From}
		}
	}
	return nil
}

// commitTime is the commit time of r's transaction: its
// walrelay.commit_time header, else its timestamp (records without the
// header have the commit time as timestamp).
func commitTime(r *kgo.Record) time.Time {
	if h := recordHeader(r, sink.HeaderCommitTime); h != "" {
		if t, err := time.Parse(time.RFC3339Nano, h); err == nil {
			return t.UTC()
		}
	}
	return r.Timestamp.UTC()
}

// newer reports whether r is newer than last: a later commit time, or the
// same time and a later WAL position.
func newer(r *kgo.Record, last *LastDelivery) bool {
	if at := commitTime(r); !at.Equal(last.Time) {
		return at.After(last.Time)
	}
	a, aerr := pglogrepl.ParseLSN(recordHeader(r, sink.HeaderLSN))
	b, berr := pglogrepl.ParseLSN(last.LSN)
	return aerr == nil && (berr != nil || a > b)
}

// recordHeader returns the value of r's first header named key, "" if none.
func recordHeader(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// slotCheckpoint reads the exactly-once checkpoint of opts' slot, keyed by
// the server's system identifier.
func slotCheckpoint(ctx context.Context, snk *sink.Sink, opts DeliveredOptions) (sink.Checkpoint, bool, error) {
	conn, err := connectPlain(ctx, opts.DSN, "walrelay recovery", opts.PasswordSource)
	if err != nil {
		return sink.Checkpoint{}, false, err
	}
	defer conn.Close(context.Background())
	sysID, err := replication.SystemIdentifier(ctx, replication.NewQuerier(conn.PgConn()))
	if err != nil {
		return sink.Checkpoint{}, false, fmt.Errorf("read the system identifier: %w", err)
	}
	slot := opts.Slot
	if slot == "" {
		slot = "walrelay"
	}
	return snk.ReadCheckpoint(ctx, opts.CheckpointTopic, sink.CheckpointKey(sysID, slot))
}

// SlotState is a replication slot as pg_replication_slots shows it.
type SlotState struct {
	Name        string
	Exists      bool
	Lost        bool   // wal_status lost: invalidated, WAL it needed is gone
	Active      bool   // a process streams from it
	CatalogXmin uint32 // 0 when NULL
	Confirmed   string // confirmed_flush_lsn, "" when NULL
	// OtherDatabase: the slot exists but is not a logical slot of the
	// database read (slot names are cluster-wide); Database names its
	// database ("" for a physical slot). Such a slot is not this
	// database's walrelay slot and vouches for none of its rows.
	OtherDatabase bool
	Database      string
}

// ReadSlotState reads slot's row of pg_replication_slots over conn
// (replication.ReadSlot).
func ReadSlotState(ctx context.Context, conn *pgx.Conn, slot string) (SlotState, error) {
	st := SlotState{Name: slot}
	s, err := replication.ReadSlot(ctx, replication.NewQuerier(conn.PgConn()), slot)
	if errors.Is(err, replication.ErrSlotMissing) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	st.Exists, st.Active, st.CatalogXmin = true, s.Active, s.CatalogXmin
	st.Database, st.OtherDatabase = s.Database, s.Type != "logical" || !s.InCurrentDatabase
	st.Lost = s.WALStatus == "lost"
	if s.ConfirmedFlushLSN != 0 {
		st.Confirmed = s.ConfirmedFlushLSN.String()
	}
	return st, nil
}

// RecoveryOptions are what PlanRecovery and CreateSlot need: the slot to
// recover, which CreateSlot makes as walrelay run does (give it the
// relay's), and where to find the last delivered event.
type RecoveryOptions struct {
	Replication replication.Config
	// Delivered finds the last delivered event; its DSN and Slot are
	// Replication's.
	Delivered DeliveredOptions
	// Margin is how far before the last delivered event the replay starts
	// (walrelay's default: DefaultRecoveryMargin); not negative.
	Margin time.Duration
}

// RecoveringSlot is the name under which a recovery of slot keeps its new
// slot until the replay has sent the gap: slot + "_recovering". While it
// exists a recovery is unfinished: slot itself stays missing (walrelay run
// does not stream, the last delivered event stays where the loss left it,
// so a retried recovery starts from the same time) and prune deletes no
// row (PruneGuard). HandOver renames it to slot.
func RecoveringSlot(slot string) string { return slot + "_recovering" }

// maxSlotName is the longest slot name Postgres accepts (NAMEDATALEN - 1).
const maxSlotName = 63

// Recovery is the plan of a replay after a lost slot: the rows committed
// since the last delivered event, less the margin.
type Recovery struct {
	Slot SlotState
	// Pending is the slot an earlier recovery made and did not hand over
	// (RecoveringSlot; Exists false when there is none): CreateSlot keeps
	// it, so that nothing committed since it was made is missed.
	Pending   SlotState
	Delivered LastDelivery
	Margin    time.Duration
	// Since is where the replay starts: Delivered.Time - Margin; zero
	// (everything the table holds) when nothing was delivered.
	Since time.Time
}

// SlotInUseError refuses a recovery while the slot exists and is valid:
// events it already streamed would be taken for the last delivered ones
// and hide the gap.
type SlotInUseError struct{ Slot SlotState }

func (e *SlotInUseError) Error() string {
	return fmt.Sprintf("replication slot %q exists and is valid (confirmed up to %s): a recovery replays what a lost slot did not deliver; "+
		"once walrelay streams from a new slot, its events hide that gap. If the slot was created after the loss, replay from the time walrelay "+
		"reported the loss with an explicit start time instead; if the slot works, there is nothing to recover", e.Slot.Name, e.Slot.Confirmed)
}

// PlanRecovery checks opts' slot and finds the last delivered event: the
// slot must be missing or lost (a *SlotInUseError otherwise).
func PlanRecovery(ctx context.Context, opts RecoveryOptions) (Recovery, error) {
	margin := opts.Margin
	rec := Recovery{Margin: margin}
	if margin < 0 {
		return rec, &OptionError{Option: "Margin", Err: errors.New("must not be negative")}
	}
	conn, err := connectPlain(ctx, opts.Replication.DSN, "walrelay recovery", opts.Replication.PasswordSource)
	if err != nil {
		return rec, err
	}
	defer conn.Close(context.Background())
	slot := opts.Replication.Slot
	if slot == "" {
		slot = "walrelay"
	}
	if rec.Slot, err = ReadSlotState(ctx, conn, slot); err != nil {
		return rec, err
	}
	if rec.Slot.Exists && rec.Slot.OtherDatabase {
		return rec, &OptionError{Option: "Replication.Slot", Err: fmt.Errorf("replication slot %q is %s: slot names are cluster-wide, so this database's walrelay needs a slot name of its own",
			slot, slotGone(rec.Slot))}
	}
	if n := len(RecoveringSlot(slot)); n > maxSlotName {
		return rec, &OptionError{Option: "Replication.Slot", Err: fmt.Errorf("%q is too long for a recovery, which names its new slot %q (%d bytes, at most %d) until the hand-over",
			slot, RecoveringSlot(slot), n, maxSlotName)}
	}
	if rec.Pending, err = ReadSlotState(ctx, conn, RecoveringSlot(slot)); err != nil {
		return rec, err
	}
	if rec.Pending.Exists && rec.Pending.OtherDatabase {
		return rec, &OptionError{Option: "Replication.Slot", Err: fmt.Errorf("replication slot %q is %s: slot names are cluster-wide, so this database's walrelay needs a slot name of its own",
			rec.Pending.Name, slotGone(rec.Pending))}
	}
	if rec.Slot.Exists && !rec.Slot.Lost && rec.Pending.Exists {
		return rec, &RecoveryPendingError{Slot: rec.Slot, Pending: rec.Pending}
	}
	if rec.Slot.Exists && !rec.Slot.Lost {
		return rec, &SlotInUseError{Slot: rec.Slot}
	}
	d := opts.Delivered
	d.DSN, d.Slot, d.PasswordSource = opts.Replication.DSN, slot, opts.Replication.PasswordSource
	if rec.Delivered, err = LastDelivered(ctx, d); err != nil {
		return rec, err
	}
	if rec.Delivered.Found {
		rec.Since = rec.Delivered.Time.Add(-margin)
	}
	return rec, nil
}

// RecoveryPendingError refuses a recovery while both the slot and the
// slot of an unfinished recovery (RecoveringSlot) exist: either a recovery
// was interrupted between handing its slot over and dropping the pending
// one (its replay had finished), or walrelay run created the slot while a
// recovery was unfinished (its replay may not have sent the gap, and the
// events run streamed since hide it).
type RecoveryPendingError struct{ Slot, Pending SlotState }

func (e *RecoveryPendingError) Error() string {
	return fmt.Sprintf("replication slot %q exists, and so does %q, the slot of a recovery that did not finish: if that recovery printed "+
		"\"recovery done\", drop %q (SELECT pg_drop_replication_slot('%s')); otherwise replay the gap first (a replay since the start that "+
		"recovery printed), then drop it. Until it is dropped, prune deletes nothing", e.Slot.Name, e.Pending.Name, e.Pending.Name, e.Pending.Name)
}

// CreateSlot makes the new slot of a recovery, under RecoveringSlot's
// name: it drops the lost slot, if any, and creates the slot (and the
// publication, when missing) as walrelay run does; the slot of an earlier
// recovery that did not finish (Pending) is kept instead, unless it was
// invalidated too. Call it before the replay reads its snapshot: every
// transaction committed before the slot's start is then in the snapshot,
// and every later one is kept by the slot, so nothing falls between them;
// call HandOver once the replay has sent everything. Reused reports a kept
// slot.
func (rec *Recovery) CreateSlot(ctx context.Context, opts RecoveryOptions) (reused bool, err error) {
	conn, err := connectPlain(ctx, opts.Replication.DSN, "walrelay recovery", opts.Replication.PasswordSource)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.Background())
	for _, s := range []SlotState{rec.Slot, rec.Pending} {
		if s.Exists {
			if err := dropLostSlot(ctx, conn, s.Name); err != nil {
				return false, fmt.Errorf("drop the lost slot %s: %w", s.Name, err)
			}
		}
	}
	slot := rec.slotName(opts)
	pending, err := ReadSlotState(ctx, conn, RecoveringSlot(slot))
	if err != nil {
		return false, err
	}
	if pending.Exists && !pending.OtherDatabase {
		rec.Pending = pending
		return true, nil
	}
	rcfg := opts.Replication
	rcfg.Slot, rcfg.NoCreateSlot, rcfg.SlotMustExist = RecoveringSlot(slot), false, false
	rc, err := replication.Open(ctx, rcfg)
	if err != nil {
		return false, err
	}
	if !rc.Created {
		_ = rc.Close(context.Background())
		return false, fmt.Errorf("replication slot %q was created by another process meanwhile; drop it, then recover again", rcfg.Slot)
	}
	if err := rc.Close(context.Background()); err != nil {
		return false, err
	}
	rec.Pending, err = ReadSlotState(ctx, conn, rcfg.Slot)
	return false, err
}

// HandOver ends a recovery whose replay sent every row since Since: the
// recovery's slot (RecoveringSlot) becomes the slot walrelay run streams
// from (a copy under the slot's name, a failover slot when configured),
// and the recovery's slot is dropped. Interrupted, it can be called again.
func (rec *Recovery) HandOver(ctx context.Context, opts RecoveryOptions) error {
	conn, err := connectPlain(ctx, opts.Replication.DSN, "walrelay recovery", opts.Replication.PasswordSource)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	slot := rec.slotName(opts)
	pending := RecoveringSlot(slot)
	st, err := ReadSlotState(ctx, conn, slot)
	if err != nil {
		return err
	}
	q := replication.NewQuerier(conn.PgConn())
	if !st.Exists {
		if err := replication.CopySlot(ctx, q, pending, slot); err != nil {
			return err
		}
		if opts.Replication.SlotFailover {
			if err := replication.SetSlotFailover(ctx, opts.Replication, slot); err != nil {
				return err
			}
		}
	}
	ps, err := ReadSlotState(ctx, conn, pending)
	if err != nil {
		return err
	}
	if ps.Exists && !ps.OtherDatabase {
		if err := replication.DropSlot(ctx, q, pending); err != nil {
			return err
		}
	}
	rec.Slot, err = ReadSlotState(ctx, conn, slot)
	rec.Pending = SlotState{Name: pending}
	return err
}

// EventsLostError reports that events of a recovery's gap could not be
// replayed: they were never kept as rows (a tableless outbox) or the
// application deletes the rows it writes. They are lost: the slot that
// held them is gone, and Kafka never received them.
type EventsLostError struct {
	Since  time.Time // the recovery's start (zero: all of the outbox)
	Reason string
}

func (e *EventsLostError) Error() string {
	since := "the last delivered event"
	if !e.Since.IsZero() {
		since = e.Since.UTC().Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("events committed since %s could not be replayed and are lost (Kafka never received them, and the slot that held them is gone): %s",
		since, e.Reason)
}

// Lost reports the events of the gap that a replay with ro, which ended
// with replayErr, could not send (a *EventsLostError), or nil: tableless
// events (ro.Decoder.MessagePrefix) are never rows, and a table whose rows
// the application deletes has none to replay.
func (rec *Recovery) Lost(ro ReplayOptions, replayErr error) error {
	var (
		nothing *NothingToReplayError
		why     []string
	)
	if errors.As(replayErr, &nothing) && nothing.Unkept {
		why = append(why, nothing.Reason)
	}
	if p := ro.Decoder.MessagePrefix; p != "" && (nothing == nil || !strings.Contains(nothing.Reason, "tableless")) {
		why = append(why, fmt.Sprintf("the tableless outbox's events (logical messages with prefix %q) were never rows of a table", p))
	}
	if len(why) == 0 {
		return nil
	}
	return &EventsLostError{Since: rec.Since, Reason: strings.Join(why, "; ")}
}

// slotName is the slot recovered (default walrelay).
func (rec *Recovery) slotName(opts RecoveryOptions) string {
	if opts.Replication.Slot != "" {
		return opts.Replication.Slot
	}
	return "walrelay"
}

// dropLostSlot drops slot if it is still lost (wal_status lost); a slot
// that is gone or valid again is left as it is.
func dropLostSlot(ctx context.Context, conn *pgx.Conn, slot string) error {
	q := replication.NewQuerier(conn.PgConn())
	s, err := replication.ReadSlot(ctx, q, slot)
	if errors.Is(err, replication.ErrSlotMissing) || err == nil && s.WALStatus != "lost" {
		return nil
	}
	if err != nil {
		return err
	}
	return replication.DropSlot(ctx, q, slot)
}
