package relay

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walrelay/walrelay/replication"
)

// The outbox table is the safety net: its rows are what a replay or a
// recovery publishes again. Two things keep it in view: the prune guard (a
// row whose event may not be delivered yet is never pruned, the operator
// package's) and the retained span (how far back a replay can reach,
// replication.ReadOutboxSpan), shown by walrelay status and exported as
// metrics (through the Observer) here.

// defaultTimeColumn is the outbox table's time column by default (its
// created_at, as the replay's).
const defaultTimeColumn = "created_at"

// OutboxSpanOptions turn on the walrelay_outbox_* metrics of the relay.
type OutboxSpanOptions struct {
	// Interval between two readings (a reading without an index on the
	// time column scans the table).
	Interval time.Duration
	// TimeColumn is each table's time column ("": defaultTimeColumn).
	TimeColumn string
	// MinRetained, when positive, is exported as
	// walrelay_outbox_retention_target_seconds for the alert on a retained
	// span shorter than it.
	MinRetained time.Duration
}

// startSpanPoll reads the outbox tables' span every interval and sets the
// walrelay_outbox_* gauges through obs, unless opts.OutboxSpan is nil or
// there is no Observer; it
// returns the function that stops it. Failures are counted and logged once
// per streak.
func startSpanPoll(ctx context.Context, opts Options, obs Observer) (stop func()) {
	so := opts.OutboxSpan
	if so == nil || so.Interval <= 0 || len(opts.Decoder.Tables) == 0 || opts.Observer == nil {
		return func() {}
	}
	timeCol := so.TimeColumn
	if timeCol == "" {
		timeCol = defaultTimeColumn
	}
	obs.OutboxSpanPolling(so.MinRetained)
	log := opts.Logger
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	// noTimeColumn holds the tables without the time column (Debezium's
	// outbox table has none): told once with the fix, then left out, since
	// the relay works without it.
	noTimeColumn := map[string]bool{}
	warned := false // a failure streak was logged
	go func() {
		defer close(done)
		periodic{dsn: opts.Replication.DSN, password: opts.Replication.PasswordSource, interval: so.Interval, timeout: max(so.Interval, time.Minute), atOnce: true,
			run: func(ctx context.Context, conn *pgconn.PgConn) error {
				var errs []error
				for _, t := range opts.Decoder.Tables {
					if noTimeColumn[t.Schema+"."+t.Name] {
						continue
					}
					sp, err := replication.ReadOutboxSpan(ctx, conn, t.Schema, t.Name, timeCol)
					var tce *replication.TimeColumnError
					if errors.As(err, &tce) {
						noTimeColumn[tce.Table] = true
						log.Warn("the walrelay_outbox_* metrics leave out an outbox table without its time column (relaying is not affected)", "table", tce.Table, "error", err)
						continue
					}
					if err != nil {
						errs = append(errs, err)
						continue
					}
					obs.OutboxSpanRead(sp, time.Now())
				}
				if len(errs) == 0 {
					obs.OutboxSpanPolled(true)
				}
				return errors.Join(errs...)
			},
			failed: func(err error, first bool) {
				obs.OutboxSpanPolled(false)
				// A server that refuses the connection (a wrong password, the
				// server down) is the relay's own stop or retry to report, once.
				var ce *pgconn.ConnectError
				if first && !errors.As(err, &ce) {
					warned = true
					log.Warn("reading the outbox tables' span failed; the walrelay_outbox_* metrics are stale until it works again", "error", err)
				}
			},
			recovered: func() {
				if warned {
					log.Info("reading the outbox tables' span works again")
				}
				warned = false
			},
		}.loop(pctx)
	}()
	return func() {
		cancel()
		<-done
	}
}
