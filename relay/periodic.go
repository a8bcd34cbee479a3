package relay

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walrelay/walrelay/replication"
)

// periodic is a task run on one ordinary Postgres connection at a fixed
// interval (the heartbeat, the slot poll). Failures never stop the relay:
// each is reported to failed, with first set on the first of a streak (so the
// caller logs once), and recovered is called when a streak ends.
type periodic struct {
	dsn      string
	password replication.PasswordSource // nil: the DSN's
	interval time.Duration
	timeout  time.Duration // bound of one run, connecting included
	atOnce   bool          // run once before the first tick
	run      func(context.Context, *pgconn.PgConn) error

	failed    func(err error, first bool)
	recovered func()
}

// loop runs the task until ctx is done. The connection is kept between runs,
// and replaced after an error that did not come from the server (a
// *pgconn.PgError leaves the connection usable). Blocks; call it in its own
// goroutine.
func (p periodic) loop(ctx context.Context) {
	var conn *pgconn.PgConn
	defer func() {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}()
	t := time.NewTicker(p.interval)
	defer t.Stop()
	failing := false
	for first := true; ; first = false {
		if !first || !p.atOnce {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		err := func() error {
			cctx, cancel := context.WithTimeout(ctx, p.timeout)
			defer cancel()
			if conn == nil || conn.IsClosed() {
				c, err := replication.Connect(cctx, p.dsn, p.password)
				if err != nil {
					return err
				}
				conn = c
			}
			return p.run(cctx, conn)
		}()
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			p.failed(err, !failing)
			failing = true
			var pgErr *pgconn.PgError
			if conn != nil && !errors.As(err, &pgErr) {
				_ = conn.Close(context.Background())
				conn = nil
			}
		case failing:
			p.recovered()
			failing = false
		}
	}
}
