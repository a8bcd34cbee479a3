package decoder

import (
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pglogrepl"
)

// DefaultHeartbeatPrefix is the logical message prefix of walrelay heartbeats
// (Config.HeartbeatPrefix when left empty).
const DefaultHeartbeatPrefix = "walrelay.heartbeat"

// DefaultSchema is the schema of a Table whose Schema is empty.
const DefaultSchema = "public"

// Columns names the columns of an outbox table, as stored in the catalog
// (case-sensitive; an unquoted identifier is lowercase). ID, AggregateType,
// AggregateID, EventType and Payload are required; Headers, Timestamp and
// Partition are optional ("" = not mapped). Several fields may name the same
// column. Every mapped column must be in the table's Relation messages (else
// ErrMissingColumn); HeaderColumns are exempt.
//
// Columns holds a slice, so it is not comparable with ==.
type Columns struct {
	// ID identifies the event (uuid, text, or anything with a text form).
	ID string
	// AggregateType is used in topic names.
	AggregateType string
	// AggregateID is the record key (bytea is decoded to raw bytes, any other
	// type is taken as its text).
	AggregateID string
	// EventType names the event.
	EventType string
	// Payload is the record value: bytea is decoded to raw bytes; jsonb, json,
	// text and any other type are taken as their text.
	Payload string
	// Headers is a JSON object (jsonb, json or text); its top-level string
	// entries become record headers.
	Headers string
	// Timestamp is a timestamptz or timestamp (taken as UTC) column; the
	// record timestamp when set, else the commit time is used.
	Timestamp string
	// Partition is an integer column (smallint, integer or bigint; any
	// column whose text is a decimal integer) holding an explicit Kafka
	// partition number, copied to Event.Partition. NULL leaves the choice to
	// the key hash (Event.HasPartition false); a value outside [0, 2^31-1]
	// poisons the event with ErrBadPartition.
	Partition string
	// HeaderColumns are more columns copied into Event.Headers, one header
	// per column named after it, with the column's text as value (bytea
	// decoded to raw bytes); they follow the entries of the Headers column,
	// in this order. A NULL value adds no header. A header column the table
	// does not have is not an error: it is absent until a Relation message
	// includes it (e.g. after ALTER TABLE ... ADD COLUMN). Names must be
	// non-empty and distinct.
	HeaderColumns []string
}

// isZero reports whether c is the zero value (no column named), which
// Table.Columns replaces with DefaultColumns().
func (c Columns) isZero() bool {
	return c.ID == "" && c.AggregateType == "" && c.AggregateID == "" && c.EventType == "" &&
		c.Payload == "" && c.Headers == "" && c.Timestamp == "" && c.Partition == "" && len(c.HeaderColumns) == 0
}

// DefaultColumns returns the column names of walrelay's default outbox table:
// id, aggregate_type, aggregate_id, event_type, payload, headers; no timestamp
// column is mapped (records carry the commit time), no partition column (the
// key hash chooses) and no header columns.
func DefaultColumns() Columns {
	return Columns{
		ID:            "id",
		AggregateType: "aggregate_type",
		AggregateID:   "aggregate_id",
		EventType:     "event_type",
		Payload:       "payload",
		Headers:       "headers",
	}
}

// DebeziumColumns returns the column names of a table built for Debezium's
// outbox event router: id, aggregatetype, aggregateid, type, payload; no
// headers, timestamp, partition or header columns.
func DebeziumColumns() Columns {
	return Columns{
		ID:            "id",
		AggregateType: "aggregatetype",
		AggregateID:   "aggregateid",
		EventType:     "type",
		Payload:       "payload",
	}
}

// Table is one outbox table.
type Table struct {
	// Schema defaults to "public".
	Schema string
	// Name is required.
	Name string
	// Columns defaults to DefaultColumns() when it is the zero value (no
	// field set, HeaderColumns empty). To add header or partition columns
	// to the default table, start from DefaultColumns().
	Columns Columns
	// OID is the table's pg_class OID as read when replication connected
	// (see Config.OIDsReadAt); 0 when unknown. A Relation message carries
	// the OID, which a rename or SET SCHEMA keeps: with it the decoder
	// recognises the table under another name instead of taking its inserts
	// for another table's (see ErrTableRenamed).
	OID uint32
	// Filter publishes only some of the table's events; the zero value
	// publishes all.
	Filter Filter
}

// Config configures a Decoder.
type Config struct {
	// Tables are the outbox tables; at least one unless MessagePrefix is set.
	// INSERTs into other tables of the publication are reported as ignored.
	Tables []Table
	// HeartbeatPrefix is the logical message prefix of heartbeats; default
	// DefaultHeartbeatPrefix.
	HeartbeatPrefix string
	// MessagePrefix is the logical message prefix of tableless outbox events
	// (pg_logical_emit_message(true, prefix, json)); "" disables them.
	MessagePrefix string
	// MessageFilter publishes only some tableless events (see Filter).
	MessageFilter Filter
	// OIDsReadAt is a WAL position read (pg_current_wal_lsn()) before the
	// Tables' OIDs were looked up by name. A table known by its OID that
	// arrives under another name is ErrTableRenamed for an INSERT at or after
	// OIDsReadAt: it was renamed after the lookup. An INSERT before it comes
	// from a time when the table had its old name, and is the table's event
	// (the lookup found it under the configured name): this is what a
	// restart with the new name replays. Zero makes every such INSERT an
	// error.
	OIDsReadAt pglogrepl.LSN
}

