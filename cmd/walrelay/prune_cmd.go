package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/walrelay/walrelay/cmd/walrelay/internal/config"
	"github.com/walrelay/walrelay/operator"
)

const pruneUsage = `Usage: walrelay prune --older-than AGE [flags]

Deletes outbox rows whose created_at is older than AGE, --batch-size rows per
transaction, until none is left. For a table partitioned by day (the optional
migrations/partitioned file), it drops the daily partitions whose day ended
before the cutoff with walrelay.outbox_drop_partitions, then deletes the old
rows of the default partition.

Pruning only deletes rows. Each row's event went into the WAL when the row was
inserted, and walrelay reads events from the WAL, not from the table: deleting
a row neither retracts its event nor sends it again. The rows are kept for
inspection and as the only copy to re-send from (walrelay replay) should the
replication slot be lost; this is why AGE must be at least 1h.

The guard: however old, a row goes only once --slot has confirmed its
transaction (its xmin is older than the slot's catalog_xmin, which Postgres
advances only past positions walrelay confirmed after Kafka acknowledged
them). While the slot is missing or invalidated, rows go only when they are
older than the last event delivered to Kafka less --recovery-margin, which
prune finds with --kafka-brokers and the topic settings of walrelay run;
without them no row goes. prune says how many old rows it kept and why;
--force deletes them too. A daily partition is dropped only when every row in
it may go (checked under its lock, partition by partition).

AGE is a Go duration (90m, 72h) or days (3d, 1d12h). On a large plain table,
an index on the created_at column keeps each batch cheap.

Exit codes: 0 done, 1 failure (batches already committed stay deleted),
2 invalid usage or configuration.
`

// pruneCommand is `walrelay prune`.
func pruneCommand(ctx context.Context, cfg config.PruneConfig, c *call) int {
	opts, err := cfg.Prune(c.log)
	var res operator.PruneResult
	if err == nil {
		res, err = operator.Prune(ctx, opts, c.log)
	}
	if err != nil {
		if err, isConfig := settingError(err); isConfig {
			c.invalid(err)
			return ExitConfig
		}
		return c.result("prune failed", err, "table", cfg.Table, "rows", res.Rows, "partitions", len(res.Partitions))
	}
	fmt.Fprintln(c.stdout, pruneSummary(res))
	return ExitOK
}

// pruneSummary is the one line prune prints of what it did.
func pruneSummary(r operator.PruneResult) string {
	return pruneDone(r) + pruneKept(r)
}

// pruneKept is what the summary says of the rows the guard kept.
func pruneKept(r operator.PruneResult) string {
	switch {
	case r.Forced:
		return " (--force: unconfirmed rows included)"
	case r.Kept == 0:
		return ""
	}
	verb, parts := "kept", ""
	if r.DryRun {
		verb = "would keep"
	}
	if len(r.KeptPartitions) > 0 {
		parts = fmt.Sprintf(" (and the partitions holding them: %s)", strings.Join(r.KeptPartitions, ", "))
	}
	return fmt.Sprintf("; %s %d rows older than the cutoff%s: %s; --force deletes them", verb, r.Kept, parts, r.KeptWhy)
}

// pruneDone is the summary of what went.
func pruneDone(r operator.PruneResult) string {
	cutoff := r.Cutoff.UTC().Format(time.RFC3339)
	if !r.Partitioned {
		if r.DryRun {
			return fmt.Sprintf("would prune %d rows older than %s from %s (dry run, nothing deleted)", r.Rows, cutoff, r.Table)
		}
		return fmt.Sprintf("pruned %d rows older than %s from %s", r.Rows, cutoff, r.Table)
	}
	parts := make([]string, len(r.Partitions))
	for i, p := range r.Partitions {
		parts[i] = p
		if r.DryRun && i < len(r.PartitionRows) {
			parts[i] = fmt.Sprintf("%s: %d rows", p, r.PartitionRows[i])
		}
	}
	list := ""
	if len(parts) > 0 {
		list = " (" + strings.Join(parts, ", ") + ")"
	}
	def := "no default partition"
	if r.DefaultPartition != "" {
		def = fmt.Sprintf("%d rows from the default partition %s", r.Rows, r.DefaultPartition)
	}
	if r.DryRun {
		return fmt.Sprintf("would drop %d partitions%s and prune %s, older than %s, from %s (dry run, nothing deleted)",
			len(r.Partitions), list, def, cutoff, r.Table)
	}
	return fmt.Sprintf("dropped %d partitions%s and pruned %s, older than %s, from %s",
		len(r.Partitions), list, def, cutoff, r.Table)
}
