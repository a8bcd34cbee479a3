package operator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walrelay/walrelay/migrations"
	"github.com/walrelay/walrelay/replication"
)

// MigrateOptions are what Migrate needs.
type MigrateOptions struct {
	DSN string
	// PasswordSource supplies the password of the connection to DSN (nil:
	// the DSN's).
	PasswordSource replication.PasswordSource
	// Table is the outbox table, schema.name.
	Table string
	// Partitioned creates the outbox partitioned by day
	// (migrations.Partitioned) before the default migrations.
	Partitioned bool
}

// Migrate applies walrelay's migrations (migrations.All) to opts.Table, as
// walrelay migrate does; with Partitioned, the partitioned outbox (daily
// partitions) is created first, so the default table definition then finds
// it in place. The migrations are idempotent: running it again changes
// nothing. A failure for lack of privilege says which GRANTs are missing.
func Migrate(ctx context.Context, opts MigrateOptions, log *slog.Logger) error {
	tn, err := replication.ParseTable(opts.Table)
	if err != nil {
		return &OptionError{Option: "Table", Err: err}
	}
	ms, err := migrations.All()
	if err != nil {
		return err
	}
	if opts.Partitioned {
		pms, err := migrations.Partitioned()
		if err != nil {
			return err
		}
		ms = append(pms, ms...)
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pc, err := pgconn.ParseConfig(opts.DSN)
	if err != nil {
		return &OptionError{Option: "DSN", Err: err}
	}
	conn, err := replication.ConnectConfig(cctx, pc, opts.PasswordSource)
	if err != nil {
		return replication.ExplainConnect(err, pc, false)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(cctx, migrations.CreateSchema(pgx.Identifier{tn.Schema}.Sanitize())).ReadAll(); err != nil {
		return migrateError(cctx, conn, tn.Schema, fmt.Errorf("create schema %s: %w", tn.Schema, err))
	}
	foreign, err := foreignColumns(cctx, conn, tn)
	if err != nil {
		return err
	}
	for _, m := range ms {
		if foreign && m.Name == migrations.EmitFile {
			log.Info("skipped migration: walrelay.emit writes walrelay's column names, which the existing table does not have (Debezium's outbox table, say); its writers insert rows themselves",
				"migration", m.Name, "table", tn.String())
			continue
		}
		if _, err := conn.Exec(cctx, m.Render(tn.Quoted())).ReadAll(); err != nil {
			return migrateError(cctx, conn, tn.Schema, fmt.Errorf("apply %s: %w", m.Name, err))
		}
		log.Info("applied migration", "migration", m.Name, "table", tn.String())
	}
	return nil
}

// foreignColumns reports whether table exists without the columns
// walrelay.emit writes (aggregate_type): a table created for another relay,
// such as Debezium's outbox table.
func foreignColumns(ctx context.Context, conn *pgconn.PgConn, tn replication.TableName) (bool, error) {
	res := conn.ExecParams(ctx, `SELECT to_regclass($1) IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_attribute
		  WHERE attrelid = to_regclass($1) AND attname = 'aggregate_type' AND attnum > 0 AND NOT attisdropped)`,
		[][]byte{[]byte(tn.Quoted())}, nil, nil, nil).Read()
	if res.Err != nil {
		return false, fmt.Errorf("inspect table %s: %w", tn, res.Err)
	}
	return string(res.Rows[0][0]) == "t", nil
}

// migrateError adds to a migration failure for lack of privilege (42501)
// the privileges the role lacks and the GRANTs that give them: CREATE on the
// database (CREATE SCHEMA, even IF NOT EXISTS), on the outbox's schema and on
// the walrelay schema when they exist.
func migrateError(ctx context.Context, conn *pgconn.PgConn, schema string, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		return err
	}
	lit, lerr := conn.EscapeString(schema)
	if lerr != nil {
		return err
	}
	res, qerr := conn.Exec(ctx, `SELECT current_user, current_database(), has_database_privilege(current_database(), 'CREATE'),
	    coalesce((SELECT has_schema_privilege(oid, 'CREATE') FROM pg_namespace WHERE nspname = '`+lit+`'), true),
	    coalesce((SELECT has_schema_privilege(oid, 'CREATE') FROM pg_namespace WHERE nspname = 'walrelay'), true)`).ReadAll()
	if qerr != nil || len(res) == 0 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 5 {
		return err
	}
	r := res[0].Rows[0]
	user := pgx.Identifier{string(r[0])}.Sanitize()
	var grants []string
	if string(r[2]) != "t" {
		grants = append(grants, fmt.Sprintf("GRANT CREATE ON DATABASE %s TO %s;", pgx.Identifier{string(r[1])}.Sanitize(), user))
	}
	for i, s := range []string{schema, "walrelay"} {
		if string(r[3+i]) != "t" && (i == 0 || s != schema) {
			grants = append(grants, fmt.Sprintf("GRANT CREATE ON SCHEMA %s TO %s;", pgx.Identifier{s}.Sanitize(), user))
		}
	}
	if len(grants) == 0 {
		return fmt.Errorf("%w; fix: run walrelay migrate as the owner of the existing outbox objects or as a superuser", err)
	}
	return fmt.Errorf("%w; fix: role %s needs: %s (run by the owner or a superuser), or run walrelay migrate as a role that has them",
		err, user, strings.Join(grants, " "))
}
