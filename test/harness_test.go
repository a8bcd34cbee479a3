package e2e

import (
	"bufio"
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The harness's vocabulary; tests are written with these names.
//
//   - Start services: `make test` starts the shared Postgres, Kafka and schema registry and
//     requireEnv hands them to a test (skipping it outside CI when they are missing).
//     startPrivateCluster starts a throwaway Postgres for a test that restarts it or needs
//     another setup; newFaultBroker stops, kills, pauses and restarts the broker, and always
//     restores it.
//   - Isolate: newScenario gives a test its own outbox table (made by `walrelay migrate`),
//     slot, publication and topic prefix, all named e2e_<short>_<hex> and dropped after it;
//     newContract is the same without the table, for tests that build their own tables,
//     schemas or databases.
//   - Run walrelay: s.start(extra...) is `walrelay run` with the scenario's flags
//     (s.runArgs) plus extra, s.startArgs(args...) runs exactly args, and s.startReady /
//     s.startArgsReady also wait until walrelay is ready and streams from the slot. Each
//     returns a *walrelayProc (kill9, sigterm, waitExit, log, metrics; errorLine finds an
//     ERROR line in its log). runCommand runs a one-shot command (doctor, migrate, cutover)
//     to completion; s.cmdRun does too and keeps stdout apart from the log.
//   - Write: a workload (newWorkload; writeTxn, runContinuous) or, surviving Postgres
//     restarts, a faultWriter (newFaultWriter; writeTxn, runSteady); runTxn commits one
//     hand-written transaction and insertEvent one event. Each records where its
//     transactions lie in the WAL (txnRec, txnInfo).
//   - Wait: waitSlotLSN and waitSlotStreaming for the slot, p.waitReady for walrelay,
//     testwait.Eventually for anything else; never a sleep in the hope that it happened.
//   - Verify: verify (for a workload) and faultVerify (for a faultWriter) consume the
//     topics and judge the delivery contract: every committed event arrives, in commit
//     order per aggregate, and nothing rolled back does; checkDelivery compares the records
//     with the wantRecs a contract test expects; consumeAll reads the topics of a prefix.

// ---------------------------------------------------------------------------------------
// Environment

// testEnv is what `make test` hands the suite.
type testEnv struct {
	pgDSN  string // superuser DSN of the shared logical cluster
	kafka  string // bootstrap broker host:port
	dir    string // state dir of the shared services
	envDir string // absolute path of test/env (pg.sh, kafka.sh)
	pgBin  string // Postgres server binaries (optional; pg.sh finds them itself)
}

var requiredEnv = []string{
	"WALRELAY_TEST_PG_DSN",
	"WALRELAY_TEST_KAFKA",
	"WALRELAY_TEST_DIR",
	"WALRELAY_TEST_ENV_DIR",
}

func envComplete() bool {
	for _, k := range requiredEnv {
		if os.Getenv(k) == "" {
			return false
		}
	}
	return true
}

// requireEnv returns the test environment. Without it the test is skipped on a
// developer's machine and fails under CI, where the integration tests must run. It also
// fails the test when the walrelay binary could not be built.
func requireEnv(t *testing.T) *testEnv {
	t.Helper()
	var missing []string
	for _, k := range requiredEnv {
		if os.Getenv(k) == "" {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		msg := fmt.Sprintf("integration environment not set (%s); run `make test`", strings.Join(missing, ", "))
		if isCI() {
			t.Fatal(msg + " — CI must run the integration tests")
		}
		t.Skip(msg)
	}
	if buildErr != nil {
		t.Fatalf("walrelay binary not available: %v", buildErr)
	}
	return &testEnv{
		pgDSN:  os.Getenv("WALRELAY_TEST_PG_DSN"),
		kafka:  os.Getenv("WALRELAY_TEST_KAFKA"),
		dir:    os.Getenv("WALRELAY_TEST_DIR"),
		envDir: os.Getenv("WALRELAY_TEST_ENV_DIR"),
		pgBin:  os.Getenv("WALRELAY_TEST_PGBIN"),
	}
}

// testRand returns a random source for the test and logs its seed; WALRELAY_TEST_SEED
// replays a run.
func testRand(t *testing.T) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("WALRELAY_TEST_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("WALRELAY_TEST_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed=%d (replay with WALRELAY_TEST_SEED=%d)", seed, seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// newRandFrom derives an independent random source (for another goroutine) from r.
func newRandFrom(r *rand.Rand) *rand.Rand { return rand.New(rand.NewPCG(r.Uint64(), r.Uint64())) }

func isCI() bool { return os.Getenv("CI") != "" }

// runEnvScript runs test/env/<script> with args (for example kafka.sh stop), with the
// test's environment plus extraEnv.
func runEnvScript(t *testing.T, env *testEnv, timeout time.Duration, extraEnv []string, script string, args ...string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(env.envDir, script)}, args...)...)
	cmd.Env = append(os.Environ(), extraEnv...)
	out, err := cmd.CombinedOutput()
	t.Logf("%s %s:\n%s", script, strings.Join(args, " "), indent(string(out)))
	if err != nil {
		return fmt.Errorf("%s %s: %w", script, strings.Join(args, " "), err)
	}
	return nil
}

