package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walrelay/walrelay/internal/testwait"
)

// rotatingPassword stands in for a cloud's short-lived database token (RDS
// IAM, Cloud SQL IAM, Entra ID): a named pipe that walrelay reads for every
// connection it opens (--postgres-password-file). Each read is handed a new
// password, set on the role with ALTER ROLE ... PASSWORD just before, so a
// password walrelay kept from an earlier connection (as it keeps a DSN's)
// no longer works. The next read is served only once the connection that
// used the last password is in pg_stat_activity (authenticated), so that a
// rotation never races a connection in progress.
type rotatingPassword struct {
	admin, role, path string

	mu     sync.Mutex
	handed []string
	done   chan struct{}
	exited chan struct{}
}

func newRotatingPassword(t *testing.T, env *testEnv, role string) *rotatingPassword {
	t.Helper()
	r := &rotatingPassword{admin: env.pgDSN, role: role, path: filepath.Join(t.TempDir(), "pg-token"),
		done: make(chan struct{}), exited: make(chan struct{})}
	if err := syscall.Mkfifo(r.path, 0o600); err != nil {
		t.Fatal(err)
	}
	rng := testRand(t)
	go r.serve(t, func() string { return "tok" + randHex(rng, 16) })
	t.Cleanup(func() {
		close(r.done)
		if f, err := os.OpenFile(r.path, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil { // frees a writer waiting for a reader
			defer f.Close()
		}
		<-r.exited
	})
	return r
}

func (r *rotatingPassword) serve(t *testing.T, next func() string) {
	defer close(r.exited)
	for {
		f, err := os.OpenFile(r.path, os.O_WRONLY, 0) // blocks until walrelay opens it
		if err != nil {
			t.Errorf("token pipe: %v", err)
			return
		}
		select {
		case <-r.done:
			_ = f.Close()
			return
		default:
		}
		pw := next()
		handedAt, err := r.rotate(pw)
		if err != nil {
			_ = f.Close()
			t.Errorf("rotate the password: %v", err)
			return
		}
		_, _ = f.WriteString(pw + "\n")
		_ = f.Close()
		r.mu.Lock()
		r.handed = append(r.handed, pw)
		r.mu.Unlock()
		r.awaitUse(handedAt)
	}
}

// rotate sets pw on the role and returns the server's time just before.
func (r *rotatingPassword) rotate(pw string) (time.Time, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.admin)
	if err != nil {
		return time.Time{}, err
	}
	defer conn.Close(context.Background())
	var at time.Time
	if err := conn.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&at); err != nil {
		return time.Time{}, err
	}
	_, err = conn.Exec(ctx, "ALTER ROLE "+pgx.Identifier{r.role}.Sanitize()+" PASSWORD '"+pw+"'")
	return at, err
}

// awaitUse waits until a backend of the role started after handedAt, or at
// most 15 s (a connection that failed for another reason).
func (r *rotatingPassword) awaitUse(handedAt time.Time) {
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-r.done:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var n int
		err := func() error {
			conn, err := pgx.Connect(ctx, r.admin)
			if err != nil {
				return err
			}
			defer conn.Close(context.Background())
			return conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE usename = $1 AND backend_start >= $2", r.role, handedAt).Scan(&n)
		}()
		cancel()
		if err == nil && n > 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (r *rotatingPassword) passwords() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.handed)
}

// withFlag replaces the value of flag in args (a scenario's runArgs).
func withFlag(args []string, flag, value string) []string {
	out := slices.Clone(args)
	for i := range out[:len(out)-1] {
		if out[i] == flag {
			out[i+1] = value
		}
	}
	return out
}

