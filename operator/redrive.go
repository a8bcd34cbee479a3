package operator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walrelay/walrelay/decoder"
	"github.com/walrelay/walrelay/internal/retry"
	"github.com/walrelay/walrelay/replication"
	"github.com/walrelay/walrelay/sink"
)

// Redrive sends dead-lettered events to the topics they were meant for once
// the cause is gone (walrelay dlq redrive). An event whose row is still in
// its outbox table is made again from the row, through DecodeRow and the
// sink's Prepare as the relay makes it (so a changed encoding applies);
// otherwise the stored record goes back as it is, without the dead-letter
// headers, its payload written (JSON value, schema rules) as the relay
// writes it (sink.PrepareStored). Either way it keeps its id, walrelay.lsn
// and walrelay.xid: it is the first delivery of that event to its topic.
// When the relay's record holds more of the row than a dead letter keeps
// (envelope columns, a partition column), a stored record does not go: it
// would not be the record the relay makes. Such an event, and one that still
// cannot go, is dead-lettered again with walrelay.dlq.attempts counting the
// tries, so a later redrive sees it again. Progress is kept in a consumer
// group's committed offsets: a second redrive sends nothing the first sent.
// The commit metadata remembers a bounded number of records left behind
// (not selected, or of a transaction still open); past it, those before a
// selected record are copied to the end of their partition (planPartition).

// DefaultRedriveGroup is the consumer group that remembers what was
// redriven.
const DefaultRedriveGroup = "walrelay-dlq-redrive"

// RedriveOptions are the settings of one redrive: walrelay run's tables,
// mapping, routing and Kafka settings (give it the relay's), and the
// dead-letter records it selects, those matching every criterion given (an
// empty list or a zero time matches all).
type RedriveOptions struct {
	// DSN is the outbox's Postgres (a dead letter whose row is still there
	// is made again from the row); Decoder maps its tables, and Sink routes
	// and encodes the records as the relay does. PasswordSource supplies
	// the password of every connection to DSN (nil: the DSN's).
	DSN            string
	PasswordSource replication.PasswordSource
	Decoder        decoder.Config
	Sink           sink.Config
	// KafkaTimeout bounds waiting for Kafka at start and for the group
	// coordinator; it must be positive.
	KafkaTimeout time.Duration
	Logger       *slog.Logger // nil: slog.Default()

	// Reasons are walrelay.dlq.reason values (sink.DeadLetterReason).
	Reasons []string
	// Topics are the topics the events were meant for (walrelay.dlq.topic).
	Topics []string
	// Since and Until bound the records' timestamp (the event's: its
	// commit time or timestamp column): Since <= t < Until.
	Since, Until time.Time
	// Group is the consumer group whose committed offsets say what was
	// redriven (DefaultRedriveGroup).
	Group string
	// DryRun lists what would be sent, and sends and commits nothing.
	DryRun bool
	// OnRecord, when set, is called for each selected record with what
	// was (or with DryRun would be) done, on the calling goroutine.
	OnRecord func(RedriveItem)

	// maxLeft replaces maxLeft when positive (tests).
	maxLeft int
}

// RedriveOutcome is what a redrive did with one record.
type RedriveOutcome string

// Redrive outcomes.
const (
	RedriveSent         RedriveOutcome = "sent"                // handed to Kafka for its topic
	RedriveWouldSend    RedriveOutcome = "would_send"          // dry run
	RedriveDeadLettered RedriveOutcome = "dead_lettered_again" // still fails: dead-lettered anew
	RedriveFiltered     RedriveOutcome = "filtered"            // its table's filter no longer publishes it
)

// RedriveItem is one selected dead-letter record.
type RedriveItem struct {
	Partition int32
	Offset    int64
	ID        string
	Reason    string // walrelay.dlq.reason
	Intended  string // walrelay.dlq.topic
	Table     string // walrelay.dlq.table
	// Target is the topic the record goes (or would go) to: its own, or
	// the dead-letter topic when it still fails.
	Target string
	// FromRow: made again from the row in the outbox table (else from the
	// stored record).
	FromRow bool
	Outcome RedriveOutcome
	Cause   error // why it still fails (RedriveDeadLettered)
}

