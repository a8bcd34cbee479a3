package relay

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walrelay/walrelay/replication"
)

// heartbeat writes a transactional logical message every interval until ctx
// is done. Each one is a small transaction in the slot's stream: it keeps an
// idle slot moving and measures emit-to-decode latency. Failures are logged
// (once per failure streak) and counted; they never stop the relay.
func heartbeat(ctx context.Context, dsn string, src replication.PasswordSource, interval time.Duration, obs Observer, log *slog.Logger) {
	periodic{dsn: dsn, password: src, interval: interval, timeout: interval,
		run: func(ctx context.Context, conn *pgconn.PgConn) error {
			_, err := replication.EmitMessage(ctx, replication.NewQuerier(conn), HeartbeatPrefix, strconv.FormatInt(time.Now().UnixNano(), 10))
			return err
		},
		failed: func(err error, first bool) {
			obs.HeartbeatFailed()
			if first {
				log.Warn("heartbeat failed; retrying every interval", "error", err)
			}
		},
		recovered: func() { log.Info("heartbeat recovered") },
	}.loop(ctx)
}
