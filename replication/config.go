package replication

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Config configures the replication connection. Zero values take the
// documented defaults.
type Config struct {
	// DSN is an ordinary libpq URL or key=value DSN; replication=database is
	// added. Required.
	DSN string
	// Slot is the replication slot name. Default "walrelay".
	Slot string
	// Publication is the publication name. Default "walrelay".
	Publication string
	// Tables are the outbox tables, "schema.name" (schema defaults to public).
	Tables []string
	// Columns are the mapped columns of each table, by "schema.name": an
	// existing publication with a column list must publish them.
	Columns map[string][]string
	// CreateSlot creates the slot when missing. Default true (set
	// NoCreateSlot to refuse instead).
	NoCreateSlot bool
	// SlotMustExist marks a reconnect: the slot was in use before, so its
	// absence means it was dropped and events may have been skipped.
	SlotMustExist bool
	// NoCreatePublication refuses to start when the publication is missing
	// instead of creating it.
	NoCreatePublication bool
	// Messages streams logical decoding messages (pg_logical_emit_message);
	// needed for heartbeats and the tableless outbox. Default true (set
	// NoMessages to turn off).
	NoMessages bool
	// StatusInterval is how often a moved watermark is reported. Default 1s.
	StatusInterval time.Duration
	// KeepaliveInterval is the longest time between two status updates,
	// moved or not. Default 10s.
	KeepaliveInterval time.Duration
	// ShutdownTimeout bounds the drain after the stream is asked to stop.
	// Default 30s.
	ShutdownTimeout time.Duration
	// ServerTimeout is how long the stream may receive nothing at all from
	// Postgres while it is reading before it takes the connection for dead
	// (half-open) and reconnects. Status updates ask for a reply at least
	// every KeepaliveInterval, so a live server always answers sooner.
	// Default 30s.
	ServerTimeout time.Duration
	// Batches and BatchBytes size the read-ahead pool: at most Batches
	// batches of about BatchBytes each are read and not yet released.
	// Defaults 8 and 256 KiB.
	Batches    int
	BatchBytes int
	// SlotFailover creates the slot with failover = true, so that Postgres
	// 17+ synchronizes it to physical standbys (sync_replication_slots) and
	// walrelay can resume on a promoted standby. On an older server Open
	// refuses with a *PrereqError.
	SlotFailover bool
}

func (c *Config) setDefaults() {
	if c.Slot == "" {
		c.Slot = "walrelay"
	}
	if c.Publication == "" {
		c.Publication = "walrelay"
	}
	if c.StatusInterval == 0 {
		c.StatusInterval = time.Second
	}
	if c.KeepaliveInterval == 0 {
		c.KeepaliveInterval = 10 * time.Second
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 30 * time.Second
	}
	if c.ServerTimeout == 0 {
		c.ServerTimeout = max(30*time.Second, 3*c.KeepaliveInterval)
	}
	if c.Batches == 0 {
		c.Batches = 8
	}
	if c.BatchBytes == 0 {
		c.BatchBytes = 256 << 10
	}
}

// SettingError is a Config value Validate refuses. Setting names it as
// walrelay's flags do (postgres-dsn, slot, publication, table,
// status-interval); Err says why.
type SettingError struct {
	Setting string
	Err     error
}

func (e *SettingError) Error() string { return e.Setting + ": " + e.Err.Error() }
func (e *SettingError) Unwrap() error { return e.Err }

// Validate reports a configuration that cannot work as a *SettingError.
func (c Config) Validate() error {
	if c.DSN == "" {
		return &SettingError{"postgres-dsn", errors.New("required (set --postgres-dsn or WALRELAY_POSTGRES_DSN)")}
	}
	if _, err := pgconn.ParseConfig(c.DSN); err != nil {
		return &SettingError{"postgres-dsn", err}
	}
	for _, n := range []struct{ key, v string }{{"slot", c.Slot}, {"publication", c.Publication}} {
		if n.v == "" {
			continue
		}
		if err := ValidateIdentifier(n.v); err != nil {
			return &SettingError{n.key, err}
		}
	}
	if n := c.Slot; n != "" {
		for _, r := range n {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
				return &SettingError{"slot", fmt.Errorf("%q may contain only lower case letters, digits and '_' (Postgres' rule for slot names); choose e.g. --slot %s", n, suggestSlot(n))}
			}
		}
	}
	for _, t := range c.Tables {
		if _, err := ParseTable(t); err != nil {
			return &SettingError{"table", err}
		}
	}
	if c.StatusInterval < 0 || c.KeepaliveInterval < 0 || c.ShutdownTimeout < 0 || c.Batches < 0 || c.BatchBytes < 0 {
		return &SettingError{"status-interval", errors.New("replication intervals and sizes must not be negative")}
	}
	return nil
}