// TestRotatingPostgresPassword: with a password that changes between
// connections (a stand-in for RDS/Aurora IAM, Cloud SQL IAM and Entra ID
// tokens, which walrelay gets per connection the same way: see
// rotatingPassword), walrelay keeps streaming across forced reconnects of
// every connection it holds (pg_terminate_backend of the walsender, the
// heartbeat, the slot poll and the span reader), in both delivery modes:
// each reconnect asks for a fresh password, nothing is lost, and no password
// appears in its log.
func TestRotatingPostgresPassword(t *testing.T) {
	env := requireEnv(t)
	for _, mode := range []struct {
		name  string
		flags []string
	}{{"at-least-once", nil}, {"exactly-once", eosFlags}} {
		t.Run(mode.name, func(t *testing.T) {
			rng := testRand(t)
			s := newScenario(t, env, "pgtok")
			s.readCommitted = mode.flags != nil
			// test/env/pg.sh asks members of walrelay_password_auth for a scram password.
			pgExec(t, env.pgDSN, `DO $$BEGIN CREATE ROLE walrelay_password_auth NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END$$`)
			role := s.name + "_tok"
			createLoginRole(t, env, role, "SUPERUSER PASSWORD 'not-the-token' IN ROLE walrelay_password_auth")
			dsn := dsnWithUser(t, env.pgDSN, role, "", "")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if conn, err := pgx.Connect(ctx, dsnWithUser(t, env.pgDSN, role, "wrong-password", "")); err == nil {
				conn.Close(ctx)
				cancel()
				t.Fatal("the test cluster accepted a wrong password: restart it with the current test/env/pg.sh")
			}
			cancel()

			tok := newRotatingPassword(t, env, role)
			args := withFlag(s.runArgs(append([]string{"--postgres-password-file", tok.path, "--status-interval", "100ms",
				"--slot-metrics-interval", "1s", "--heartbeat-interval", "1s"}, mode.flags...)...), "--postgres-dsn", dsn)
			p := s.startArgsReady(args...)
			fw := newFaultWriter(t, s, env.pgDSN, newRandFrom(rng))
			stop := fw.runSteady(faultSteady(t))

			for round := 1; round <= 3; round++ {
				testwait.Eventually(t, 60*time.Second, "committed transactions before the reconnect", func() bool {
					_, committed, _, _ := fw.stats()
					return committed >= round*20
				})
				before := slotLSN(t, env.pgDSN, s.name)
				old := waitSlotStreaming(t, env.pgDSN, s.name, 60*time.Second, p)
				asked := len(tok.passwords())
				pgExec(t, env.pgDSN, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role)
				testwait.Eventually(t, 60*time.Second, "walrelay to stream again with a new password", func() bool {
					info, err := querySlot(context.Background(), t, env.pgDSN, s.name)
					return err == nil && info.activePID != 0 && info.activePID != old.activePID && len(tok.passwords()) > asked
				})
				// The slot moves on under the new password.
				waitSlotLSN(t, env.pgDSN, s.name, before+1, 60*time.Second, p)
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			waitSlotLSN(t, env.pgDSN, s.name, currentLSN(t, env.pgDSN), 60*time.Second, p)
			p.sigterm()
			if !p.waitExit(30*time.Second) || p.exitCode() != 0 {
				t.Fatalf("walrelay did not stop cleanly (%s)\n%s", p.exitStatus(), p.tail(20))
			}
			pws := tok.passwords()
			for _, pw := range pws {
				if strings.Contains(p.log(), pw) {
					t.Errorf("walrelay's log shows a password it was handed")
				}
			}
			if distinct := slices.Compact(slices.Sorted(slices.Values(pws))); len(distinct) != len(pws) || len(pws) < 6 {
				t.Errorf("walrelay was handed %d passwords (%d distinct) over 3 forced reconnects, want a fresh one for each connection (at least 6)", len(pws), len(distinct))
			}
			res := faultVerify(t, s, fw)
			t.Log(res.summary("pgtok/"+mode.name, fmt.Sprintf("passwords=%d", len(pws))))
			res.requireClean(t)
			if mode.flags != nil && res.duplicates != 0 {
				t.Errorf("exactly-once: duplicates=%d for a read_committed consumer, want 0", res.duplicates)
			}
		})
	}
}
