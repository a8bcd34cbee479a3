package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/walrelay/walrelay/cmd/walrelay/internal/config"
	"github.com/walrelay/walrelay/operator"
)

const replayUsage = `Usage: walrelay replay [--since TIME] [--until TIME] [--aggregate-type T,...] [flags]
       walrelay replay --since-last-delivered [flags]   (recovery after a lost slot)
       walrelay replay --resume TOKEN [flags]           (go on after an interruption)

Re-publishes outbox rows still in their tables to Kafka: each row becomes the
record walrelay run made of its insert (topic, key, value, headers), marked
with the header walrelay.replay=<replay id> instead of walrelay.lsn and
walrelay.xid. It takes every setting of walrelay run, so give it the same
ones (or the same --config file). It reads one snapshot of the tables on an
ordinary connection, never touches the slot, and may run beside walrelay run.

Selection: the rows whose created-at-column is in [since, until) and that
match every list given (event-id, aggregate-type, aggregate-id, event-type).
--dry-run counts them, shows their time span and topics, and sends nothing.

--since-last-delivered recovers after a lost slot (dropped, invalidated, or
missing after a failover): it refuses while the slot is valid, reads the
newest event walrelay delivered back from Kafka, creates the new slot, and
replays every row since that event less --recovery-margin. Start walrelay run
(same settings) once it has finished: it streams from the new slot.

Progress: a bar on a terminal, else a log line every --progress-interval with
the resume token of what Kafka acknowledged so far. Interrupted (SIGINT,
SIGTERM), replay waits for what it sent and prints the command that resumes
it; after kill -9, resume with the token of the last progress line. A resumed
replay sends none of the acknowledged rows again but may repeat a few after
them (consumers deduplicate on the id header).

Exit codes: 0 done, 1 failure, nothing to replay, or interrupted (the resume
command is printed), 2 invalid usage or configuration.
`

// replayMore is printed by replay -h below the settings.
const replayMore = `replay also takes every other setting of walrelay run (see 'walrelay run -h'):
give it the same settings, so that its records are the ones run made.`

// replayGroups are the settings replay -h lists.
var replayGroups = []string{config.GroupGeneral, config.GroupPostgres, config.GroupTables, config.GroupKafka,
	config.GroupSecurity, config.GroupDelivery, config.GroupRecords, config.GroupReplay}

// replayCommand is `walrelay replay`.
func replayCommand(ctx context.Context, cfg config.ReplayConfig, c *call) int {
	return replay(ctx, cfg, c, handOver)
}

// replay runs the replay (or recovery) of cfg and prints its outcome; done
// is the line that ends a recovery.
func replay(ctx context.Context, cfg config.ReplayConfig, c *call, done string) int {
	ro, err := cfg.Replay(c.log)
	if err != nil {
		return c.result("replay failed", err)
	}
	var (
		rec  operator.Recovery
		opts operator.RecoveryOptions
	)
	if cfg.SinceLastDelivered {
		if opts, err = cfg.Recovery(c.log); err != nil {
			return c.result("replay failed", err)
		}
		if rec, err = operator.PlanRecovery(ctx, opts); err != nil {
			return replayFailed(c, err)
		}
		printRecoveryPlan(c.stdout, rec)
		if !cfg.DryRun {
			mo, err := cfg.SlotMark(c.log)
			if err == nil {
				err = operator.MarkSlot(ctx, mo)
			}
			if err != nil {
				return replayFailed(c, err)
			}
			reused, err := rec.CreateSlot(ctx, opts)
			if err != nil {
				return replayFailed(c, err)
			}
			if reused {
				fmt.Fprintf(c.stdout, "kept replication slot %q of the unfinished recovery: it holds every transaction committed since that recovery began\n", rec.Pending.Name)
			} else {
				fmt.Fprintf(c.stdout, "created replication slot %q: it keeps every transaction committed from now on, and becomes %q once the replay has finished\n",
					rec.Pending.Name, cfg.Slot)
			}
		}
		ro.Selection.Since = rec.Since
	}
	p := newReplayProgress(c, cfg)
	ro.Progress, ro.ProgressInterval = p.callback(), p.interval
	res, err := operator.Replay(ctx, ro)
	p.finish()

	var nothing *operator.NothingToReplayError
	switch {
	case errors.As(err, &nothing) && cfg.SinceLastDelivered:
		fmt.Fprintf(c.stdout, "%s\n", nothing.Error())
		return finishRecovery(ctx, c, cfg, opts, &rec, done, rec.Lost(ro, err))
	case err != nil:
		code := replayFailed(c, err)
		switch {
		case res.ResumeToken != "":
			resumeSuggestion(cfg, res.ResumeToken).print(c)
		case cfg.SinceLastDelivered && !cfg.DryRun:
			retrySuggestion(cfg).print(c)
		}
		return code
	case cfg.DryRun:
		printDryRun(c.stdout, cfg, res)
		if cfg.SinceLastDelivered {
			return finishRecovery(ctx, c, cfg, opts, &rec, done, rec.Lost(ro, nil))
		}
		return ExitOK
	}
	printReplayed(c.stdout, cfg, res)
	if !res.Complete {
		fmt.Fprintf(c.stdout, "replay interrupted: %d rows acknowledged by Kafka, the rest not sent\n", res.Acked+res.Resumed)
		resumeSuggestion(cfg, res.ResumeToken).print(c)
		return ExitFailure
	}
	if cfg.SinceLastDelivered {
		return finishRecovery(ctx, c, cfg, opts, &rec, done, rec.Lost(ro, nil))
	}
	return ExitOK
}

