package replication

import (
	"context"
	"fmt"

	"github.com/jackc/pglogrepl"
)

// EmitMessage writes a transactional logical decoding message
// (pg_logical_emit_message(true, prefix, content)) in a transaction of its
// own and returns its position. Every slot of the database streams it: the
// heartbeat keeps an idle slot moving with it, and cutover writes one past
// walrelay's start for the old system to confirm. Use an ordinary
// connection: the message is decoded only once its transaction commits.
func EmitMessage(ctx context.Context, q Querier, prefix, content string) (pglogrepl.LSN, error) {
	rows, err := q.queryRows(ctx, "SELECT pg_logical_emit_message(true, $1, $2)::text", prefix, content)
	if err != nil {
		return 0, fmt.Errorf("emit logical message %s: %w", prefix, err)
	}
	if len(rows) != 1 || len(rows[0]) != 1 {
		return 0, fmt.Errorf("emit logical message %s: unexpected result", prefix)
	}
	lsn, err := pglogrepl.ParseLSN(string(rows[0][0]))
	if err != nil {
		return 0, fmt.Errorf("emit logical message %s: %w", prefix, err)
	}
	return lsn, nil
}
