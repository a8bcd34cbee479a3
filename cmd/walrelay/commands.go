package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walrelay/walrelay/cmd/walrelay/internal/config"
	"github.com/walrelay/walrelay/operator"
	"github.com/walrelay/walrelay/relay"
	"github.com/walrelay/walrelay/relay/relayotel"
	"github.com/walrelay/walrelay/replication"
	"github.com/walrelay/walrelay/sink"
	"github.com/walrelay/walrelay/sink/schema"
)

// run is `walrelay run`: the relay until ctx ends or it stops on a failure.
func run(ctx context.Context, cfg config.Config, c *call) int {
	log := c.log
	v, _ := relay.BuildVersion()
	rc := cfg.Replication()
	if cfg.Procs > 0 {
		runtime.GOMAXPROCS(cfg.Procs)
	}
	log.Info("walrelay starting", "version", v, "slot", rc.Slot, "publication", rc.Publication,
		"tables", strings.Join(rc.Tables, ","), "topic", cfg.Topic, "brokers", strings.Join(cfg.KafkaBrokers, ","),
		"procs", runtime.GOMAXPROCS(0))
	opts, err := cfg.Relay(log)
	if err == nil {
		err = runRelay(ctx, cfg, opts, c, func(ctx context.Context, opts relay.Options) error {
			stop, err := attachTelemetry(ctx, cfg, &opts, log)
			if err != nil {
				return err
			}
			defer stop()
			return relay.Run(ctx, opts)
		})
	}
	if err != nil {
		err, isConfig := settingError(err)
		if isConfig {
			c.invalid(err)
			return ExitConfig
		}
		c.failed("walrelay stopped", err)
		var lost *relay.SlotLostError
		if errors.As(err, &lost) {
			recoverySuggestion(cfg).print(c)
		}
		return ExitFailure
	}
	log.Info("walrelay stopped cleanly")
	return ExitOK
}

// settingError returns err naming the configuration key when a setting
// caused it (true), else err unchanged (false).
func settingError(err error) (error, bool) {
	var ce *config.Error
	var oe *relay.OptionError
	var ooe *operator.OptionError
	var se *sink.SettingError
	var sse *schema.SettingError
	var ee *relayotel.EnvError
	switch {
	case errors.As(err, &ce):
		return err, true
	case errors.As(err, &oe):
		return config.OptionError(oe), true
	case errors.As(err, &ooe):
		return config.OperatorError(ooe), true
	case errors.As(err, &se):
		return config.SinkError(se), true
	case errors.As(err, &sse):
		return config.SinkError(sse), true
	case errors.As(err, &ee):
		return config.EnvError(ee.Var, ee.Err), true
	}
	return err, false
}

// migrateCommand is `walrelay migrate`.
func migrateCommand(ctx context.Context, cfg config.MigrateConfig, c *call) int {
	return c.result("migrate failed", operator.Migrate(ctx, operator.MigrateOptions{DSN: cfg.PostgresDSN, PasswordSource: cfg.PasswordSource(), Table: cfg.Table, Partitioned: cfg.Partitioned}, c.log))
}

// statusCommand is `walrelay status`.
func statusCommand(ctx context.Context, cfg config.StatusConfig, c *call) int {
	return c.result("status failed", status(ctx, cfg, c.stdout))
}

// doctorCommand is `walrelay doctor`.
func doctorCommand(ctx context.Context, cfg config.Config, c *call) int {
	return doctor(ctx, cfg, c.stdout)
}

