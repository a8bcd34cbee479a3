package main

import (
	"context"
	"fmt"
	"io"

	"github.com/walrelay/walrelay/cmd/walrelay/internal/config"
	"github.com/walrelay/walrelay/operator"
)

const redriveUsage = `Usage: walrelay dlq redrive [--reason R,...] [--intended-topic T,...] [--since TIME] [--until TIME] [flags]

Sends dead-lettered events to the topics they were meant for, once the cause
is gone (a topic created, a size limit raised, a schema fixed). An event whose
row is still in its outbox table is made again from the row, as walrelay run
makes it; otherwise the stored record goes back without the dead-letter
headers. Either way it keeps its id, walrelay.lsn and walrelay.xid: it is the
event's first delivery to its topic. One that still fails is dead-lettered
again (walrelay.dlq.attempts counts the tries). It takes every setting of
walrelay run; give it the same ones (the dead-letter topic is dlq-topic).

The consumer group --redrive-group remembers what was redriven: a second
redrive sends nothing the first one sent, and dead letters the selection left
out stay for a later one (past 500 of them in a partition before a selected
one, the oldest are copied to the end of the partition). --dry-run decides
each dead letter as the redrive does and lists what would go where; it sends
and commits nothing, and creates no topic (Kafka only validates the creation
of a missing one). Records are sent at least once (an interrupted redrive
commits nothing and the next sends again); consumers deduplicate on the id
header.

Exit codes: 0 done, 1 failure, 2 invalid usage or configuration.
`

const redriveMore = `dlq redrive also takes every other setting of walrelay run (see 'walrelay run -h').`

// redriveGroups are the settings dlq redrive -h lists.
var redriveGroups = []string{config.GroupGeneral, config.GroupPostgres, config.GroupTables, config.GroupKafka,
	config.GroupSecurity, config.GroupRecords, config.GroupRedrive}

// redriveCommand is `walrelay dlq redrive`.
func redriveCommand(ctx context.Context, cfg config.RedriveConfig, c *call) int {
	opts, err := cfg.Redrive(c.log)
	if err != nil {
		return c.result("dlq redrive failed", err)
	}
	opts.OnRecord = func(it operator.RedriveItem) { printRedriveItem(c, cfg.DryRun, it) }
	res, err := operator.Redrive(ctx, opts)
	if err != nil {
		if err, isConfig := settingError(err); isConfig {
			c.invalid(err)
			return ExitConfig
		}
		c.failed("dlq redrive failed", err, "sent", res.Sent, "dead_lettered_again", res.DeadLettered)
		return ExitFailure
	}
	printRedriveResult(c.stdout, cfg.DryRun, res)
	return ExitOK
}

// printRedriveItem lists a dead letter: on stdout in a dry run, else in the
// log.
func printRedriveItem(c *call, dryRun bool, it operator.RedriveItem) {
	from := "from the stored record"
	if it.FromRow {
		from = "from its row in " + it.Table
	}
	if dryRun {
		if it.Outcome == operator.RedriveFiltered {
			fmt.Fprintf(c.stdout, "%d/%d id %s reason %s: would not go, its table's filter no longer publishes it (%s)\n", it.Partition, it.Offset, it.ID, it.Reason, from)
			return
		}
		if it.Cause != nil {
			fmt.Fprintf(c.stdout, "%d/%d id %s reason %s: would go to %s again, %s: %v\n", it.Partition, it.Offset, it.ID, it.Reason, it.Target, from, it.Cause)
			return
		}
		fmt.Fprintf(c.stdout, "%d/%d id %s reason %s: would go to %s, %s\n", it.Partition, it.Offset, it.ID, it.Reason, it.Target, from)
		return
	}
	attrs := []any{"partition", it.Partition, "offset", it.Offset, "id", it.ID, "reason", it.Reason, "topic", it.Target, "from_row", it.FromRow, "outcome", string(it.Outcome)}
	if it.Cause != nil {
		c.log.Warn("dead letter still fails", append(attrs, "error", it.Cause.Error())...)
		return
	}
	c.log.Info("redriving dead letter", attrs...)
}

func printRedriveResult(w io.Writer, dryRun bool, res operator.RedriveResult) {
	if dryRun {
		fmt.Fprintf(w, "dry run: %d dead letters of %s would be redriven (nothing sent, group %s unchanged)\n", res.Selected, res.Topic, res.Group)
	} else {
		fmt.Fprintf(w, "sent %d dead letters of %s to their topics (%d made again from their rows), %d dead-lettered again, %d no longer published by the tables' filters; progress committed to group %s\n",
			res.Sent, res.Topic, res.FromRow, res.DeadLettered, res.Filtered, res.Group)
	}
	if res.Left > 0 {
		fmt.Fprintf(w, "  %d dead letters left for a later redrive (not selected, or of a transaction still open)\n", res.Left)
	}
	if res.Moved > 0 {
		verb := "copied"
		if dryRun {
			verb = "would be copied"
		}
		fmt.Fprintf(w, "  %d dead letters left behind %s to the end of their partition (more than the group remembers came before a selected one)\n", res.Moved, verb)
	}
	if res.Deferred > 0 {
		fmt.Fprintf(w, "  %d offsets not redriven yet (more left-behind records than the group remembers, or transactions still open): redrive again\n", res.Deferred)
	}
}