// finishRecovery ends a recovery whose replay sent every row it could:
// the new slot is handed over (not in a dry run), done is printed, and
// lost, the events it could not replay, is reported (exit 1).
func finishRecovery(ctx context.Context, c *call, cfg config.ReplayConfig, opts operator.RecoveryOptions, rec *operator.Recovery, done string, lost error) int {
	if !cfg.DryRun {
		if err := rec.HandOver(ctx, opts); err != nil {
			code := replayFailed(c, err)
			retrySuggestion(cfg).print(c)
			return code
		}
		fmt.Fprintf(c.stdout, "replication slot %q is in place: walrelay run streams from it every transaction committed since the recovery made it\n", cfg.Slot)
	}
	if lost != nil {
		c.failed("recovery incomplete", lost)
		return ExitFailure
	}
	if !cfg.DryRun {
		fmt.Fprintln(c.stdout, done)
	}
	return ExitOK
}

// handOver ends a recovery: the operator starts walrelay run.
const handOver = "recovery done: start walrelay run with the same settings now; it streams from the new slot"

// replayFailed reports err, a setting refused (exit 2) or a failure.
func replayFailed(c *call, err error) int {
	if err, isConfig := settingError(err); isConfig {
		c.invalid(err)
		return ExitConfig
	}
	c.failed("replay failed", err)
	return ExitFailure
}

// resumeSuggestion is the replay command that resumes from token: the same
// settings but the time range and id (the token carries them).
// A recovery's resumption is a recovery again (--since-last-delivered):
// it keeps the unfinished recovery's slot, starts from the same time and
// hands the slot over at the end.
func resumeSuggestion(cfg config.ReplayConfig, token string) suggestion {
	def := config.DefaultReplayConfig()
	words := []string{"replay", "--resume=" + token}
	if cfg.SinceLastDelivered {
		words = []string{"replay", "--since-last-delivered", "--resume=" + token}
	}
	return newSuggestion("resume with", words, &cfg, &def,
		carried("since", "until", "since-last-delivered", "replay-id", "resume", "dry-run"))
}

// retrySuggestion is the recovery again, after a failure before Kafka
// acknowledged a row: it keeps the unfinished recovery's slot and starts
// from the same time.
func retrySuggestion(cfg config.ReplayConfig) suggestion {
	def := config.DefaultReplayConfig()
	return newSuggestion("the recovery is unfinished (walrelay run and prune wait for it); run it again with", []string{"replay", "--since-last-delivered"}, &cfg, &def,
		carried("since", "until", "since-last-delivered", "resume", "dry-run"))
}

