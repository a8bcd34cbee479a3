package replication

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Querier is a connection that ReadSlot and EmitMessage run their statements
// on. NewQuerier wraps an ordinary connection; a Conn (a replication
// connection) uses its own. Statements pass their values as $1, $2, ...
// placeholders either way, so that no caller builds SQL from values.
type Querier interface {
	// queryRows runs sql with args bound to $1, $2, ... and returns the rows
	// of its result, every value in text format (nil for NULL).
	queryRows(ctx context.Context, sql string, args ...string) ([][][]byte, error)
}

// NewQuerier returns an ordinary connection (not a replication one) as a
// Querier that sends values as parameters of the extended query protocol.
// For a *pgx.Conn, pass its PgConn(). Use the connection from one goroutine
// at a time, as always with pgconn.
func NewQuerier(conn *pgconn.PgConn) Querier { return paramQuerier{conn} }

// paramQuerier binds values as parameters ($1): the extended protocol.
type paramQuerier struct{ conn *pgconn.PgConn }

func (q paramQuerier) queryRows(ctx context.Context, sql string, args ...string) ([][][]byte, error) {
	params := make([][]byte, len(args))
	for i, a := range args {
		params[i] = []byte(a)
	}
	res := q.conn.ExecParams(ctx, sql, params, nil, nil, nil).Read()
	return res.Rows, res.Err
}

// simpleQuerier speaks the simple query protocol only, the one a
// replication connection (replication=database) accepts: Postgres refuses
// the extended protocol there ("extended query protocol not supported in a
// replication connection", SQLSTATE 08P01, which IsRetryable would take for
// a lost connection). Values are quoted by the driver (EscapeString) into
// the statement.
type simpleQuerier struct{ conn *pgconn.PgConn }

func (q simpleQuerier) queryRows(ctx context.Context, sql string, args ...string) ([][][]byte, error) {
	bound, err := bindLiterals(sql, args, q.conn.EscapeString)
	if err != nil {
		return nil, err
	}
	res, err := q.conn.Exec(ctx, bound).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(res) != 1 {
		return nil, fmt.Errorf("%d results, want 1", len(res))
	}
	return res[0].Rows, res[0].Err
}

// bindLiterals replaces each $n of sql (a statement of this package, with no
// $ in literals or identifiers) with args[n-1] as a string literal quoted by
// escape. A $n without its value is an error.
func bindLiterals(sql string, args []string, escape func(string) (string, error)) (string, error) {
	var b strings.Builder
	for {
		i := strings.IndexByte(sql, '$')
		if i < 0 {
			b.WriteString(sql)
			return b.String(), nil
		}
		b.WriteString(sql[:i])
		j := i + 1
		for j < len(sql) && sql[j] >= '0' && sql[j] <= '9' {
			j++
		}
		n, err := strconv.Atoi(sql[i+1 : j])
		if err != nil || n < 1 || n > len(args) {
			return "", fmt.Errorf("bind %q: no value for %s", sql, sql[i:j])
		}
		esc, err := escape(args[n-1])
		if err != nil {
			return "", err
		}
		b.WriteString("'" + esc + "'")
		sql = sql[j:]
	}
}