// suggestSlot turns s into a valid slot name: lower case, other characters
// replaced by '_'.
func suggestSlot(s string) string {
	b := []byte(strings.ToLower(s))
	for i, r := range b {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

// ValidateIdentifier reports a name Postgres cannot take as an identifier
// (longer than 63 bytes, or with a NUL byte).
func ValidateIdentifier(s string) error {
	if len(s) > 63 {
		return fmt.Errorf("%q is longer than 63 bytes", s)
	}
	if strings.ContainsRune(s, 0) {
		return fmt.Errorf("%q contains a NUL byte", s)
	}
	return nil
}

// TableName is a schema-qualified table.
type TableName struct{ Schema, Name string }

// ParseTable parses "schema.name" or "name" (schema public). Names are taken
// literally (case-sensitive, no quoting).
func ParseTable(s string) (TableName, error) {
	schema, name, ok := strings.Cut(s, ".")
	if !ok {
		schema, name = "public", s
	}
	if schema == "" || name == "" || strings.Contains(name, ".") {
		return TableName{}, fmt.Errorf("%q is not schema.table", s)
	}
	if err := ValidateIdentifier(schema); err != nil {
		return TableName{}, err
	}
	if err := ValidateIdentifier(name); err != nil {
		return TableName{}, err
	}
	return TableName{schema, name}, nil
}

// String returns "schema.name".
func (t TableName) String() string { return t.Schema + "." + t.Name }

// Quoted returns the table as a quoted SQL identifier.
func (t TableName) Quoted() string { return pgx.Identifier{t.Schema, t.Name}.Sanitize() }

// PrereqError is a missing prerequisite, with what to do about it.
type PrereqError struct {
	Check   string // short name: connect, wal_level, privilege, table, publication, slot
	Problem string
	Fix     string
	Err     error // the underlying error, if any
}

// ErrMissing is the cause of a *PrereqError for an outbox table, publication
// or slot that does not exist.
var ErrMissing = errors.New("does not exist")

func (e *PrereqError) Error() string {
	return fmt.Sprintf("%s: %s; fix: %s", e.Check, e.Problem, e.Fix)
}

// Unwrap returns the underlying error, if any.
func (e *PrereqError) Unwrap() error { return e.Err }

// ExplainConnect turns a failure to connect to Postgres as cfg's user into a
// *PrereqError with the fix, for the errors a new setup meets: a wrong
// password, no pg_hba.conf entry, a role that may not log in or replicate,
// a missing database. Other errors (unreachable server, ...) come back
// wrapped unchanged. replication tells a replication connection.
func ExplainConnect(err error, cfg *pgconn.Config, replication bool) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return fmt.Errorf("connect to postgres: %w", err)
	}
	user, db := pgx.Identifier{cfg.User}.Sanitize(), cfg.Database
	var fix string
	switch {
	case pgErr.Code == pgerrcode.InvalidPassword:
		fix = fmt.Sprintf("check the user and password in --postgres-dsn (WALRELAY_POSTGRES_DSN, or PGPASSWORD/.pgpass); a superuser sets it with ALTER ROLE %s PASSWORD '...';", user)
	case pgErr.Code == pgerrcode.InvalidAuthorizationSpecification && strings.Contains(pgErr.Message, "not permitted to log in"):
		fix = fmt.Sprintf("run ALTER ROLE %s WITH LOGIN; as a superuser", user)
	case pgErr.Code == pgerrcode.InvalidAuthorizationSpecification:
		fix = fmt.Sprintf("add a pg_hba.conf line that lets user %q connect to database %q from this host (a logical replication connection matches the database's name, not the keyword replication), e.g. host %s %s <address>/32 scram-sha-256, then run SELECT pg_reload_conf();", cfg.User, db, db, cfg.User)
	case pgErr.Code == pgerrcode.InsufficientPrivilege && replication:
		fix = fmt.Sprintf("run ALTER ROLE %s WITH REPLICATION; as a superuser (logical replication needs it)", user)
	case pgErr.Code == pgerrcode.InvalidCatalogName:
		fix = fmt.Sprintf("check the database name in --postgres-dsn; database %q does not exist", db)
	default:
		return fmt.Errorf("connect to postgres: %w", err)
	}
	return &PrereqError{Check: "connect", Problem: "connect to postgres: " + err.Error(), Fix: fix, Err: err}
}