// printRecoveryPlan says where the recovery starts and why.
func printRecoveryPlan(w io.Writer, rec operator.Recovery) {
	state := "missing"
	if rec.Slot.Lost {
		state = "invalidated (wal_status lost)"
	}
	fmt.Fprintf(w, "replication slot %q is %s\n", rec.Slot.Name, state)
	d := rec.Delivered
	if !d.Found {
		fmt.Fprintf(w, "no event walrelay delivered was found in %d topics: replaying every row the outbox tables hold\n", d.Topics)
	} else {
		fmt.Fprintf(w, "last delivered event: id %s at %s (topic %s, partition %d, offset %d, walrelay.lsn %s)\n",
			d.ID, d.Time.UTC().Format(time.RFC3339Nano), d.Topic, d.Partition, d.Offset, d.LSN)
		fmt.Fprintf(w, "replaying every row since %s (%s before it)\n", rec.Since.UTC().Format(time.RFC3339Nano), rec.Margin)
	}
	if d.Checkpoint != nil {
		fmt.Fprintf(w, "exactly-once checkpoint of the slot: %s\n", d.Checkpoint)
	}
}

// printDryRun shows what a replay would send.
func printDryRun(w io.Writer, cfg config.ReplayConfig, res operator.ReplayResult) {
	var total int64
	for _, t := range res.Tables {
		total += t.Rows - t.Filtered
	}
	fmt.Fprintf(w, "dry run: %s would be replayed%s (nothing sent)\n", rows(total), rangeText(res))
	for _, t := range res.Tables {
		fmt.Fprintf(w, "  %s: %s%s\n", t.Table, rows(t.Rows-t.Filtered), spanText(cfg.CreatedAtColumn, t.Oldest, t.Newest))
		topics := make([]string, 0, len(t.Topics))
		for topic := range t.Topics {
			topics = append(topics, topic)
		}
		sort.Strings(topics)
		for _, topic := range topics {
			fmt.Fprintf(w, "    %s: %s\n", topic, rows(t.Topics[topic]))
		}
	}
	if res.Filtered > 0 {
		fmt.Fprintf(w, "  %d more selected rows would not be sent: the tables' filters do not publish them (walrelay run does not either)\n", res.Filtered)
	}
	printNotes(w, res)
}

// rows is "1 row" or "n rows".
func rows[N int | int64](n N) string {
	if n == 1 {
		return "1 row"
	}
	return fmt.Sprintf("%d rows", n)
}

// printReplayed is the summary of a replay that ran.
func printReplayed(w io.Writer, cfg config.ReplayConfig, res operator.ReplayResult) {
	var parts []string
	for _, t := range res.Tables {
		parts = append(parts, fmt.Sprintf("%s: %d selected%s", t.Table, t.Rows, spanText(cfg.CreatedAtColumn, t.Oldest, t.Newest)))
	}
	rate := "" // a rate of one row, or of less than a second, says nothing
	if s := res.Elapsed.Seconds(); s >= 1 && res.Acked > 1 {
		rate = fmt.Sprintf(" (%.0f rows/s)", float64(res.Acked)/s)
	}
	fmt.Fprintf(w, "replayed %s%s in %s%s, replay id %s (header walrelay.replay)\n",
		rows(res.Acked), rangeText(res), res.Elapsed.Round(time.Millisecond), rate, res.ID)
	if len(parts) > 0 {
		fmt.Fprintf(w, "  %s\n", strings.Join(parts, "; "))
	}
	if res.Resumed > 0 {
		fmt.Fprintf(w, "  %d more rows were acknowledged by the runs this one resumed\n", res.Resumed)
	}
	if res.DeadLettered > 0 {
		fmt.Fprintf(w, "  %d of them went to the dead-letter topic (the log says why each)\n", res.DeadLettered)
	}
	if res.Filtered > 0 {
		fmt.Fprintf(w, "  %d rows were not sent: the tables' filters do not publish them (walrelay run does not either)\n", res.Filtered)
	}
	printNotes(w, res)
}

func printNotes(w io.Writer, res operator.ReplayResult) {
	if !res.CommitTimes {
		fmt.Fprintln(w, "  note: the server does not keep commit timestamps (track_commit_timestamp is off): the records carry the rows' time column as Kafka timestamp, not the commit time walrelay run gave them")
	}
	for _, n := range res.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
}

