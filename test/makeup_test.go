package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMakeUpKeepsItsOwnState: `make up` (and `make -s env`, `make down`) use their own
// state directory, so what `make test` leaves in its own (the random ports of its last
// run) never decides where make up's services listen: a fresh make up is on the
// documented ports 55432 and 59092. Needs no services: `make -s env` only reads the state.
func TestMakeUpKeepsItsOwnState(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not installed")
	}
	testDir, upDir := t.TempDir(), filepath.Join(t.TempDir(), "up")
	// What a make test run leaves behind: its services' ports of that run.
	for kind, port := range map[string]string{"pg": "41234", "kafka": "41240"} {
		if err := os.MkdirAll(filepath.Join(testDir, kind), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(testDir, kind, "port"), []byte(port+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("make", "-s", "env")
	cmd.Dir = ".."
	cmd.Env = childEnv([]string{"WALRELAY_TEST_DIR=" + testDir, "WALRELAY_UP_DIR=" + upDir})
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -s env: %v\n%s", err, out)
	}
	for _, want := range []string{"WALRELAY_TEST_PG_PORT='55432'", "WALRELAY_TEST_KAFKA_PORT='59092'", "WALRELAY_TEST_DIR='" + upDir + "'"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("make -s env after a make test run: no %s in\n%s", want, out)
		}
	}
}