// ---------------------------------------------------------------------------------------
// LSNs

// startPrivateCluster starts a throwaway Postgres on its own port and state dir, for
// faults that must not hit the shared cluster other packages' tests use concurrently (an
// immediate restart, ALTER SYSTEM) or for another setup; pgEnv is passed to pg.sh (e.g.
// WALRELAY_TEST_PG_WAL_LEVEL=replica; default wal_level=logical). It returns a copy of env
// pointing at it and the environment that makes pg.sh act on it. It is stopped at the end
// of the test (and, under `make test`, registered in WALRELAY_TEST_REGISTRY).
func startPrivateCluster(t *testing.T, env *testEnv, pgEnv ...string) (*testEnv, []string) {
	t.Helper()
	_, _, extra, dsn := privateClusterPlace(t, env, "walrelay-e2e-pg-", "the private cluster", pgEnv...)
	if err := runEnvScript(t, env, 3*time.Minute, extra, "pg.sh", "start"); err != nil {
		t.Fatalf("start a private cluster: %v", err)
	}
	priv := *env
	priv.pgDSN = dsn
	return &priv, extra
}

// privateClusterPlace makes the state directory (named prefix*) and picks the port of a
// throwaway Postgres, and registers its stop (pg.sh stop, named what in errors) and the
// directory's removal at the end of the test. It returns the directory, the port, the
// environment that makes pg.sh act on that cluster (pgEnv included) and its DSN.
func privateClusterPlace(t *testing.T, env *testEnv, prefix, what string, pgEnv ...string) (dir string, port int, extra []string, dsn string) {
	t.Helper()
	dir, err := os.MkdirTemp(env.dir, prefix)
	if err != nil {
		t.Fatal(err)
	}
	port = freePort(t)
	extra = append([]string{"WALRELAY_TEST_DIR=" + dir, "WALRELAY_TEST_PG_PORT=" + strconv.Itoa(port)}, pgEnv...)
	if env.pgBin != "" {
		extra = append(extra, "WALRELAY_TEST_PGBIN="+env.pgBin)
	}
	dsn = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	t.Cleanup(func() {
		faultResetPool(t, dsn)
		if err := runEnvScript(t, env, 2*time.Minute, extra, "pg.sh", "stop"); err != nil {
			t.Errorf("cleanup: stop %s: %v", what, err)
			return
		}
		_ = os.RemoveAll(dir)
	})
	return dir, port, extra, dsn
}

// freePort returns a TCP port that was free on the loopback a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// lsn is a Postgres WAL position.
type lsn uint64

func parseLSN(s string) (lsn, error) {
	hi, lo, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return 0, fmt.Errorf("lsn %q: no slash", s)
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("lsn %q: %w", s, err)
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("lsn %q: %w", s, err)
	}
	return lsn(h<<32 | l), nil
}