// status prints the slot's state, then the outbox tables' retained span
// (how far back a replay can reach); a missing slot is no error (walrelay
// run creates it), a slot it cannot read is, after the span.
func status(ctx context.Context, cfg config.StatusConfig, w io.Writer) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := replication.Connect(cctx, cfg.PostgresDSN, cfg.PasswordSource())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	s, err := replication.ReadSlot(cctx, replication.NewQuerier(conn), cfg.Slot)
	if errors.Is(err, replication.ErrSlotMissing) {
		// Before the first run, as doctor says; after a loss run refuses and
		// names the recovery.
		fmt.Fprintf(w, "%-20s %q missing; walrelay run will create it\n", "slot", cfg.Slot)
		return printSpans(cctx, conn, cfg, w)
	}
	if err != nil {
		return errors.Join(err, printSpans(cctx, conn, cfg, w))
	}
	unlessZero := func(v int64, text string) string {
		if v == 0 {
			return ""
		}
		return text
	}
	lsn := func(l pglogrepl.LSN) string { return unlessZero(int64(l), l.String()) }
	for _, f := range []struct{ name, value string }{
		{"slot", s.Name}, {"plugin", s.Plugin}, {"active", strconv.FormatBool(s.Active)},
		{"active_pid", unlessZero(int64(s.ActivePID), strconv.Itoa(int(s.ActivePID)))},
		{"confirmed_flush_lsn", lsn(s.ConfirmedFlushLSN)}, {"restart_lsn", lsn(s.RestartLSN)}, {"current_wal_lsn", lsn(s.WALEnd)},
		{"lag_bytes", unlessZero(int64(s.ConfirmedFlushLSN), strconv.FormatInt(s.LagBytes(), 10))},
		{"retained_wal", unlessZero(int64(s.RestartLSN), prettySize(s.RetainedBytes()))}, {"wal_status", s.WALStatus},
	} {
		fmt.Fprintf(w, "%-20s %s\n", f.name, f.value)
	}
	if err := printSlotHealth(cctx, replication.NewQuerier(conn), s, w); err != nil {
		return errors.Join(err, printSpans(cctx, conn, cfg, w))
	}
	return printSpans(cctx, conn, cfg, w)
}

// statusWALRatePeriod is how long status measures the WAL rate for the time
// left before max_slot_wal_keep_size invalidates the slot.
const statusWALRatePeriod = 2 * time.Second

// printSlotHealth prints the walsender that streams from the slot s (pid,
// client, last reply, and what ends it when it is stale), what holds it back (held_back_by, one line
// per session, prepared transaction or older slot; "nothing" when none) and,
// when max_slot_wal_keep_size is set, the WAL and time left before it
// invalidates the slot (safe_wal_size).
func printSlotHealth(ctx context.Context, q replication.Querier, s replication.Slot, w io.Writer) error {
	if s.ActivePID != 0 {
		ws, err := replication.ReadWalsender(ctx, q, s.ActivePID)
		switch {
		case errors.Is(err, replication.ErrMissing): // it ended since the slot was read
		case err != nil:
			return err
		default:
			fmt.Fprintf(w, "%-20s %s\n", "walsender", ws)
		}
	}
	h, err := replication.ReadHolders(ctx, q, s)
	lines := h.Lines()
	switch {
	case err != nil:
		lines = append(lines, "(cannot tell: "+err.Error()+")")
	case len(lines) == 0:
		lines = []string{"nothing (no open or prepared transaction holds the slot back)"}
	}
	for _, l := range lines {
		fmt.Fprintf(w, "%-20s %s\n", "held_back_by", l)
	}
	var rate replication.WALRate
	if s.SafeWALSize != nil {
		if rate, err = replication.MeasureWALRate(ctx, q, statusWALRatePeriod); err != nil {
			return err
		}
	}
	if note, _ := replication.SafeWALNote(s, rate, time.Hour); note != "" {
		fmt.Fprintf(w, "%-20s %s\n", "safe_wal_size", note)
	}
	return nil
}

// prettySize formats n bytes as Postgres' pg_size_pretty does: bytes below
// 10 kB, then kB, MB, GB, TB or PB (1024 each), rounded half away from zero.
func prettySize(n int64) string {
	abs := func(v int64) int64 { return max(v, -v) }
	if abs(n) < 10*1024 {
		return fmt.Sprintf("%d bytes", n)
	}
	half := func(v int64) int64 { // v halves of a unit, rounded
		if v < 0 {
			return (v - 1) / 2
		}
		return (v + 1) / 2
	}
	n /= 1 << 9 // halves of a kB
	for _, unit := range []string{"kB", "MB", "GB", "TB"} {
		if abs(n) < 20*1024-1 {
			return fmt.Sprintf("%d %s", half(n), unit)
		}
		n /= 1 << 10
	}
	return fmt.Sprintf("%d PB", half(n))
}