// ErrSlotInUse reports that another process streams from the slot.
var ErrSlotInUse = errors.New("replication slot is in use by another process")

// ErrServerEnded reports that the server ended the replication stream on its
// own (CopyDone or CommandComplete, as a walsender does when Postgres shuts
// down); the caller reconnects.
var ErrServerEnded = errors.New("server ended the replication stream")

// IsRetryable reports whether err is a known transient failure worth a
// reconnect with backoff: a lost or refused connection (network errors, EOF,
// timeouts, errors pgconn marks safe to retry), a server that ended or went
// silent, the slot in use, or one of the SQLSTATEs of a server going away or
// not accepting connections yet (class 08 connection exception, 57P01
// admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now, 53300
// too_many_connections, 55006 object_in_use). It is an allow-list: any other
// error (a bad configuration, a missing prerequisite, an authentication or
// privilege failure, a protocol error) is not retried, so walrelay stops and
// says why instead of reconnecting forever.
func IsRetryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var pe *PrereqError
	if errors.As(err, &pe) {
		return false
	}
	if errors.Is(err, ErrSlotInUse) || errors.Is(err, ErrServerSilent) || errors.Is(err, ErrServerEnded) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case pgerrcode.AdminShutdown, pgerrcode.CrashShutdown, pgerrcode.CannotConnectNow, pgerrcode.TooManyConnections, pgerrcode.ObjectInUse:
			return true
		}
		return pgerrcode.IsConnectionException(pgErr.Code)
	}
	if pgconn.SafeToRetry(err) || pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "remote error" {
		return false // a TLS alert from the server: a configuration problem
	}
	var ne net.Error
	return errors.As(err, &ne)
}

// Conn is an open replication connection positioned at a slot. Use it from
// one goroutine.
type Conn struct {
	cfg     Config
	tables  []TableName
	conn    *pgconn.PgConn
	version int // server_version_num

	// Start is the slot's confirmed_flush_lsn when the connection opened:
	// streaming resumes from there.
	Start pglogrepl.LSN
	// Created reports that Open created the slot.
	Created bool
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
}