func (l lsn) String() string { return fmt.Sprintf("%X/%X", uint64(l)>>32, uint32(l)) }

// ---------------------------------------------------------------------------------------
// Postgres

// connPool is a minimal connection pool (pgxpool needs a module this repo does not
// require): idle connections are reused, a connection that saw an error is closed.
type connPool struct {
	dsn  string
	mu   sync.Mutex
	idle []*pgx.Conn
}

var (
	poolsMu sync.Mutex
	pools   = map[string]*connPool{}
)

// pgPool returns the connection pool for dsn shared by the whole test binary. It is safe
// for concurrent use.
func pgPool(t *testing.T, dsn string) *connPool {
	poolsMu.Lock()
	defer poolsMu.Unlock()
	if p, ok := pools[dsn]; ok {
		return p
	}
	p := &connPool{dsn: dsn}
	pools[dsn] = p
	return p
}

// with runs fn on a connection of the pool.
func (p *connPool) with(ctx context.Context, fn func(*pgx.Conn) error) error {
	p.mu.Lock()
	var c *pgx.Conn
	if n := len(p.idle); n > 0 {
		c, p.idle = p.idle[n-1], p.idle[:n-1]
	}
	p.mu.Unlock()
	if c == nil {
		var err error
		if c, err = pgx.Connect(ctx, p.dsn); err != nil {
			return fmt.Errorf("connect postgres: %w", err)
		}
	}
	err := fn(c)
	var pgErr *pgconn.PgError
	usable := err == nil || errors.Is(err, pgx.ErrNoRows) || errors.As(err, &pgErr)
	if !usable || c.IsClosed() || c.PgConn().TxStatus() != 'I' {
		_ = c.Close(context.Background())
		return err
	}
	p.mu.Lock()
	p.idle = append(p.idle, c)
	p.mu.Unlock()
	return err
}

func (p *connPool) Exec(ctx context.Context, sql string, args ...any) error {
	return p.with(ctx, func(c *pgx.Conn) error {
		_, err := c.Exec(ctx, sql, args...)
		return err
	})
}

// scan runs a query that returns one row and scans it into dest.
func (p *connPool) scan(ctx context.Context, sql string, args []any, dest ...any) error {
	return p.with(ctx, func(c *pgx.Conn) error {
		return c.QueryRow(ctx, sql, args...).Scan(dest...)
	})
}