// doctor checks every prerequisite it can without changing anything and
// prints one line per check with the fix.
func doctor(ctx context.Context, cfg config.Config, w io.Writer) int {
	failed := false
	report := func(name string, err error) {
		if err != nil {
			failed = true
			// The line names the check; an error that starts with it ("kafka: ...") need not.
			fmt.Fprintf(w, "FAIL %-11s %s\n", name, strings.TrimPrefix(config.Explain(err), name+": "))
			return
		}
		fmt.Fprintf(w, "ok   %-11s reachable\n", name)
	}
	findings, err := replication.Diagnose(ctx, cfg.Replication())
	if err != nil {
		report("postgres", err)
	}
	for _, f := range findings {
		note := f.Note
		if k, ok := any(f).(interface{ SettingKeys() []string }); ok {
			note = config.WithSettings(note, k.SettingKeys())
		}
		switch {
		case f.OK:
			fmt.Fprintf(w, "ok   %-11s %s\n", f.Check, note)
		case f.Warn:
			fmt.Fprintf(w, "WARN %-11s %s\n", f.Check, note)
		default:
			failed = true
			fmt.Fprintf(w, "FAIL %-11s %s\n", f.Check, note)
		}
	}
	if err == nil {
		checkTimeColumns(ctx, cfg, w)
	}
	if cfg.MessagePrefix != "" && err == nil {
		if ok, note := checkTableless(ctx, cfg); ok {
			fmt.Fprintf(w, "ok   %-11s %s\n", "tableless", note)
		} else {
			fmt.Fprintf(w, "WARN %-11s %s\n", "tableless", note)
		}
	}
	snk, err := sink.New(cfg.Sink())
	var schemaErr *schema.SettingError
	if errors.As(err, &schemaErr) { // a schema file that cannot be read or parsed
		report("schema", config.SinkError(err))
		cfg.Registry.Schema = schema.Config{}
		snk, err = sink.New(cfg.Sink())
	}
	if err == nil {
		defer snk.Close()
		pctx, cancel := context.WithTimeout(ctx, cfg.KafkaTimeout)
		err = snk.Ping(pctx)
		cancel()
	}
	report("kafka", err)
	if snk != nil && schemaErr == nil && !checkRegistry(ctx, snk, cfg.Registry.Schema, w) {
		failed = true
	}
	if opts, oerr := cfg.Relay(nil); err == nil && oerr == nil && opts.ExactlyOnce != nil {
		note, err := checkExactlyOnce(ctx, snk, opts.ExactlyOnce, cfg.KafkaTimeout)
		if err != nil {
			failed = true
			fmt.Fprintf(w, "FAIL %-11s %s\n", "exactly-once", config.Explain(err))
		} else {
			fmt.Fprintf(w, "ok   %-11s %s\n", "exactly-once", note)
		}
	}
	if failed {
		return ExitFailure
	}
	return ExitOK
}

// checkExactlyOnce is doctor's check of Kafka transactions for
// --delivery=exactly-once; it fences no running walrelay.
func checkExactlyOnce(ctx context.Context, snk *sink.Sink, x *relay.ExactlyOnce, timeout time.Duration) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := snk.CheckTransactions(cctx, x.TransactionalID, x.CheckpointTopic)
	if err != nil {
		return "", err
	}
	state := "never used"
	if st.State != "" {
		state = "state " + st.State
	}
	topic := "exists"
	if !st.CheckpointTopic {
		topic = "missing; walrelay run will create it (compacted, one partition)"
	}
	return fmt.Sprintf("transactional id %q: coordinator broker %d, %s; checkpoint topic %q %s; consumers must read with isolation.level=read_committed",
		x.TransactionalID, st.Coordinator, state, x.CheckpointTopic, topic), nil
}

// checkRegistry prints doctor's lines for the schema registry (with schema
// rules only): whether it answers and accepts the credentials, then one line
// per configured subject (exists or would be registered, its compatibility
// level). False when a check failed.
func checkRegistry(ctx context.Context, snk *sink.Sink, sc schema.Config, w io.Writer) bool {
	if !sc.Enabled() {
		return true
	}
	// Each request is bounded by the registry timeout; the first that finds
	// the registry unavailable ends the check.
	findings, err := snk.CheckRegistry(ctx)
	ok := err == nil
	for _, f := range findings {
		state := "ok  "
		if !f.OK {
			state, ok = "FAIL", false
		}
		fmt.Fprintf(w, "%s %-11s %s\n", state, f.Check, f.Note)
	}
	if err != nil {
		msg := config.Explain(err)
		if schema.IsRetryable(err) {
			msg += " (check the schema registry URL and that the registry is up)"
		}
		fmt.Fprintf(w, "FAIL %-11s %s\n", "schema-registry", strings.TrimPrefix(msg, "schema registry: "))
	}
	return ok
}