// RedriveResult counts what a redrive did.
type RedriveResult struct {
	Topic, Group string
	// Selected counts the records matching the selection that were not
	// redriven before; Sent those Kafka acknowledged at their topic
	// (FromRow of them made from their rows); DeadLettered those
	// dead-lettered again; Filtered those no longer published.
	Selected, Sent, FromRow, DeadLettered, Filtered int64
	// Left counts the records the selection left for a later redrive
	// (not matching, or of a transaction still open).
	Left int64
	// Moved counts the records left behind that were copied to the end of
	// the dead-letter topic (with DryRun: would be) because more were left
	// behind in their partition than the group can remember and a selected
	// record came after them: the copy stays for a later redrive, the
	// original counts as done.
	Moved int64
	// Deferred counts the offsets not redriven yet because more records of
	// open transactions than the group can remember came before them (or,
	// with nothing selected after them, more records left behind);
	// redrive again.
	Deferred int64
}

// maxLeft is the most records left behind (not redriven) above the
// committed offset that a partition's commit metadata remembers.
const maxLeft = 500

// Redrive redrives the selected records of opts' dead-letter topic with
// opts' tables, mapping, routing and Kafka settings. It reads each
// partition up to its end when it starts, from the group's committed
// offset on, and commits the group's offsets once what it sent is
// acknowledged. Records are produced at least once (also in exactly-once
// mode): a redrive that is interrupted or fails commits nothing, and the
// next one sends again what it sent; consumers deduplicate on id.
func Redrive(ctx context.Context, opts RedriveOptions) (RedriveResult, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Group == "" {
		opts.Group = DefaultRedriveGroup
	}
	res := RedriveResult{Topic: opts.Sink.DeadLetterTopic(), Group: opts.Group}
	if opts.KafkaTimeout <= 0 {
		return res, &OptionError{Option: "KafkaTimeout", Err: errors.New("must be positive")}
	}
	opts.Decoder.HeartbeatPrefix = decoder.DefaultHeartbeatPrefix
	dec, err := decoder.New(opts.Decoder)
	if err != nil {
		return res, &OptionError{Option: "Decoder", Err: err}
	}
	scfg := opts.Sink
	scfg.ValidateOnlyTopics = opts.DryRun // a dry run creates no topic
	snk, err := sink.New(scfg, sink.WithLogger(opts.Logger))
	if err != nil {
		return res, err
	}
	defer snk.Close()
	kctx, cancel := context.WithTimeout(ctx, opts.KafkaTimeout)
	err = snk.Ping(kctx)
	cancel()
	if err != nil {
		return res, err
	}
	cl, err := snk.NewReadbackClient()
	if err != nil {
		return res, err
	}
	defer cl.Close()
	r := &redriver{opts: opts, res: &res, snk: snk, dec: dec, cl: cl, adm: kadm.NewClient(cl), tables: map[string]*outboxTable{}}
	defer r.close()
	return res, r.run(ctx)
}

type redriver struct {
	opts   RedriveOptions
	res    *RedriveResult
	snk    *sink.Sink
	dec    *decoder.Decoder
	cl     *kgo.Client
	adm    *kadm.Client
	conn   *pgx.Conn               // for rows, opened on first use
	tables map[string]*outboxTable // by schema.name, inspected on first use
	out    decoder.Output
	// warnedTime: a dead letter without HeaderDLQCommitTime was said.
	warnedTime bool
}

func (r *redriver) close() {
	if r.conn != nil {
		_ = r.conn.Close(context.Background())
	}
}

// partProgress is one partition's progress: the committed offset, and
// above it, up to end, every offset is redriven (or needs nothing) but
// those in left.
type partProgress struct {
	committed int64
	end       int64
	left      []int64 // sorted
}

func (p partProgress) done(off int64) bool {
	if off < p.committed {
		return true
	}
	if off >= p.end {
		return false
	}
	_, found := slices.BinarySearch(p.left, off)
	return !found
}