// Validate reports the first problem with the configuration. Empty fields
// that have defaults are valid.
func (c Config) Validate() error {
	_, err := c.normalized()
	return err
}

// ConfigError is a Config that New refuses. Field says what is wrong:
// tables, columns, header_columns, message_prefix or filter.
type ConfigError struct {
	Field string
	Err   error
}

func (e *ConfigError) Error() string { return "decoder config: " + e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// normalized returns the configuration with defaults applied, or the reason
// it is invalid (a *ConfigError).
func (c Config) normalized() (Config, error) {
	n := Config{
		Tables:          make([]Table, len(c.Tables)),
		HeartbeatPrefix: c.HeartbeatPrefix,
		MessagePrefix:   c.MessagePrefix,
		MessageFilter:   c.MessageFilter,
		OIDsReadAt:      c.OIDsReadAt,
	}
	if err := n.MessageFilter.validate(); err != nil {
		return Config{}, &ConfigError{Field: "filter", Err: fmt.Errorf("tableless events: %w", err)}
	}
	if n.HeartbeatPrefix == "" {
		n.HeartbeatPrefix = DefaultHeartbeatPrefix
	}
	if len(c.Tables) == 0 && c.MessagePrefix == "" {
		return Config{}, &ConfigError{Field: "tables", Err: errors.New("no outbox tables and no message prefix")}
	}
	if n.MessagePrefix == n.HeartbeatPrefix {
		return Config{}, &ConfigError{Field: "message_prefix", Err: fmt.Errorf("message prefix %q is also the heartbeat prefix", n.MessagePrefix)}
	}
	seen := make(map[[2]string]bool, len(c.Tables))
	oids := make(map[uint32]bool, len(c.Tables))
	for i, t := range c.Tables {
		if t.Schema == "" {
			t.Schema = DefaultSchema
		}
		if t.Name == "" {
			return Config{}, &ConfigError{Field: "tables", Err: fmt.Errorf("table %d: empty name", i)}
		}
		if t.Columns.isZero() {
			t.Columns = DefaultColumns()
		}
		for _, f := range t.Columns.fields() {
			if f.required && f.column == "" {
				return Config{}, &ConfigError{Field: "columns", Err: fmt.Errorf("table %s.%s: column %s is required", t.Schema, t.Name, f.name)}
			}
		}
		// A copy: the caller may reuse its slice after New.
		t.Columns.HeaderColumns = slices.Clone(t.Columns.HeaderColumns)
		for j, h := range t.Columns.HeaderColumns {
			if h == "" {
				return Config{}, &ConfigError{Field: "header_columns", Err: fmt.Errorf("table %s.%s: header column %d: empty name", t.Schema, t.Name, j)}
			}
			if slices.Contains(t.Columns.HeaderColumns[:j], h) {
				return Config{}, &ConfigError{Field: "header_columns", Err: fmt.Errorf("table %s.%s: header column %q listed twice", t.Schema, t.Name, h)}
			}
		}
		if err := t.Filter.validate(); err != nil {
			return Config{}, &ConfigError{Field: "filter", Err: fmt.Errorf("table %s.%s: %w", t.Schema, t.Name, err)}
		}
		k := [2]string{t.Schema, t.Name}
		if seen[k] {
			return Config{}, &ConfigError{Field: "tables", Err: fmt.Errorf("table %s.%s listed twice", t.Schema, t.Name)}
		}
		seen[k] = true
		if t.OID != 0 {
			if oids[t.OID] {
				return Config{}, &ConfigError{Field: "tables", Err: fmt.Errorf("table %s.%s: OID %d given to two tables", t.Schema, t.Name, t.OID)}
			}
			oids[t.OID] = true
		}
		n.Tables[i] = t
	}
	return n, nil
}

// field roles, in the order poison is checked.
const (
	roleID = iota
	roleAggregateType
	roleAggregateID
	roleEventType
	rolePayload
	roleHeaders
	roleTimestamp
	rolePartition
	numRoles
)

type columnField struct {
	name     string // Columns field name
	column   string // configured column name
	required bool
}

// Mapped returns the distinct mapped column names (ID, AggregateType,
// AggregateID, EventType, Payload, and Headers, Timestamp and Partition when
// set), in that order. HeaderColumns are not included: they may be absent.
// A zero Columns stands for DefaultColumns(), as in Table.
func (c Columns) Mapped() []string {
	if c.isZero() {
		c = DefaultColumns()
	}
	var out []string
	for _, f := range c.fields() {
		if f.column != "" && !slices.Contains(out, f.column) {
			out = append(out, f.column)
		}
	}
	return out
}

// fields lists the configured columns indexed by role.
func (c Columns) fields() [numRoles]columnField {
	return [numRoles]columnField{
		roleID:            {"ID", c.ID, true},
		roleAggregateType: {"AggregateType", c.AggregateType, true},
		roleAggregateID:   {"AggregateID", c.AggregateID, true},
		roleEventType:     {"EventType", c.EventType, true},
		rolePayload:       {"Payload", c.Payload, true},
		roleHeaders:       {"Headers", c.Headers, false},
		roleTimestamp:     {"Timestamp", c.Timestamp, false},
		rolePartition:     {"Partition", c.Partition, false},
	}
}
