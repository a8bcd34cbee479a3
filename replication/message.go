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

// EmitGrant is who may call one overload of pg_logical_emit_message (text
// or bytea content; Postgres 17 adds a flush argument).
type EmitGrant struct {
	Function string // its signature, e.g. pg_logical_emit_message(boolean,text,text)
	Public   bool   // PUBLIC may execute it: every role that can connect
	Self     bool   // the connection's role may execute it
}

// EmitGrants reads through q who may call each overload of
// pg_logical_emit_message, in the order of their signatures: any role that
// may call it can write an event of the tableless outbox.
func EmitGrants(ctx context.Context, q Querier) ([]EmitGrant, error) {
	rows, err := q.queryRows(ctx, `SELECT p.oid::regprocedure::text,
       has_function_privilege('public', p.oid, 'EXECUTE'),
       has_function_privilege(current_user, p.oid, 'EXECUTE')
  FROM pg_catalog.pg_proc p
 WHERE p.proname = 'pg_logical_emit_message' AND p.pronamespace = 'pg_catalog'::regnamespace
 ORDER BY 1`)
	if err != nil {
		return nil, err
	}
	out := make([]EmitGrant, 0, len(rows))
	for _, r := range rows {
		if len(r) != 3 {
			return nil, fmt.Errorf("unexpected result")
		}
		out = append(out, EmitGrant{Function: string(r[0]), Public: string(r[1]) == "t", Self: string(r[2]) == "t"})
	}
	return out, nil
}