// rangeText is the replay's time range, "" when unbounded.
func rangeText(res operator.ReplayResult) string {
	f := func(t time.Time, none string) string {
		if t.IsZero() {
			return none
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	if res.Since.IsZero() && res.Until.IsZero() {
		return ""
	}
	return fmt.Sprintf(" from %s until %s", f(res.Since, "the oldest row"), f(res.Until, "the newest"))
}

// spanText is the span of a table's selected rows, "" when none.
func spanText(col string, oldest, newest time.Time) string {
	if oldest.IsZero() {
		return ""
	}
	return fmt.Sprintf(", %s %s .. %s", col, oldest.UTC().Format(time.RFC3339Nano), newest.UTC().Format(time.RFC3339Nano))
}

// replayProgress shows a replay's progress: a bar redrawn on the terminal,
// or log lines carrying the resume token.
type replayProgress struct {
	c        *call
	mode     string
	interval time.Duration

	mu       sync.Mutex
	last     operator.ReplayProgress
	lastAt   time.Time
	rate     float64 // rows acknowledged per second, smoothed
	drawn    bool
	finished bool
}

// barInterval is how often the bar is redrawn.
const barInterval = 250 * time.Millisecond

func newReplayProgress(c *call, cfg config.ReplayConfig) *replayProgress {
	mode := cfg.Progress
	if mode == config.ProgressAuto {
		mode = config.ProgressLog
		if c.terminal {
			mode = config.ProgressBar
		}
	}
	if cfg.DryRun {
		mode = config.ProgressNone
	}
	p := &replayProgress{c: c, mode: mode, interval: cfg.ProgressInterval}
	if mode == config.ProgressBar {
		p.interval = barInterval
	}
	return p
}

// callback is ReplayOptions.Progress (nil with no display).
func (p *replayProgress) callback() func(operator.ReplayProgress) {
	if p.mode == config.ProgressNone {
		return nil
	}
	return p.report
}

func (p *replayProgress) report(rp operator.ReplayProgress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.finished {
		return
	}
	now := time.Now()
	if !p.lastAt.IsZero() {
		if dt := now.Sub(p.lastAt).Seconds(); dt > 0 {
			r := float64(rp.Acked-p.last.Acked) / dt
			if p.rate == 0 {
				p.rate = r
			} else {
				p.rate = 0.7*p.rate + 0.3*r
			}
		}
	}
	p.last, p.lastAt = rp, now
	eta := time.Duration(-1)
	if left := rp.Total - rp.Acked - rp.Filtered; p.rate > 0 && left >= 0 {
		eta = time.Duration(float64(left) / p.rate * float64(time.Second)).Round(time.Second)
	}
	if p.mode == config.ProgressBar {
		fmt.Fprintf(p.c.stderr, "\r%s", bar(rp, p.rate, eta))
		p.drawn = true
		return
	}
	attrs := []any{"table", rp.Table, "acked", rp.Acked, "sent", rp.Sent, "total", rp.Total, "dead_lettered", rp.DeadLettered,
		"filtered", rp.Filtered, "rows_per_second", int64(p.rate)}
	if eta >= 0 {
		attrs = append(attrs, "eta", eta.String())
	}
	p.c.log.Info("replay progress", append(attrs, "resume_token", rp.ResumeToken)...)
}

// finish ends the display (the bar's line).
func (p *replayProgress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.finished = true
	if p.drawn {
		fmt.Fprintln(p.c.stderr)
	}
}

// bar is one line: [#####.....] acked/total pct rate ETA.
func bar(rp operator.ReplayProgress, rate float64, eta time.Duration) string {
	const width = 30
	frac := 0.0
	if rp.Total > 0 {
		frac = float64(rp.Acked+rp.Filtered) / float64(rp.Total)
	}
	frac = min(max(frac, 0), 1)
	n := int(frac * width)
	etaText := "ETA --"
	if eta >= 0 {
		etaText = "ETA " + eta.String()
	}
	return fmt.Sprintf("replay [%s%s] %d/%d %3.0f%% %.0f rows/s %s   ",
		strings.Repeat("#", n), strings.Repeat(".", width-n), rp.Acked+rp.Filtered, rp.Total, frac*100, rate, etaText)
}