// strings runs a query and returns its first column.
func (p *connPool) strings(ctx context.Context, sql string, args ...any) ([]string, error) {
	var out []string
	err := p.with(ctx, func(c *pgx.Conn) error {
		rows, err := c.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	return out, err
}

func pgExec(t *testing.T, dsn, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := pgPool(t, dsn).Exec(ctx, sql, args...); err != nil {
		t.Fatalf("exec %q: %v", sql, err)
	}
}

// currentLSN is pg_current_wal_lsn(): every transaction committed before the call ends
// at or before it.
func currentLSN(t *testing.T, dsn string) lsn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var s string
	if err := pgPool(t, dsn).scan(ctx, "SELECT pg_current_wal_lsn()::text", nil, &s); err != nil {
		t.Fatalf("pg_current_wal_lsn: %v", err)
	}
	l, err := parseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// slotInfo is one row of pg_replication_slots.
type slotInfo struct {
	exists    bool
	confirmed lsn // 0 while NULL
	activePID int // 0 when inactive
}

func querySlot(ctx context.Context, t *testing.T, dsn, slot string) (slotInfo, error) {
	var confirmed *string
	var pid *int32
	err := pgPool(t, dsn).scan(ctx,
		`SELECT confirmed_flush_lsn::text, active_pid FROM pg_replication_slots WHERE slot_name = $1`,
		[]any{slot}, &confirmed, &pid)
	if errors.Is(err, pgx.ErrNoRows) {
		return slotInfo{}, nil
	}
	if err != nil {
		return slotInfo{}, err
	}
	si := slotInfo{exists: true}
	if confirmed != nil {
		if si.confirmed, err = parseLSN(*confirmed); err != nil {
			return si, err
		}
	}
	if pid != nil {
		si.activePID = int(*pid)
	}
	return si, nil
}

// slotLSN returns the slot's confirmed_flush_lsn (0 when the slot is missing or has none).
func slotLSN(t *testing.T, dsn, slot string) lsn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	si, err := querySlot(ctx, t, dsn, slot)
	if err != nil {
		t.Fatalf("query slot %s: %v", slot, err)
	}
	return si.confirmed
}

// waitSlotLSN polls until the slot's confirmed_flush_lsn is at least target. procs, when
// given, must stay alive meanwhile (a walrelay that died will not advance anything).
func waitSlotLSN(t *testing.T, dsn, slot string, target lsn, timeout time.Duration, procs ...*walrelayProc) lsn {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	var last lsn
	for {
		last = slotLSN(t, dsn, slot)
		if last >= target {
			t.Logf("slot %s confirmed_flush_lsn=%s >= %s after %s", slot, last, target, time.Since(start).Round(time.Millisecond))
			return last
		}
		for _, p := range procs {
			if p.exited() {
				t.Fatalf("walrelay (%s) exited with %s while waiting for slot %s to reach %s (at %s)\n%s",
					p.name, p.exitStatus(), slot, target, last, p.tail(40))
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot %s: confirmed_flush_lsn=%s did not reach %s within %s", slot, last, target, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitSlotStreaming waits until the slot exists, has a confirmed position and is held by
// a walsender, i.e. walrelay is streaming and writes from now on are decoded.
func waitSlotStreaming(t *testing.T, dsn, slot string, timeout time.Duration, p *walrelayProc) slotInfo {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		si, err := querySlot(ctx, t, dsn, slot)
		cancel()
		if err != nil {
			t.Fatalf("query slot %s: %v", slot, err)
		}
		if si.exists && si.confirmed != 0 && si.activePID != 0 {
			return si
		}
		if p != nil && p.exited() {
			t.Fatalf("walrelay (%s) exited with %s before slot %s was streaming\n%s", p.name, p.exitStatus(), slot, p.tail(40))
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot %s not streaming within %s (exists=%v confirmed=%s active_pid=%d)",
				slot, timeout, si.exists, si.confirmed, si.activePID)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// dropSlot terminates the walsender holding the slot, if any, and drops the slot.
func dropSlot(ctx context.Context, t *testing.T, dsn, slot string) error {
	p := pgPool(t, dsn)
	var err error
	for ctx.Err() == nil {
		_ = p.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
			WHERE slot_name = $1 AND active_pid IS NOT NULL`, slot)
		err = p.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
			WHERE slot_name = $1`, slot)
		if err == nil {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("drop slot %s: %w", slot, errors.Join(err, ctx.Err()))
}

// ---------------------------------------------------------------------------------------
// Scenario: one isolated outbox table, slot, publication and topic prefix.

type scenario struct {
	t      *testing.T
	env    *testEnv
	short  string // e.g. "crash"
	name   string // e2e_<short>_<run>: table, slot, publication and topic prefix
	table  string // public.<name>
	logDir string
	runs   int
	// readCommitted makes the fault verifier read as a read_committed
	// consumer (exactly-once scenarios).
	readCommitted bool
}

// newScenario removes leftovers of earlier runs of the same scenario, creates the outbox
// table with `walrelay migrate --table` and registers the cleanup of everything it owns.
func newScenario(t *testing.T, env *testEnv, short string) *scenario {
	t.Helper()
	run := make([]byte, 3)
	_, _ = crand.Read(run)
	s := &scenario{
		t:     t,
		env:   env,
		short: short,
		name:  "e2e_" + short + "_" + hex.EncodeToString(run),
	}
	s.table = "public." + s.name
	s.logDir = filepath.Join(env.dir, "e2e-logs", s.name)
	if err := os.MkdirAll(s.logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	s.dropLeftovers()

	t.Cleanup(func() {
		start := time.Now()
		defer func() {
			if d := time.Since(start); d > 5*time.Second {
				t.Logf("cleanup of %s took %s", s.name, d.Round(time.Millisecond))
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// s.env, not env: a failover test points the scenario at the new primary.
		if err := dropSlot(ctx, t, s.env.pgDSN, s.name); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		p := pgPool(t, s.env.pgDSN)
		if err := p.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{s.name}.Sanitize()); err != nil {
			t.Errorf("cleanup: drop publication: %v", err)
		}
		if t.Failed() {
			t.Logf("kept table %s, topics %s.* and logs in %s for inspection", s.table, s.name, s.logDir)
			return
		}
		if err := p.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{"public", s.name}.Sanitize()); err != nil {
			t.Errorf("cleanup: drop table: %v", err)
		}
		deleteTopics(ctx, t, env.kafka, s.name+".")
		_ = os.RemoveAll(s.logDir)
	})

	s.migrate(env.pgDSN, s.table)
	return s
}

// dropLeftovers removes inactive slots, publications and tables of earlier runs of this
// scenario (a run that was killed does not clean up).
func (s *scenario) dropLeftovers() {
	t := s.t
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	like := strings.ReplaceAll("e2e_"+s.short+"_", "_", `\_`) + "%"
	p := pgPool(t, s.env.pgDSN)
	names := func(sql string) []string {
		out, err := p.strings(ctx, sql, like)
		if err != nil {
			t.Fatalf("list leftovers: %v", err)
		}
		return out
	}
	for _, n := range names(`SELECT slot_name::text FROM pg_replication_slots WHERE slot_name LIKE $1 AND NOT active`) {
		_ = p.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, n)
	}
	for _, n := range names(`SELECT pubname::text FROM pg_publication WHERE pubname LIKE $1`) {
		_ = p.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{n}.Sanitize())
	}
	for _, n := range names(`SELECT tablename::text FROM pg_tables WHERE schemaname = 'public' AND tablename LIKE $1`) {
		_ = p.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{"public", n}.Sanitize())
	}
}

// migrate runs `walrelay migrate --table table` against dsn and requires it to succeed.
func (s *scenario) migrate(dsn, table string) {
	t := s.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, walrelayBin, "migrate", "--postgres-dsn", dsn, "--table", table)
	cmd.Env = childEnv(nil)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("walrelay migrate --table %s: %v\n%s", table, err, indent(string(out)))
	}
}

// topicTemplate is the --topic of the scenario: one topic per aggregate type under the
// scenario's own prefix.
func (s *scenario) topicTemplate() string { return s.name + ".{aggregate_type}" }

// runArgs are the `walrelay run` flags of the scenario, followed by extra.
func (s *scenario) runArgs(extra ...string) []string {
	args := []string{
		"run",
		"--postgres-dsn", s.env.pgDSN,
		"--kafka-brokers", s.env.kafka,
		"--slot", s.name,
		"--publication", s.name,
		"--table", s.table,
		"--topic", s.topicTemplate(),
		"--metrics-addr", "127.0.0.1:0",
	}
	return append(args, extra...)
}

// start starts `walrelay run` with the scenario's flags plus extra.
func (s *scenario) start(extra ...string) *walrelayProc {
	s.t.Helper()
	return s.startArgs(s.runArgs(extra...)...)
}

// startReady is start plus waiting until walrelay streams from the slot.
func (s *scenario) startReady(extra ...string) *walrelayProc {
	s.t.Helper()
	return s.startArgsReady(s.runArgs(extra...)...)
}

// startArgs starts walrelay with exactly args (see runArgs) as the scenario's next run;
// its log is run-<n>.log in the scenario's log directory.
func (s *scenario) startArgs(args ...string) *walrelayProc {
	s.t.Helper()
	s.runs++
	return startWalrelay(s.t, fmt.Sprintf("%s#%d", s.short, s.runs),
		filepath.Join(s.logDir, fmt.Sprintf("run-%d.log", s.runs)), args, nil)
}

// startArgsReady is startArgs plus waiting until walrelay is ready and streams from the
// scenario's slot.
func (s *scenario) startArgsReady(args ...string) *walrelayProc {
	s.t.Helper()
	p := s.startArgs(args...)
	p.waitReady(60 * time.Second)
	waitSlotStreaming(s.t, s.env.pgDSN, s.name, 60*time.Second, p)
	return p
}

// ---------------------------------------------------------------------------------------
// walrelay process

// runCommand runs a walrelay command (doctor, migrate, cutover, ...) to completion within
// timeout and returns its exit code and its output (stdout and stderr), which it logs.
func runCommand(t *testing.T, timeout time.Duration, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, walrelayBin, args...)
	cmd.Env = childEnv(nil)
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("walrelay %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		code = ee.ExitCode()
	}
	t.Logf("walrelay %s: exit %d\n%s", args[0], code, indent(string(out)))
	return code, string(out)
}

// walrelayProc is one walrelay process whose stderr goes to a file.
type walrelayProc struct {
	t       *testing.T
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	started time.Time
}

// childEnv is the test's environment without any WALRELAY_* variable (so no stray
// configuration leaks into walrelay), plus extra.
func childEnv(extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "WALRELAY_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// startWalrelay starts the binary with args and extra environment. The process is killed
// at the end of the test; if the test failed, the tail of its log is printed.
func startWalrelay(t *testing.T, name, logPath string, args, env []string) *walrelayProc {
	t.Helper()
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(walrelayBin, args...)
	cmd.Env = childEnv(env)
	cmd.Stdout = f
	cmd.Stderr = f
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start walrelay: %v", err)
	}
	p := &walrelayProc{t: t, name: name, logPath: logPath, cmd: cmd, done: make(chan struct{}), started: time.Now()}
	go func() {
		p.waitErr = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	t.Logf("started walrelay %s (pid %d), log %s", name, cmd.Process.Pid, logPath)
	t.Cleanup(func() {
		if !p.exited() {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
		}
		if t.Failed() {
			t.Logf("walrelay %s (%s) log tail:\n%s", name, p.exitStatus(), p.tail(40))
		}
	})
	return p
}

func (p *walrelayProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitCode is the exit code, -1 when killed by a signal or still running.
func (p *walrelayProc) exitCode() int {
	if !p.exited() {
		return -1
	}
	return p.cmd.ProcessState.ExitCode()
}

func (p *walrelayProc) exitStatus() string {
	if !p.exited() {
		return "running"
	}
	return p.cmd.ProcessState.String()
}

// waitExit waits for the process to exit; false on timeout.
func (p *walrelayProc) waitExit(timeout time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// kill9 kills the process with SIGKILL and waits for it.
func (p *walrelayProc) kill9() {
	p.t.Helper()
	if p.exited() {
		p.t.Fatalf("walrelay %s exited on its own (%s) before kill -9\n%s", p.name, p.exitStatus(), p.tail(40))
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	if !p.waitExit(10 * time.Second) {
		p.t.Fatalf("walrelay %s did not die after SIGKILL", p.name)
	}
}

func (p *walrelayProc) sigterm() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.t.Fatalf("SIGTERM walrelay %s: %v", p.name, err)
	}
}

// log returns the whole log so far.
func (p *walrelayProc) log() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// tail returns the last n lines of the log, indented.
func (p *walrelayProc) tail(n int) string {
	lines := strings.Split(strings.TrimRight(p.log(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return indent(strings.Join(lines, "\n"))
}

// logLines parses the JSON log lines; lines that are not JSON are returned as
// {"msg": line, "level": "?"}.
func (p *walrelayProc) logLines() []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(p.log()))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			m = map[string]any{"msg": string(line), "level": "?", "raw": true}
		}
		out = append(out, m)
	}
	return out
}

var hostPortRE = regexp.MustCompile(`^127\.0\.0\.1:\d+$`)

// errorLine returns the first JSON line of log (walrelay's log, or a command's output)
// with level ERROR that contains every keyword (case-insensitively; "a|b" matches
// either), or "".
func errorLine(log string, keywords []string) string {
	for _, raw := range strings.Split(log, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(raw), &m) != nil {
			continue
		}
		if lvl, _ := m["level"].(string); !strings.EqualFold(lvl, "ERROR") {
			continue
		}
		if hasKeywords(raw, keywords) {
			return raw
		}
	}
	return ""
}

// hasKeywords reports whether s contains every keyword (case-insensitively; "a|b"
// matches either).
func hasKeywords(s string, keywords []string) bool {
	s = strings.ToLower(s)
	for _, kw := range keywords {
		found := false
		for _, alt := range strings.Split(kw, "|") {
			found = found || strings.Contains(s, strings.ToLower(alt))
		}
		if !found {
			return false
		}
	}
	return true
}

// metricsAddr returns the address of the "metrics listening" log line, if logged yet.
func (p *walrelayProc) metricsAddr() string {
	for _, m := range p.logLines() {
		if m["msg"] == "metrics listening" {
			if a, ok := m["addr"].(string); ok && hostPortRE.MatchString(a) {
				return a
			}
		}
	}
	return ""
}

// metrics scrapes p's /metrics: every sample by its series as exposed (name{labels}).
func (p *walrelayProc) metrics() (map[string]float64, error) {
	addr := p.metricsAddr()
	if addr == "" {
		return nil, errors.New("no metrics address logged")
	}
	return metricsAt(addr)
}

// metricsAt scrapes the /metrics page at addr: every sample by its series as exposed
// (name{labels}).
func metricsAt(addr string) (map[string]float64, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// metricValue is the value of one series (name{labels} as exposed) at addr, and whether
// it is exposed; it fails t when the page cannot be read.
func metricValue(t *testing.T, addr, series string) (float64, bool) {
	t.Helper()
	m, err := metricsAt(addr)
	if err != nil {
		t.Fatalf("scrape %s: %v", addr, err)
	}
	v, ok := m[series]
	return v, ok
}

// waitReady waits until walrelay logged its metrics address and /readyz answers 200.
func (p *walrelayProc) waitReady(timeout time.Duration) string {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: time.Second}
	var addr, last string
	for {
		if p.exited() {
			p.t.Fatalf("walrelay %s exited (%s) before it was ready\n%s", p.name, p.exitStatus(), p.tail(40))
		}
		if addr == "" {
			addr = p.metricsAddr()
		}
		if addr != "" {
			resp, err := client.Get("http://" + addr + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					p.t.Logf("walrelay %s ready at %s after %s", p.name, addr, time.Since(p.started).Round(time.Millisecond))
					return addr
				}
				last = resp.Status
			} else {
				last = err.Error()
			}
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("walrelay %s not ready within %s (metrics addr %q, last /readyz: %s)\n%s",
				p.name, timeout, addr, last, p.tail(40))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ---------------------------------------------------------------------------------------
// Kafka

func newKafkaClient(t *testing.T, brokers string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(strings.Split(brokers, ",")...)}, opts...)...)
	if err != nil {
		t.Fatalf("kafka client: %v", err)
	}
	return cl
}

// topicsWithPrefix lists the topics whose names start with prefix.
func topicsWithPrefix(ctx context.Context, t *testing.T, brokers, prefix string) ([]string, error) {
	cl := newKafkaClient(t, brokers)
	defer cl.Close()
	td, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, name := range td.Names() {
		if strings.HasPrefix(name, prefix) {
			out = append(out, name)
		}
	}
	return out, nil
}

// deleteTopics deletes, best effort, the topics whose names start with prefix.
func deleteTopics(ctx context.Context, t *testing.T, brokers, prefix string) {
	topics, err := topicsWithPrefix(ctx, t, brokers, prefix)
	if err != nil || len(topics) == 0 {
		return
	}
	cl := newKafkaClient(t, brokers)
	defer cl.Close()
	if _, err := kadm.NewClient(cl).DeleteTopics(ctx, topics...); err != nil {
		t.Logf("cleanup: delete topics %v: %v", topics, err)
	}
}

// ---------------------------------------------------------------------------------------
// small helpers

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return "    (empty)"
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}
