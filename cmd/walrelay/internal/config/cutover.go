package config

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/walrelay/walrelay/replication"
)

// CutoverNudgePrefix is the prefix of the one transactional logical message
// `walrelay cutover` writes after creating walrelay's slot. Debezium only
// confirms its slot on an offset commit after it emitted a record (a change
// or a heartbeat), so on an idle database its slot stays below walrelay's
// start unless a transaction after it arrives; this message is that
// transaction. Debezium turns a logical message into a record on
// <topic.prefix>.message unless message.prefix.exclude.list names the prefix.
// walrelay itself counts it as a foreign message.
const CutoverNudgePrefix = "walrelay.cutover"

// CutoverConfig is what `walrelay cutover` needs.
type CutoverConfig struct {
	PostgresDSN string
	// PostgresDSNFile holds the DSN instead of PostgresDSN.
	PostgresDSNFile string
	// Slot, Publication and Tables are walrelay's, as `walrelay run` gets
	// them (defaults walrelay, walrelay, public.outbox).
	Slot              string
	Publication       string
	Tables            []string
	CreatePublication bool
	// FromSlot is the slot of the system walrelay replaces (Debezium's
	// slot.name). Required.
	FromSlot string
	// Timeout bounds the wait for FromSlot to reach walrelay's start
	// (default 10m).
	Timeout time.Duration
	// PollInterval is how often both slots are read (default 1s).
	PollInterval time.Duration
	// StallWarning is how long FromSlot may stay still before the command
	// says what usually keeps it there (default 60s).
	StallWarning time.Duration
	// Nudge writes one transactional logical message (CutoverNudgePrefix)
	// after walrelay's slot exists, so an idle database has a transaction
	// past walrelay's start that FromSlot can confirm (default true).
	Nudge bool
	// DropFromSlot drops FromSlot instead of waiting, after checking that it
	// is inactive and confirmed at or past StartLSN.
	DropFromSlot bool
	// StartLSN is walrelay's start (the consistent point the first cutover
	// run printed); with DropFromSlot. Zero: walrelay's slot's confirmed
	// position, which is at or past its start.
	StartLSN pglogrepl.LSN
}

// DefaultCutoverConfig returns the cutover configuration used when nothing is
// set; FromSlot has no default.
func DefaultCutoverConfig() CutoverConfig {
	return CutoverConfig{
		Slot: "walrelay", Publication: "walrelay", Tables: []string{"public.outbox"}, CreatePublication: true,
		Timeout: 10 * time.Minute, PollInterval: time.Second, StallWarning: time.Minute, Nudge: true,
	}
}

func (c *CutoverConfig) settings() []setting {
	return []setting{
		{"postgres-dsn", "Postgres connection (libpq URL or key=value DSN); required", stringVal{&c.PostgresDSN}},
		{"postgres-dsn-file", "file holding the Postgres DSN (instead of --postgres-dsn)", stringVal{&c.PostgresDSNFile}},
		{"slot", "walrelay's replication slot (created here)", stringVal{&c.Slot}},
		{"publication", "walrelay's publication (created when missing, as by walrelay run)", stringVal{&c.Publication}},
		{"table", "outbox table(s), schema.name, comma-separated", listVal{&c.Tables}},
		{"create-publication", "create the publication when missing", boolVal{&c.CreatePublication}},
		{"from-slot", "the slot of the system walrelay replaces (Debezium's slot.name); required", stringVal{&c.FromSlot}},
		{"timeout", "how long to wait for --from-slot to confirm walrelay's start", durVal{&c.Timeout}},
		{"poll-interval", "how often both slots are read", durVal{&c.PollInterval}},
		{"stall-warning", "how long --from-slot may stand still before a hint is printed", durVal{&c.StallWarning}},
		{"nudge", "write one transactional logical message with prefix " + CutoverNudgePrefix + " after creating the slot (moves Debezium's slot on an idle database)", boolVal{&c.Nudge}},
		{"drop-from-slot", "drop --from-slot (after checking it is inactive and confirmed at or past --start-lsn) instead of waiting", boolVal{&c.DropFromSlot}},
		{"start-lsn", "with --drop-from-slot: walrelay's start LSN printed by the first cutover run (default: walrelay's slot's confirmed position)", lsnVal{&c.StartLSN}},
	}
}

// Validate reports the first value cutover refuses, as a *Error.
func (c CutoverConfig) Validate() error {
	bad := func(key string, format string, args ...any) error {
		return &Error{Key: key, Err: fmt.Errorf(format, args...)}
	}
	switch {
	case c.PostgresDSN == "":
		return bad("postgres-dsn", "required")
	case c.FromSlot == "":
		return bad("from-slot", "required: the replication slot of the system walrelay replaces (Debezium's slot.name)")
	case c.FromSlot == c.Slot:
		return bad("from-slot", "%q is walrelay's own --slot; to run walrelay on that slot directly see docs/migrating-from-debezium.md", c.FromSlot)
	case c.Timeout <= 0:
		return bad("timeout", "must be positive")
	case c.PollInterval <= 0:
		return bad("poll-interval", "must be positive")
	case c.StallWarning < 0:
		return bad("stall-warning", "must not be negative")
	case c.StartLSN != 0 && !c.DropFromSlot:
		return bad("start-lsn", "only with --drop-from-slot")
	}
	if err := replication.ValidateIdentifier(c.FromSlot); err != nil {
		return bad("from-slot", "%w", err)
	}
	rc := c.Replication()
	if err := rc.Validate(); err != nil {
		return &Error{Key: strings.SplitN(err.Error(), ":", 2)[0], Err: err}
	}
	return nil
}

// Replication is the replication configuration of walrelay's slot.
func (c CutoverConfig) Replication() replication.Config {
	return replication.Config{DSN: c.PostgresDSN, Slot: c.Slot, Publication: c.Publication, Tables: c.Tables,
		NoCreatePublication: !c.CreatePublication}
}

// LoadCutover reads the cutover flags over the WALRELAY_* environment over
// the defaults, and validates the result. usage heads what -h prints to help.
func LoadCutover(usage string, args []string, getenv func(string) string, help io.Writer) (CutoverConfig, error) {
	cfg := DefaultCutoverConfig()
	if err := load("walrelay cutover", usage, cfg.settings(), args, getenv, help); err != nil {
		return CutoverConfig{}, err
	}
	if err := ReadSecretFile("postgres-dsn", cfg.PostgresDSNFile, &cfg.PostgresDSN); err != nil {
		return CutoverConfig{}, err
	}
	if err := cfg.Validate(); err != nil {
		return CutoverConfig{}, err
	}
	return cfg, nil
}
