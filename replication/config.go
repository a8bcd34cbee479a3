package replication

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

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
	// Marker, when set, is told before the slot is created (once every
	// other check passed) and when its creation failed: the caller's record
	// that the slot was made, which must exist before the slot does.
	Marker SlotMarker
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
	// PrimaryDSN is the primary's when DSN is a standby (logical decoding
	// on a standby, Postgres 16+). Creating a slot there waits for the
	// primary to log a standby snapshot, which an idle primary does not
	// do: while it waits, walrelay asks the primary for one
	// (pg_log_standby_snapshot) every second. "" asks nothing.
	PrimaryDSN string
	// SlotCreateTimeout bounds the creation of a missing slot, which waits
	// until every transaction with a transaction id running when it starts
	// has ended (on a standby, also for the primary's standby snapshot).
	// Past it, Open cancels the creation and fails with a *PrereqError that
	// names the transactions. 0: no limit.
	SlotCreateTimeout time.Duration
	// SlotCreateWait, when set, is called while a slot creation waits (after
	// 2 s, then every 5 s) with what it waits for. It is called from a
	// goroutine of Open's, never after Open returned.
	SlotCreateWait func(SlotWait)
	// PasswordSource supplies the password of every connection to DSN and
	// PrimaryDSN, asked again for each one (a short-lived token). Nil uses
	// the DSN's password.
	PasswordSource PasswordSource
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

// SettingError is a Config value that cannot work. Setting is the Config
// field (DSN, Slot, Publication, Tables, StatusInterval, PasswordSource);
// Err says why.
type SettingError struct {
	Setting string
	Err     error
}

func (e *SettingError) Error() string { return e.Setting + ": " + e.Err.Error() }
func (e *SettingError) Unwrap() error { return e.Err }

// Fields returns the field to change, as replication.Config.<Setting>.
func (e *SettingError) Fields() []string { return configFields(e.Setting) }

// Validate reports a configuration that cannot work as a *SettingError.
func (c Config) Validate() error {
	if c.DSN == "" {
		return &SettingError{"DSN", errors.New("required: set the Postgres DSN")}
	}
	if _, err := pgconn.ParseConfig(c.DSN); err != nil {
		return &SettingError{"DSN", err}
	}
	for _, n := range []struct{ key, v string }{{"Slot", c.Slot}, {"Publication", c.Publication}} {
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
				return &SettingError{"Slot", fmt.Errorf("%q may contain only lower case letters, digits and '_' (Postgres' rule for slot names); choose e.g. %s", n, suggestSlot(n))}
			}
		}
	}
	for _, t := range c.Tables {
		if _, err := ParseTable(t); err != nil {
			return &SettingError{"Tables", err}
		}
	}
	if c.StatusInterval < 0 || c.KeepaliveInterval < 0 || c.ShutdownTimeout < 0 || c.Batches < 0 || c.BatchBytes < 0 {
		return &SettingError{"StatusInterval", errors.New("replication intervals and sizes must not be negative")}
	}
	if c.SlotCreateTimeout < 0 {
		return &SettingError{"SlotCreateTimeout", errors.New("must not be negative (0: no limit)")}
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

// SlotMarker records, outside Postgres, that a slot is about to be created
// (Config.Marker).
type SlotMarker interface {
	// Mark is called right before the slot is created; an error stops the
	// creation and is returned by Open.
	Mark(ctx context.Context) error
	// Unmark is called when the creation failed after Mark (not when
	// another process created the slot first).
	Unmark(ctx context.Context)
}
