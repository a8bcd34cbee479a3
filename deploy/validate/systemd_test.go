package validate

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSystemdUnit: systemd-analyze verify reports nothing for deploy/walrelay.service (with
// ExecStart pointing at the freshly built binary), and its ExecStart is `walrelay run` with
// flags walrelay knows and the config file of deploy/walrelay.yaml's layout.
func TestSystemdUnit(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze is missing (apt-get install systemd)")
	}
	unit, err := os.ReadFile(filepath.Join(deployDir, "walrelay.service"))
	if err != nil {
		t.Fatal(err)
	}
	var exec0 string
	for _, l := range strings.Split(string(unit), "\n") {
		if v, ok := strings.CutPrefix(l, "ExecStart="); ok {
			exec0 = v
		}
	}
	args := strings.Fields(exec0)
	if len(args) < 2 || args[0] != "/usr/local/bin/walrelay" || args[1] != "run" {
		t.Fatalf("ExecStart=%s, want /usr/local/bin/walrelay run ...", exec0)
	}
	flags := walrelayRunFlags(t)
	for _, a := range args[2:] {
		if name, ok := strings.CutPrefix(a, "--"); ok && !flags[strings.SplitN(name, "=", 2)[0]] {
			t.Errorf("ExecStart flag %s is not a flag of walrelay run", a)
		}
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "walrelay.service")
	if err := os.WriteFile(path, []byte(strings.Replace(string(unit), "ExecStart=/usr/local/bin/walrelay", "ExecStart="+walrelayBin, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify walrelay.service: %v\n%s", err, out)
	}
}
