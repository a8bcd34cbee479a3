// Package e2e holds walrelay's end-to-end and fault tests. They run the real walrelay
// binary against a real Postgres 15 and a real Kafka broker, started by `make test`
// (test/env/*), and prove the delivery contract (docs/guarantees.md): every committed outbox
// event arrives, in commit order per aggregate, nothing from a rolled-back transaction
// does, and the slot is confirmed only up to what Kafka acknowledged.
//
// Environment (see requireEnv): WALRELAY_TEST_PG_DSN, WALRELAY_TEST_KAFKA,
// WALRELAY_TEST_DIR, WALRELAY_TEST_ENV_DIR, WALRELAY_TEST_PGBIN. Without them the tests
// skip, except under CI, where they fail. WALRELAY_TEST_SEED fixes the random choices
// (kill moments, workload shapes) of a run; every test logs the seed it used.
// WALRELAY_TEST_BIN runs a prebuilt walrelay binary instead of building ./cmd/walrelay.
package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// walrelayBin is the binary TestMain built; buildErr is why it could not be built.
var (
	walrelayBin string
	buildErr    error
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "walrelay-e2e-bin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: temp dir: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)

	// Build only when the tests can run; a missing environment skips them anyway and a
	// walrelay under construction should not break `go test ./...` on a laptop.
	if bin := os.Getenv("WALRELAY_TEST_BIN"); bin != "" {
		walrelayBin = bin
	} else if envComplete() {
		walrelayBin = filepath.Join(dir, "walrelay")
		buildErr = buildWalrelay(walrelayBin)
		if buildErr != nil {
			fmt.Fprintf(os.Stderr, "e2e: %v\n", buildErr)
		}
	}
	return m.Run()
}

// buildWalrelay builds ./cmd/walrelay from the module root (the parent of this package).
func buildWalrelay(out string) error {
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	cmd := exec.Command("go", "build", "-o", out, "./cmd/walrelay")
	cmd.Dir = filepath.Dir(wd)
	b, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go build ./cmd/walrelay: %v\n%s", err, strings.TrimSpace(string(b)))
	}
	return nil
}
