package relay

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// heartbeatPrefix is the logical message prefix of walrelay heartbeats.
const heartbeatPrefix = "walrelay.heartbeat"

// heartbeat writes a transactional logical message every interval until ctx
// is done. Each one is a small transaction in the slot's stream: it keeps an
// idle slot moving and measures emit-to-decode latency. Failures are logged
// (once per failure streak) and counted; they never stop the relay.
func heartbeat(ctx context.Context, dsn string, interval time.Duration, m *metrics, log *slog.Logger) {
	var conn *pgconn.PgConn
	defer func() {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}()
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := func() error {
			cctx, cancel := context.WithTimeout(ctx, interval)
			defer cancel()
			if conn == nil || conn.IsClosed() {
				c, err := pgconn.Connect(cctx, dsn)
				if err != nil {
					return err
				}
				conn = c
			}
			sql := "SELECT pg_logical_emit_message(true, '" + heartbeatPrefix + "', '" + strconv.FormatInt(time.Now().UnixNano(), 10) + "')"
			_, err := conn.Exec(cctx, sql).ReadAll()
			return err
		}()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			m.heartbeatErrors.Inc()
			if !failing {
				log.Warn("heartbeat failed; retrying every interval", "error", err)
			}
			failing = true
			if conn != nil {
				_ = conn.Close(context.Background())
				conn = nil
			}
			continue
		}
		if failing {
			log.Info("heartbeat recovered")
		}
		failing = false
	}
}