// Open connects with replication=database, checks the prerequisites, creates
// the publication and slot when missing (as configured) and reads the slot's
// confirmed position. Prerequisite failures are *PrereqError.
func Open(ctx context.Context, cfg Config) (*Conn, error) {
	c, err := connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := c.setup(ctx); err != nil {
		_ = c.conn.Close(context.Background())
		return nil, err
	}
	if err := c.identify(ctx); err != nil {
		_ = c.conn.Close(context.Background())
		return nil, err
	}
	return c, nil
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
		return nil, fmt.Errorf("postgres-dsn: %w", err)
	}
	if pc.RuntimeParams == nil {
		pc.RuntimeParams = map[string]string{}
	}
	pc.RuntimeParams["replication"] = "database"
	if pc.RuntimeParams["application_name"] == "" {
		pc.RuntimeParams["application_name"] = "walrelay"
	}
	conn, err := pgconn.ConnectConfig(ctx, pc)
	if err != nil {
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

func (c *Conn) lit(s string) (string, error) {
	esc, err := c.conn.EscapeString(s)
	if err != nil {
		return "", err
	}
	return "'" + esc + "'", nil
}

func (c *Conn) setup(ctx context.Context) error {
	if err := c.checkServer(ctx); err != nil {
		return err
	}
	// The WAL position first, then the OIDs: a change at or after it was
	// written after the lookup began (see decoder.Config.OIDsReadAt).
	rows, err := c.query(ctx, "SELECT pg_current_wal_lsn()::text")
	if err != nil {
		return fmt.Errorf("read the current WAL position: %w", err)
	}
	if len(rows) != 1 || len(rows[0]) != 1 {
		return errors.New("read the current WAL position: unexpected result")
	}
	if c.OIDsReadAt, err = pglogrepl.ParseLSN(string(rows[0][0])); err != nil {
		return fmt.Errorf("read the current WAL position: %w", err)
	}
	c.TableOIDs = make(map[string]uint32, len(c.tables))
	for _, t := range c.tables {
		oid, err := c.checkTable(ctx, t)
		if err != nil {
			return err
		}
		c.TableOIDs[t.String()] = oid
	}
	if err := c.ensurePublication(ctx); err != nil {
		return err
	}
	return c.ensureSlot(ctx)
}

func (c *Conn) checkServer(ctx context.Context) error {
	rows, err := c.query(ctx, "SELECT current_setting('wal_level'), current_setting('server_version_num')::int, "+
		"(SELECT rolsuper OR rolreplication FROM pg_roles WHERE rolname = current_user), current_user")
	if err != nil {
		return fmt.Errorf("check server settings: %w", err)
	}
	if len(rows) != 1 || len(rows[0]) != 4 {
		return errors.New("check server settings: unexpected result")
	}
	walLevel, version, canReplicate, user := string(rows[0][0]), string(rows[0][1]), string(rows[0][2]), string(rows[0][3])
	if walLevel != "logical" {
		return &PrereqError{Check: "wal_level", Problem: fmt.Sprintf("wal_level is %q, logical decoding needs \"logical\"", walLevel),
			Fix: "run ALTER SYSTEM SET wal_level = logical; (or set it in postgresql.conf) and restart Postgres"}
	}
	if v := version; len(v) < 6 || v < "140000" {
		return &PrereqError{Check: "server_version", Problem: "Postgres " + v + " is too old",
			Fix: "use Postgres 14 or newer (pgoutput messages need 14)"}
	}
	c.version, _ = strconv.Atoi(version)
	if canReplicate != "t" {
		return &PrereqError{Check: "privilege", Problem: fmt.Sprintf("role %q has no REPLICATION privilege", user),
			Fix: fmt.Sprintf("run ALTER ROLE %s WITH REPLICATION; as a superuser", pgx.Identifier{user}.Sanitize())}
	}
	return nil
}

// checkTable reports a missing table, else returns its OID.
func (c *Conn) checkTable(ctx context.Context, t TableName) (uint32, error) {
	ls, err := c.lit(t.Quoted())
	if err != nil {
		return 0, err
	}
	rows, err := c.query(ctx, "SELECT coalesce(to_regclass("+ls+")::oid, 0)")
	if err != nil {
		return 0, fmt.Errorf("check table %s: %w", t, err)
	}
	var oid uint64
	if len(rows) == 1 && len(rows[0]) == 1 {
		oid, _ = strconv.ParseUint(string(rows[0][0]), 10, 32)
	}
	if oid == 0 {
		return 0, &PrereqError{Check: "table", Problem: fmt.Sprintf("outbox table %s does not exist", t),
			Fix: fmt.Sprintf("create it with `walrelay migrate --table %s`, or point --table at your outbox table (if you renamed or moved it, at its new name, or rename it back)", t), Err: ErrMissing}
	}
	return uint32(oid), nil
}

func (c *Conn) ensurePublication(ctx context.Context) error {
	pub, err := c.lit(c.cfg.Publication)
	if err != nil {
		return err
	}
	rows, err := c.query(ctx, "SELECT 1 FROM pg_publication WHERE pubname = "+pub)
	if err != nil {
		return fmt.Errorf("look up publication: %w", err)
	}
	ident := pgx.Identifier{c.cfg.Publication}.Sanitize()
	if len(rows) == 0 {
		if c.cfg.NoCreatePublication {
			return &PrereqError{Check: "publication", Problem: fmt.Sprintf("publication %q does not exist", c.cfg.Publication),
				Fix: fmt.Sprintf("run CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert', publish_via_partition_root = true);", ident, c.quotedTables()), Err: ErrMissing}
		}
		if err := c.checkCanCreatePublication(ctx, ident); err != nil {
			return err
		}
		// publish_via_partition_root: inserts into a partitioned outbox arrive
		// under the outbox's name, not its daily partitions'. A tableless
		// outbox needs no table: logical messages are not filtered.
		sql := fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert', publish_via_partition_root = true)", ident, c.quotedTables())
		if len(c.tables) == 0 {
			sql = fmt.Sprintf("CREATE PUBLICATION %s WITH (publish = 'insert')", ident)
		}
		if _, err := c.query(ctx, sql); err != nil {
			return fmt.Errorf("create publication %s: %w", c.cfg.Publication, err)
		}
		return nil
	}
	return c.checkPublication(ctx, pub, ident)
}

// checkCanCreatePublication reports why the role could not create the
// publication: CREATE PUBLICATION needs the CREATE privilege on the database
// and ownership of each table (superusers have both).
func (c *Conn) checkCanCreatePublication(ctx context.Context, ident string) error {
	rows, err := c.query(ctx, "SELECT current_user, current_database(), has_database_privilege(current_database(), 'CREATE')")
	if err != nil {
		return fmt.Errorf("check publication privileges: %w", err)
	}
	if len(rows) != 1 || len(rows[0]) != 3 {
		return errors.New("check publication privileges: unexpected result")
	}
	user, db := string(rows[0][0]), string(rows[0][1])
	var missing []string
	var grants []string
	if string(rows[0][2]) != "t" {
		missing = append(missing, fmt.Sprintf("the CREATE privilege on database %q", db))
		grants = append(grants, fmt.Sprintf("GRANT CREATE ON DATABASE %s TO %s;", pgx.Identifier{db}.Sanitize(), pgx.Identifier{user}.Sanitize()))
	}
	owners := map[string]bool{}
	for _, t := range c.tables {
		lt, err := c.lit(t.Quoted())
		if err != nil {
			return err
		}
		rows, err := c.query(ctx, "SELECT pg_get_userbyid(relowner), pg_has_role(relowner, 'USAGE') FROM pg_class WHERE oid = to_regclass("+lt+")")
		if err != nil {
			return fmt.Errorf("check owner of %s: %w", t, err)
		}
		if len(rows) == 1 && len(rows[0]) == 2 && string(rows[0][1]) != "t" {
			owner := string(rows[0][0])
			missing = append(missing, fmt.Sprintf("ownership of table %s (owner %q)", t, owner))
			owners[owner] = true
		}
	}
	if len(missing) == 0 {
		return nil
	}
	create := fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert', publish_via_partition_root = true);", ident, c.quotedTables())
	if len(c.tables) == 0 {
		create = fmt.Sprintf("CREATE PUBLICATION %s WITH (publish = 'insert');", ident)
	}
	who := "a superuser"
	if len(owners) == 1 && len(grants) == 0 {
		for o := range owners {
			who = fmt.Sprintf("the table owner %q or a superuser", o)
		}
	}
	fix := fmt.Sprintf("have %s run %s (walrelay then uses it)", who, create)
	if len(owners) == 0 {
		fix = "have a superuser or the database owner run " + strings.Join(grants, " ") + " or create the publication: " + create
	}
	return &PrereqError{Check: "publication", Problem: fmt.Sprintf("role %q cannot create publication %q: it lacks %s", user, c.cfg.Publication, strings.Join(missing, " and ")),
		Fix: fix}
}

// checkPublication reports an existing publication that does not carry
// every outbox insert whole: inserts not published, a partitioned outbox
// published under its partitions' names, a table missing, a row filter, or
// a column list without a mapped column (each would drop events silently).
func (c *Conn) checkPublication(ctx context.Context, pub, ident string) error {
	if len(c.tables) == 0 {
		return nil // logical messages are not filtered by publications
	}
	rows, err := c.query(ctx, "SELECT pubinsert, pubviaroot FROM pg_publication WHERE pubname = "+pub)
	if err != nil {
		return fmt.Errorf("look up publication: %w", err)
	}
	if len(rows) != 1 || len(rows[0]) != 2 {
		return errors.New("look up publication: unexpected result")
	}
	name := c.cfg.Publication
	if string(rows[0][0]) != "t" {
		return &PrereqError{Check: "publication", Problem: fmt.Sprintf("publication %q does not publish inserts, so no outbox event reaches walrelay", name),
			Fix: fmt.Sprintf("run ALTER PUBLICATION %s SET (publish = 'insert'); (keep any other operations it must publish in the list)", ident)}
	}
	viaRoot := string(rows[0][1]) == "t"
	readd := func(t TableName) string {
		return fmt.Sprintf("run BEGIN; ALTER PUBLICATION %s DROP TABLE %s; ALTER PUBLICATION %s ADD TABLE %s; COMMIT;", ident, t.Quoted(), ident, t.Quoted())
	}
	for _, t := range c.tables {
		lt, err := c.lit(t.Quoted())
		if err != nil {
			return err
		}
		filter := "NULL, NULL"
		if c.version >= 150000 {
			filter = "array_to_json(pt.attnames)::text, pt.rowfilter"
		}
		rows, err := c.query(ctx, "SELECT c.relkind::text, pt.tablename IS NOT NULL, "+filter+", "+
			"(SELECT array_to_json(array_agg(a.attname))::text FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped) "+
			"FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "+
			"LEFT JOIN pg_publication_tables pt ON pt.pubname = "+pub+" AND pt.schemaname = n.nspname AND pt.tablename = c.relname "+
			"WHERE c.oid = to_regclass("+lt+")")
		if err != nil {
			return fmt.Errorf("check publication %s for table %s: %w", name, t, err)
		}
		if len(rows) == 0 {
			continue // a missing table is the table check's to report
		}
		if len(rows) != 1 || len(rows[0]) != 5 {
			return fmt.Errorf("check publication %s for table %s: unexpected result", name, t)
		}
		r := rows[0]
		relkind, included, published, rowFilter := string(r[0]), string(r[1]) == "t", r[2], r[3]
		switch {
		case relkind == "p" && !viaRoot:
			return &PrereqError{Check: "publication", Problem: fmt.Sprintf("publication %q sends inserts into the partitioned table %s under its partitions' names, which are not outbox tables", name, t),
				Fix: fmt.Sprintf("run ALTER PUBLICATION %s SET (publish_via_partition_root = true);", ident)}
		case !included:
			return &PrereqError{Check: "publication", Problem: fmt.Sprintf("publication %q does not include table %s", name, t),
				Fix: fmt.Sprintf("run ALTER PUBLICATION %s ADD TABLE %s;", ident, t.Quoted())}
		case rowFilter != nil:
			return &PrereqError{Check: "publication", Problem: fmt.Sprintf("publication %q publishes %s with a row filter (WHERE %s): events of other rows would be skipped", name, t, rowFilter),
				Fix: readd(t) + " (adds it back without the WHERE clause)"}
		}
		if published == nil {
			continue
		}
		var pubCols, tableCols []string
		if err := json.Unmarshal(published, &pubCols); err != nil {
			return fmt.Errorf("check publication %s for table %s: column list: %w", name, t, err)
		}
		if len(r[4]) > 0 {
			if err := json.Unmarshal(r[4], &tableCols); err != nil {
				return fmt.Errorf("check publication %s for table %s: columns: %w", name, t, err)
			}
		}
		for _, col := range c.cfg.Columns[t.String()] {
			// A mapped column the table lacks is the decoder's to report
			// (missing column); here only one the column list leaves out.
			if slices.Contains(tableCols, col) && !slices.Contains(pubCols, col) {
				return &PrereqError{Check: "publication", Problem: fmt.Sprintf("publication %q publishes %s with a column list that leaves out the mapped column %q", name, t, col),
					Fix: readd(t) + " (adds it back with all its columns)"}
			}
		}
	}
	return nil
}

// publicationNamesArg is pgoutput's publication_names option for one
// publication. pgoutput splits the value as a list of SQL identifiers, which
// folds unquoted names to lower case and splits at commas, so the name is
// quoted as an identifier, then as a string literal.
func publicationNamesArg(pub string) string {
	return "publication_names '" + strings.ReplaceAll(pgx.Identifier{pub}.Sanitize(), "'", "''") + "'"
}

func (c *Conn) quotedTables() string {
	q := make([]string, len(c.tables))
	for i, t := range c.tables {
		q[i] = t.Quoted()
	}
	return strings.Join(q, ", ")
}

func (c *Conn) ensureSlot(ctx context.Context) error {
	slot, err := c.lit(c.cfg.Slot)
	if err != nil {
		return err
	}
	q := "SELECT plugin, slot_type, database = current_database(), coalesce(confirmed_flush_lsn::text, ''), coalesce(wal_status, '') " +
		"FROM pg_replication_slots WHERE slot_name = " + slot
	rows, err := c.query(ctx, q)
	if err != nil {
		return fmt.Errorf("look up slot: %w", err)
	}
	if c.cfg.SlotFailover {
		if err := c.checkFailover(ctx, slot, len(rows) > 0); err != nil {
			return err
		}
	}
	if len(rows) == 0 {
		if c.cfg.SlotMustExist {
			return &PrereqError{Check: "slot", Problem: fmt.Sprintf("replication slot %q disappeared while walrelay was using it: events committed after its last confirmed position may have been skipped", c.cfg.Slot),
				Fix: "find out who dropped it; reconcile the outbox rows written since then (or replay them), then restart walrelay, which creates a new slot at the current position"}
		}
		if c.cfg.NoCreateSlot {
			return &PrereqError{Check: "slot", Problem: fmt.Sprintf("replication slot %q does not exist", c.cfg.Slot),
				Fix: fmt.Sprintf("run SELECT pg_create_logical_replication_slot(%s, 'pgoutput'); or start walrelay with --create-slot (only events written after its creation are relayed)", slot), Err: ErrMissing}
		}
		var res pglogrepl.CreateReplicationSlotResult
		if c.cfg.SlotFailover {
			res, err = pglogrepl.ParseCreateReplicationSlot(c.conn.Exec(ctx, failoverSlotSQL(c.cfg.Slot)))
		} else {
			res, err = pglogrepl.CreateReplicationSlot(ctx, c.conn, c.cfg.Slot, "pgoutput",
				pglogrepl.CreateReplicationSlotOptions{SnapshotAction: "NOEXPORT_SNAPSHOT", Mode: pglogrepl.LogicalReplication})
		}
		if err != nil {
			return fmt.Errorf("create slot %s: %w", c.cfg.Slot, err)
		}
		lsn, err := pglogrepl.ParseLSN(res.ConsistentPoint)
		if err != nil {
			return fmt.Errorf("create slot %s: consistent point: %w", c.cfg.Slot, err)
		}
		c.Start, c.Created = lsn, true
		return nil
	}
	r := rows[0]
	plugin, typ, sameDB, confirmed, walStatus := string(r[0]), string(r[1]), string(r[2]), string(r[3]), string(r[4])
	switch {
	case typ != "logical" || plugin != "pgoutput":
		return &PrereqError{Check: "slot", Problem: fmt.Sprintf("slot %q is a %s slot with plugin %q, not a pgoutput logical slot", c.cfg.Slot, typ, plugin),
			Fix: "choose another --slot, or drop that slot"}
	case sameDB != "t":
		return &PrereqError{Check: "slot", Problem: fmt.Sprintf("slot %q belongs to another database", c.cfg.Slot),
			Fix: "connect to the slot's database, or choose another --slot"}
	case walStatus == "lost":
		return &PrereqError{Check: "slot", Problem: fmt.Sprintf("slot %q was invalidated (wal_status lost, max_slot_wal_keep_size exceeded): WAL it needed is gone and events after its position may be missing", c.cfg.Slot),
			Fix: "reconcile the outbox rows written since the slot's confirmed position, then drop and recreate the slot (SELECT pg_drop_replication_slot(...)); raise max_slot_wal_keep_size"}
	}
	lsn, err := pglogrepl.ParseLSN(confirmed)
	if err != nil {
		return fmt.Errorf("slot %s: confirmed_flush_lsn %q: %w", c.cfg.Slot, confirmed, err)
	}
	c.Start = lsn
	return nil
}

// failoverMinVersion is the first server_version_num with failover slots.
const failoverMinVersion = 170000

// failoverSlotSQL is the replication command that creates a pgoutput
// failover slot without exporting a snapshot (Postgres 17 syntax).
func failoverSlotSQL(slot string) string {
	return "CREATE_REPLICATION_SLOT " + pgx.Identifier{slot}.Sanitize() + " LOGICAL pgoutput (SNAPSHOT 'nothing', FAILOVER true)"
}

// checkFailover refuses SlotFailover on a server without failover slots,
// and an existing slot (slotLit, quoted) that is not a failover slot.
func (c *Conn) checkFailover(ctx context.Context, slotLit string, exists bool) error {
	rows, err := c.query(ctx, "SELECT current_setting('server_version_num')::int")
	if err != nil {
		return fmt.Errorf("check server version: %w", err)
	}
	if len(rows) != 1 || len(rows[0]) != 1 {
		return errors.New("check server version: unexpected result")
	}
	v, err := strconv.Atoi(string(rows[0][0]))
	if err != nil {
		return fmt.Errorf("check server version: %w", err)
	}
	if v < failoverMinVersion {
		return &PrereqError{Check: "slot-failover", Problem: fmt.Sprintf("--slot-failover needs Postgres 17 or newer (failover slots), the server is %d", v),
			Fix: "remove --slot-failover (WALRELAY_SLOT_FAILOVER), or upgrade Postgres to 17+"}
	}
	if !exists {
		return nil
	}
	rows, err = c.query(ctx, "SELECT failover FROM pg_replication_slots WHERE slot_name = "+slotLit)
	if err != nil {
		return fmt.Errorf("look up slot failover: %w", err)
	}
	if len(rows) == 1 && string(rows[0][0]) != "t" {
		return &PrereqError{Check: "slot-failover", Problem: fmt.Sprintf("slot %q exists and is not a failover slot", c.cfg.Slot),
			Fix: fmt.Sprintf("stop walrelay and run ALTER_REPLICATION_SLOT %s (FAILOVER true) on a replication connection (psql \"dbname=... replication=database\"), or start without --slot-failover", pgx.Identifier{c.cfg.Slot}.Sanitize())}
	}
	return nil
}

// Finding is the outcome of one prerequisite check.
type Finding struct {
	Check string // server, table, publication, slot
	OK    bool
	Note  string // what was found, or the problem and its fix
}

// Diagnose runs every prerequisite check without changing anything and
// returns one finding per check. A missing publication or slot is fine when
// walrelay would create it. The error is only for failing to connect.
func Diagnose(ctx context.Context, cfg Config) ([]Finding, error) {
	c, err := connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer c.conn.Close(context.Background())
	cfg = c.cfg

	var out []Finding
	add := func(check string, err error, okNote string) {
		if err != nil {
			out = append(out, Finding{Check: check, Note: err.Error()})
			return
		}
		out = append(out, Finding{Check: check, OK: true, Note: okNote})
	}
	add("server", c.checkServer(ctx), "wal_level=logical, role may replicate")
	for _, t := range c.tables {
		_, err := c.checkTable(ctx, t)
		add("table", err, t.String()+" exists")
	}
	pubCfg := *c
	pubCfg.cfg.NoCreatePublication = true
	if err := pubCfg.ensurePublication(ctx); err != nil {
		if errors.Is(err, ErrMissing) && !cfg.NoCreatePublication {
			if err := c.checkCanCreatePublication(ctx, pgx.Identifier{cfg.Publication}.Sanitize()); err != nil {
				add("publication", err, "")
			} else {
				add("publication", nil, fmt.Sprintf("%q missing; walrelay run will create it", cfg.Publication))
			}
		} else {
			add("publication", err, "")
		}
	} else {
		add("publication", nil, fmt.Sprintf("%q includes the outbox tables", cfg.Publication))
	}
	slotCfg := *c
	slotCfg.cfg.NoCreateSlot = true
	if err := slotCfg.ensureSlot(ctx); err != nil {
		if errors.Is(err, ErrMissing) && !cfg.NoCreateSlot {
			add("slot", nil, fmt.Sprintf("%q missing; walrelay run will create it", cfg.Slot))
		} else {
			add("slot", err, "")
		}
	} else {
		add("slot", nil, fmt.Sprintf("%q at %s", cfg.Slot, slotCfg.Start))
	}
	return out, nil
}
