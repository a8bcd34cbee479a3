package replication

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Conn is an open replication connection positioned at a slot. Use it from
// one goroutine.
type Conn struct {
	cfg     Config
	tables  []TableName
	conn    *pgconn.PgConn
	version int         // server_version_num
	facts   serverFacts // the role's privileges and the platform, read by checkServer

	// Start is the slot's confirmed_flush_lsn when the connection opened:
	// streaming resumes from there.
	Start pglogrepl.LSN
	// Created reports that Open created the slot; CreatedPublication that
	// it created the publication.
	Created            bool
	CreatedPublication bool
	// TableOIDs are the outbox tables' OIDs by "schema.name", looked up when
	// the connection opened, after OIDsReadAt was read (pg_current_wal_lsn()).
	// A publication holds tables by OID: the decoder uses them to recognise
	// an outbox table that was renamed or moved (decoder.Table.OID).
	TableOIDs  map[string]uint32
	OIDsReadAt pglogrepl.LSN
	// System is the server's system identifier and timeline when the
	// connection opened.
	System Identity
	// WALEnd is how far the server had flushed WAL when the connection
	// opened (IDENTIFY_SYSTEM's xlogpos): no position of its history lies
	// beyond it yet.
	WALEnd pglogrepl.LSN
	// Standby reports that the server is in recovery: walrelay decodes on a
	// standby (Postgres 16+), where it creates the slot; the publication
	// comes from the primary, and WAL is written only there.
	Standby bool
	// Warnings are settings that make walrelay unsafe in a way it cannot
	// refuse (e.g. a failover slot whose changes no standby must confirm
	// first); the caller logs them once.
	Warnings []string
}

// connect validates cfg and opens a replication=database connection.
func connect(ctx context.Context, cfg Config) (*Conn, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Conn{cfg: cfg}
	for _, t := range cfg.Tables {
		tn, _ := ParseTable(t)
		c.tables = append(c.tables, tn)
	}
	pc, err := pgconn.ParseConfig(cfg.DSN)
	if err != nil {
		return nil, &SettingError{Setting: "DSN", Err: err}
	}
	if pc.RuntimeParams == nil {
		pc.RuntimeParams = map[string]string{}
	}
	pc.RuntimeParams["replication"] = "database"
	if pc.RuntimeParams["application_name"] == "" {
		pc.RuntimeParams["application_name"] = "walrelay"
	}
	conn, err := ConnectConfig(ctx, pc, cfg.PasswordSource)
	if err != nil {
		if note := DSNPooler(pc); note != "" {
			// The pooler's own refusal says nothing about the cause.
			return nil, &PrereqError{Check: "connect", Problem: err.Error(), Fix: note, Config: []string{"DSN"}, Err: err}
		}
		return nil, ExplainConnect(err, pc, true)
	}
	c.conn = conn
	return c, nil
}

// Close closes the connection.
func (c *Conn) Close(ctx context.Context) error { return c.conn.Close(ctx) }

func (c *Conn) query(ctx context.Context, sql string) ([][][]byte, error) {
	res, err := c.conn.Exec(ctx, sql).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(res) == 0 {
		return nil, nil
	}
	return res[len(res)-1].Rows, res[len(res)-1].Err
}

// querier runs ReadSlot's statements on the replication connection.
func (c *Conn) querier() Querier { return simpleQuerier{c.conn} }

func (c *Conn) lit(s string) (string, error) {
	esc, err := c.conn.EscapeString(s)
	if err != nil {
		return "", err
	}
	return "'" + esc + "'", nil
}

// ExplainConnect turns a failure to connect to Postgres as cfg's user into a
// *PrereqError with the fix, for the errors a new setup meets: a wrong
// password, no pg_hba.conf entry, a role that may not log in or replicate,
// a missing database. Other errors (unreachable server, ...) come back
// wrapped unchanged. replication tells a replication connection.
func ExplainConnect(err error, cfg *pgconn.Config, replication bool) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return &UnreachableError{Err: err}
	}
	user, db := pgx.Identifier{cfg.User}.Sanitize(), cfg.Database
	var fix string
	var fields []string
	switch {
	case pgErr.Code == pgerrcode.InvalidPassword:
		fix = fmt.Sprintf("check the user and password in the Postgres DSN (or PGPASSWORD/.pgpass); a superuser sets it with ALTER ROLE %s PASSWORD '...';", user)
		fields = []string{"DSN"}
	case pgErr.Code == pgerrcode.InvalidAuthorizationSpecification && strings.Contains(pgErr.Message, "not permitted to log in"):
		fix = fmt.Sprintf("run ALTER ROLE %s WITH LOGIN; as a superuser", user)
	case pgErr.Code == pgerrcode.InvalidAuthorizationSpecification:
		fix = fmt.Sprintf("add a pg_hba.conf line that lets user %q connect to database %q from this host (a logical replication connection matches the database's name, not the keyword replication), e.g. host %s %s <address>/32 scram-sha-256, then run SELECT pg_reload_conf();", cfg.User, db, db, cfg.User)
	case pgErr.Code == pgerrcode.InsufficientPrivilege && replication:
		fix = fmt.Sprintf("logical replication needs it: on self-managed Postgres, Cloud SQL, AlloyDB, Azure, Neon and Supabase run ALTER ROLE %s WITH REPLICATION; as an administrator; on Amazon RDS and Aurora run GRANT rds_replication TO %s; as the master user, with rds.logical_replication = 1 in the (cluster) parameter group", user, user)
	case pgErr.Code == pgerrcode.InvalidCatalogName:
		fix = fmt.Sprintf("check the database name in the Postgres DSN; database %q does not exist", db)
		fields = []string{"DSN"}
	default:
		return &UnreachableError{Err: err}
	}
	return &PrereqError{Check: "connect", Problem: err.Error(), Fix: fix, Config: fields, Err: err}
}

// Connect opens an ordinary (not replication) connection to dsn with src's
// password (nil: the DSN's), with failures explained as ExplainConnect does.
func Connect(ctx context.Context, dsn string, src PasswordSource) (*pgconn.PgConn, error) {
	pc, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil, &SettingError{Setting: "DSN", Err: err}
	}
	conn, err := ConnectConfig(ctx, pc, src)
	if err != nil {
		return nil, ExplainConnect(err, pc, false)
	}
	return conn, nil
}

// UnreachableError is a connection to Postgres that failed before the
// server answered (refused, unreachable, timed out) or with an error that
// no setup explains. IsRetryable decides on its cause.
type UnreachableError struct{ Err error }

func (e *UnreachableError) Error() string {
	return e.Err.Error() + " (check the host and port in the Postgres DSN and that Postgres is up)"
}
func (e *UnreachableError) Unwrap() error    { return e.Err }
func (e *UnreachableError) Fields() []string { return configFields("DSN") }