func (r *redriver) run(ctx context.Context) error {
	topic := r.res.Topic
	td, err := r.adm.ListTopics(ctx, topic)
	if err != nil {
		return fmt.Errorf("kafka: look up the dead-letter topic %s: %w", topic, err)
	}
	if !td.Has(topic) {
		return nil // nothing was ever dead-lettered
	}
	starts, err := r.adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return fmt.Errorf("kafka: list start offsets of %s: %w", topic, err)
	}
	ends, err := r.adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("kafka: list end offsets of %s: %w", topic, err)
	}
	var committed kadm.OffsetResponses
	err = r.coordinated(ctx, func() error {
		var err error
		committed, err = r.adm.FetchOffsetsForTopics(ctx, r.opts.Group, topic)
		if err == nil {
			err = committed.Error()
		}
		return err
	})
	if errors.Is(err, kerr.GroupIDNotFound) {
		committed, err = nil, nil // the first redrive
	}
	if err != nil {
		return fmt.Errorf("kafka: read the committed offsets of group %s: %w", r.opts.Group, err)
	}
	before := map[int32]partProgress{}
	ranges := map[string]map[int32]sink.OffsetRange{topic: {}}
	ends.Each(func(o kadm.ListedOffset) {
		s, _ := starts.Lookup(topic, o.Partition)
		p := partProgress{committed: s.Offset}
		if c, ok := committed.Lookup(topic, o.Partition); ok && c.At >= 0 {
			p = parseProgress(c.At, c.Metadata)
			p.committed = max(p.committed, s.Offset)
		}
		before[o.Partition] = p
		ranges[topic][o.Partition] = sink.OffsetRange{From: p.committed, To: o.Offset}
	})
	// Pass one: which records this run leaves behind (not selected, or of a
	// transaction still open) and where the selected ones are; from these,
	// how far each partition's progress can go (plan).
	var plans map[int32]*partPlan
	{
		left := map[int32][]int64{}
		open := map[int32]map[int64]bool{}
		lastSelected := map[int32]int64{}
		err = sink.ReadRanges(ctx, r.cl, ranges, func(rec *kgo.Record, st sink.RecordState) error {
			part := rec.Partition
			switch {
			case st == sink.RecordAborted || before[part].done(rec.Offset):
			case st == sink.RecordOpen:
				left[part] = append(left[part], rec.Offset)
				if open[part] == nil {
					open[part] = map[int64]bool{}
				}
				open[part][rec.Offset] = true
			case !r.selected(rec):
				left[part] = append(left[part], rec.Offset)
			default:
				if last, ok := lastSelected[part]; !ok || rec.Offset > last {
					lastSelected[part] = rec.Offset
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		plans = map[int32]*partPlan{}
		for part, rg := range ranges[topic] {
			last, ok := lastSelected[part]
			if !ok {
				last = -1
			}
			plans[part] = planPartition(rg.To, left[part], open[part], last, r.limit())
		}
	}
	for part, pl := range plans {
		r.res.Moved += int64(len(pl.move))
		r.res.Deferred += ranges[topic][part].To - pl.cut
	}
	if r.res.Deferred > 0 {
		r.opts.Logger.Warn("dlq redrive: more records are left behind than the group can remember; the rest waits for the next redrive",
			"topic", topic, "deferred_offsets", r.res.Deferred)
	}
	if r.res.Moved > 0 && !r.opts.DryRun {
		r.opts.Logger.Warn("dlq redrive: more records are left behind than the group can remember; copying the oldest to the end of the dead-letter topic",
			"topic", topic, "moved", r.res.Moved)
	}
	// Pass two reads the very ranges pass one read, so that every record is
	// in the same state (a transaction whose marker lies past a plan's cut
	// is still seen committed), and acts on the records below each cut: it
	// redrives the selected ones and copies the planned ones forward. What
	// it leaves behind is recorded as it goes: the commit marks done only
	// what this pass sent, copied, or found needing nothing.
	var mu sync.Mutex
	var sendErr error // the first record Kafka did not take
	produceCtx, cancelProduce := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelProduce()
	left := map[int32][]int64{}
	send := func(out sink.Record, rec *kgo.Record, count func()) {
		offset, partition := rec.Offset, rec.Partition
		r.snk.Send(produceCtx, out, func(err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if sendErr == nil {
					sendErr = fmt.Errorf("redrive dead-letter record %d/%d: %w", partition, offset, err)
				}
				return
			}
			count()
		})
	}
	err = sink.ReadRanges(ctx, r.cl, ranges, func(rec *kgo.Record, st sink.RecordState) error {
		pl := plans[rec.Partition]
		if rec.Offset >= pl.cut || st == sink.RecordAborted || before[rec.Partition].done(rec.Offset) {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if st == sink.RecordCommitted && pl.move[rec.Offset] {
			if r.opts.DryRun {
				return nil
			}
			out, err := retryPrepare(ctx, r.opts.Logger, recordHeader(rec, sink.HeaderID), func() (sink.Record, error) {
				return r.snk.PrepareDeadLetterCopy(ctx, rec, recordHeader(rec, sink.HeaderID))
			})
			if err != nil {
				return err
			}
			send(out, rec, func() {})
			return nil
		}
		if st != sink.RecordCommitted || !r.selected(rec) {
			left[rec.Partition] = append(left[rec.Partition], rec.Offset)
			return nil
		}
		r.res.Selected++
		item, out, err := r.redrive(ctx, rec)
		if err != nil {
			return err
		}
		if r.opts.DryRun && item.Outcome == RedriveSent {
			item.Outcome = RedriveWouldSend
		}
		if r.opts.OnRecord != nil {
			r.opts.OnRecord(item)
		}
		if r.opts.DryRun || item.Outcome == RedriveFiltered {
			if item.Outcome == RedriveFiltered {
				r.res.Filtered++
			}
			return nil
		}
		send(out, rec, func() {
			switch {
			case item.Outcome == RedriveDeadLettered:
				r.res.DeadLettered++
			case item.FromRow:
				r.res.Sent++
				r.res.FromRow++
			default:
				r.res.Sent++
			}
		})
		return nil
	})
	ferr := r.snk.Flush(context.WithoutCancel(ctx))
	progress := r.settle(plans, left)
	if r.opts.DryRun {
		return err
	}
	if err == nil && ferr != nil {
		err = fmt.Errorf("wait for kafka's acknowledgements: %w", ferr)
	}
	mu.Lock()
	if err == nil {
		err = sendErr
	}
	mu.Unlock()
	if err != nil {
		// Interrupted or failed: nothing is committed, and the next redrive
		// sends again what this one sent (consumers deduplicate on id).
		return err
	}
	return r.commit(ctx, progress)
}

// limit is the most records left behind a partition's progress remembers.
func (r *redriver) limit() int {
	if r.opts.maxLeft > 0 {
		return r.opts.maxLeft
	}
	return maxLeft
}

// partPlan is how far one partition's progress goes in a redrive: the
// records below cut are acted on, and those in move, left behind, are
// copied to the end of the dead-letter topic (their originals then count
// as done).
type partPlan struct {
	cut  int64
	move map[int64]bool
}

// planPartition plans a partition read up to end in which pass one left
// the records at offsets left behind (open: of a transaction still open)
// and found the last selected record at lastSelected (-1: none), for a
// progress that remembers up to limit records left behind. Within the
// limit the whole range is acted on. Beyond it, when a selected record
// comes after the limit's cut, the oldest records left behind that can be
// copied (not of an open transaction) are copied forward until the rest
// fits, so repeated redrives always reach every selected record; otherwise
// (nothing selected after the cut, or too many records of open
// transactions) the range is cut before the first record the progress
// cannot remember, and the rest waits for a later redrive.
func planPartition(end int64, left []int64, open map[int64]bool, lastSelected int64, limit int) *partPlan {
	pl := &partPlan{cut: end}
	slices.Sort(left)
	if len(left) <= limit {
		return pl
	}
	if lastSelected > left[limit] {
		pl.move = map[int64]bool{}
		excess := len(left) - limit
		kept := make([]int64, 0, len(left))
		for _, o := range left {
			if len(pl.move) < excess && !open[o] {
				pl.move[o] = true
				continue
			}
			kept = append(kept, o)
		}
		left = kept
	}
	if len(left) > limit {
		pl.cut = left[limit]
	}
	return pl
}

// settle returns each partition's progress after pass two: every offset
// below the plan's cut is done but those in left. The progress keeps the
// first limit of them; with more, its end moves down to the next one
// (counted as deferred).
func (r *redriver) settle(plans map[int32]*partPlan, left map[int32][]int64) map[int32]partProgress {
	progress := map[int32]partProgress{}
	for part, pl := range plans {
		l, end := left[part], pl.cut
		slices.Sort(l)
		if len(l) > r.limit() {
			end, l = l[r.limit()], l[:r.limit()]
			r.res.Deferred += pl.cut - end
		}
		r.res.Left += int64(len(l))
		p := partProgress{committed: end, end: end}
		if len(l) > 0 {
			p = partProgress{committed: l[0], end: end, left: l}
		}
		progress[part] = p
	}
	return progress
}

// commit records the partitions' progress.
func (r *redriver) commit(ctx context.Context, progress map[int32]partProgress) error {
	offs := kadm.Offsets{}
	for part, p := range progress {
		offs.Add(kadm.Offset{Topic: r.res.Topic, Partition: part, At: p.committed, LeaderEpoch: -1, Metadata: p.String()})
	}
	return r.commitOffsets(context.WithoutCancel(ctx), offs)
}

func (r *redriver) commitOffsets(ctx context.Context, offs kadm.Offsets) error {
	err := r.coordinated(ctx, func() error {
		resp, err := r.adm.CommitOffsets(ctx, r.opts.Group, offs)
		if err == nil {
			err = resp.Error()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("kafka: commit the redrive's progress to group %s: %w", r.opts.Group, err)
	}
	return nil
}

// coordinated runs a request to the group's coordinator, again while Kafka
// answers that the coordinator is not available yet (a fresh cluster
// creating its offsets topic, a coordinator moving), for up to the Kafka
// timeout.
func (r *redriver) coordinated(ctx context.Context, request func() error) error {
	deadline := time.Now().Add(r.opts.KafkaTimeout)
	wait := 50 * time.Millisecond
	for {
		err := request()
		if err == nil || !kerr.IsRetriable(err) || time.Now().Add(wait).After(deadline) {
			return err
		}
		r.opts.Logger.Debug("dlq redrive: the group coordinator is not available yet; trying again", "group", r.opts.Group, "error", err.Error())
		if err := retry.Sleep(ctx, wait); err != nil {
			return err
		}
		wait = min(2*wait, time.Second)
	}
}

// selected reports whether rec matches the selection.
func (r *redriver) selected(rec *kgo.Record) bool {
	if len(r.opts.Reasons) > 0 && !slices.Contains(r.opts.Reasons, recordHeader(rec, sink.HeaderDLQReason)) {
		return false
	}
	if len(r.opts.Topics) > 0 && !slices.Contains(r.opts.Topics, recordHeader(rec, sink.HeaderDLQTopic)) {
		return false
	}
	if !r.opts.Since.IsZero() && rec.Timestamp.Before(r.opts.Since) {
		return false
	}
	return r.opts.Until.IsZero() || rec.Timestamp.Before(r.opts.Until)
}

// redrive decides what becomes of rec and makes its record: for its topic,
// or, when it still fails, for the dead-letter topic again. A dry run takes
// this same path (the record made, its topic looked up, its schema and size
// checked) and only does not send it, so what it lists is what a redrive
// does.
func (r *redriver) redrive(ctx context.Context, rec *kgo.Record) (RedriveItem, sink.Record, error) {
	item := RedriveItem{Partition: rec.Partition, Offset: rec.Offset, ID: recordHeader(rec, sink.HeaderID),
		Reason: recordHeader(rec, sink.HeaderDLQReason), Intended: recordHeader(rec, sink.HeaderDLQTopic), Table: recordHeader(rec, sink.HeaderDLQTable)}
	attempts, _ := strconv.Atoi(recordHeader(rec, sink.HeaderDLQAttempts))
	again := func(out sink.Record, cause error) (RedriveItem, sink.Record, error) {
		item.Outcome, item.Cause, item.Target = RedriveDeadLettered, cause, r.res.Topic
		return item, out.WithHeader(sink.HeaderDLQAttempts, []byte(strconv.Itoa(attempts+1))), nil
	}
	ev, err := r.fromRow(ctx, rec, item.Table, item.ID)
	if err != nil {
		return item, sink.Record{}, err
	}
	if ev != nil {
		item.FromRow = true
		if r.out.Kind == decoder.KindFiltered {
			item.Outcome = RedriveFiltered
			return item, sink.Record{}, nil
		}
		p, err := prepareEvent(ctx, r.snk, ev, false, r.opts.Logger)
		if err != nil {
			return item, sink.Record{}, err
		}
		if p.Reason != "" {
			return again(p.Record, p.Cause)
		}
		item.Outcome, item.Target = RedriveSent, p.Record.Topic()
		return item, p.Record, nil
	}
	// The row is gone: the stored record, when it holds the event whole.
	t, err := r.table(ctx, item.Table) // inspected by fromRow; nil when not configured
	if err != nil {
		return item, sink.Record{}, err
	}
	cause := storedCause(rec, item.Reason, t)
	if cause == nil {
		stored := *rec
		stored.Topic = item.Intended
		out, err := retryPrepare(ctx, r.opts.Logger, item.ID, func() (sink.Record, error) {
			return r.snk.PrepareStored(ctx, &stored, item.ID, t.payloadType())
		})
		if err == nil {
			item.Outcome, item.Target = RedriveSent, out.Topic()
			return item, out, nil
		}
		if _, ok := sink.RefusalReason(err); !ok {
			return item, sink.Record{}, err
		}
		cause = err
	}
	out, err := retryPrepare(ctx, r.opts.Logger, item.ID, func() (sink.Record, error) {
		return r.snk.PrepareDeadLetterAgain(ctx, rec, item.ID, cause, attempts+1)
	})
	if err != nil {
		return item, sink.Record{}, err
	}
	return again(out, cause)
}

// fromRow returns the event of the row id of table (schema.name) when the
// row is still there, nil otherwise, with the dead-letter record's WAL
// position and commit time.
func (r *redriver) fromRow(ctx context.Context, rec *kgo.Record, table, id string) (*decoder.Event, error) {
	t, err := r.table(ctx, table)
	if t == nil || err != nil || id == "" {
		return nil, err
	}
	vals, err := t.rowByID(ctx, r.conn, id)
	if vals == nil || err != nil {
		return nil, err
	}
	if err := r.dec.DecodeRow(t.name, t.cols, vals, r.commitTime(rec), &r.out); err != nil {
		return nil, fmt.Errorf("redrive event %s: %w", id, err)
	}
	ev := &r.out.Event
	ev.LSN, _ = pglogrepl.ParseLSN(recordHeader(rec, sink.HeaderLSN))
	if x, err := strconv.ParseUint(recordHeader(rec, sink.HeaderXID), 10, 32); err == nil {
		ev.XID = uint32(x)
	}
	return ev, nil
}

// commitTime is the commit time of rec's event: its HeaderDLQCommitTime,
// to the microsecond. A dead letter written before walrelay wrote that
// header has only its Kafka timestamp, to the millisecond (the event's
// commit time, or its timestamp column's value when the table has one);
// that is used then, and said once per redrive.
func (r *redriver) commitTime(rec *kgo.Record) time.Time {
	if t, err := time.Parse(time.RFC3339Nano, recordHeader(rec, sink.HeaderDLQCommitTime)); err == nil {
		return t
	}
	if !r.warnedTime {
		r.warnedTime = true
		r.opts.Logger.Warn("dlq redrive: a dead letter has no "+sink.HeaderDLQCommitTime+" header (dead-lettered by an older walrelay): its event is made again with its Kafka timestamp as commit time, to the millisecond (ce_time, and the record timestamp when the table has no timestamp column)",
			"partition", rec.Partition, "offset", rec.Offset, "id", recordHeader(rec, sink.HeaderID))
	}
	return rec.Timestamp
}

// table returns the configured outbox table name (schema.name) as
// inspected, nil when it is not configured.
func (r *redriver) table(ctx context.Context, name string) (*outboxTable, error) {
	if t, ok := r.tables[name]; ok {
		return t, nil
	}
	var t *outboxTable
	for i, dt := range r.opts.Decoder.Tables {
		if dt.Schema+"."+dt.Name != name {
			continue
		}
		if r.conn == nil {
			conn, err := connectPlain(ctx, r.opts.DSN, "walrelay dlq redrive", r.opts.PasswordSource)
			if err != nil {
				return nil, err
			}
			r.conn = conn
		}
		var err error
		if t, err = inspectTable(ctx, r.conn, i, dt, ""); err != nil {
			return nil, err
		}
	}
	r.tables[name] = t
	return t, nil
}

// storedLacks says why a dead letter of table t cannot make the record the
// relay makes of its event (nil when it can): the relay puts values of
// columns other than the payload, aggregate id and headers into the record,
// and a dead letter does not keep them. A nil t (a table not configured)
// lacks nothing.
// storedCause says why the stored dead letter rec (reason) of a row that is
// gone cannot go to its topic as it is, nil when it can: only a refusal of
// Kafka's, of a record whose stored form holds everything run put in it.
// unsupported_value is a refusal when the sink could not write an envelope
// value, but the decoder's too (a value it cannot read): either way a value
// was the problem, and the row that could be fixed is gone.
func storedCause(rec *kgo.Record, reason string, t *outboxTable) error {
	switch {
	case recordHeader(rec, sink.HeaderDLQPayloadOmitted) != "":
		return errors.New("the dead-letter record lacks the payload (too large) and the row is no longer in the outbox table")
	case !sink.IsRefusal(reason) || reason == string(sink.ReasonUnsupportedValue):
		return fmt.Errorf("the event's values were the problem (%s) and the row is no longer in the outbox table to be fixed", reason)
	}
	return t.storedLacks()
}

func (t *outboxTable) storedLacks() error {
	switch {
	case t == nil:
		return nil
	case len(t.columns.Envelope) > 0:
		cols := make([]string, len(t.columns.Envelope))
		for i, e := range t.columns.Envelope {
			cols[i] = e.Column
		}
		return fmt.Errorf("the table places columns in the record's envelope (%s) and the row is no longer in the outbox table: their values are gone",
			strings.Join(cols, ", "))
	case t.columns.Partition != "":
		return fmt.Errorf("the table's partition column %s chose the record's partition and the row is no longer in the outbox table: its value is gone",
			t.columns.Partition)
	}
	return nil
}

// payloadType is the type OID of t's payload column, 0 when not known.
func (t *outboxTable) payloadType() uint32 {
	if t == nil {
		return 0
	}
	for _, c := range t.cols {
		if c.Name == t.columns.Payload {
			return c.Type
		}
	}
	return 0
}

// progressFormat heads a partition's commit metadata.
const progressFormat = "walrelay-redrive-v1"

// String encodes p's end and left offsets (relative, base 36) as commit
// metadata.
func (p partProgress) String() string {
	var b strings.Builder
	b.WriteString(progressFormat)
	b.WriteByte(':')
	b.WriteString(strconv.FormatInt(p.end-p.committed, 36))
	prev := p.committed
	for i, o := range p.left {
		if i == 0 {
			b.WriteByte(':')
		} else {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(o-prev, 36))
		prev = o
	}
	return b.String()
}

// parseProgress reads the progress committed at offset at with metadata;
// metadata it does not understand means nothing is known above at.
func parseProgress(at int64, metadata string) partProgress {
	p := partProgress{committed: at, end: at}
	rest, ok := strings.CutPrefix(metadata, progressFormat+":")
	if !ok {
		return p
	}
	endS, leftS, _ := strings.Cut(rest, ":")
	n, err := strconv.ParseInt(endS, 36, 64)
	if err != nil || n < 0 {
		return p
	}
	var left []int64
	prev := at
	if leftS != "" {
		for _, s := range strings.Split(leftS, ",") {
			d, err := strconv.ParseInt(s, 36, 64)
			if err != nil || d < 0 {
				return p
			}
			prev += d
			left = append(left, prev)
		}
	}
	p.end, p.left = at+n, left
	return p
}

// retryPrepare calls prepare until it succeeds or fails for good, waiting
// with backoff while Kafka is unavailable.
func retryPrepare(ctx context.Context, log *slog.Logger, id string, prepare func() (sink.Record, error)) (sink.Record, error) {
	rec, err := prepare()
	for attempt := 1; err != nil && sink.IsRetryable(err); attempt++ {
		wait := retry.KafkaWait(attempt)
		log.Warn("kafka unavailable while preparing an event's record; retrying", "id", id, "attempt", attempt,
			"retry_in", wait.String(), "error", err.Error())
		if err := retry.Sleep(ctx, wait); err != nil {
			return sink.Record{}, err
		}
		rec, err = prepare()
	}
	return rec, err
}
