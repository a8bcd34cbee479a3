package validate

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

var (
	// repoRoot is the walrelay repository; deployDir its deploy/ directory.
	repoRoot  string
	deployDir string
	// walrelayBin is the binary built from repoRoot by TestMain.
	walrelayBin string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	repoRoot, deployDir = root, filepath.Join(root, "deploy")
	tmp, err := os.MkdirTemp("", "walrelay-validate")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	walrelayBin = filepath.Join(tmp, "walrelay")
	build := exec.Command("go", "build", "-o", walrelayBin, "./cmd/walrelay")
	build.Dir = repoRoot
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build walrelay: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// closedDSN points walrelay at a closed port on 127.0.0.1, so nothing leaves the machine.
const closedDSN = "postgres://validate@127.0.0.1:1/validate?connect_timeout=2"

// walrelayAccepts starts `walrelay run --config path` and returns nil when walrelay accepts
// the file: it got past loading and validating its configuration and failed only on
// connecting. The DSN is given as a flag (flags beat the file).
func walrelayAccepts(path string) error {
	return walrelayStarts([]string{"run", "--config", path, "--postgres-dsn", closedDSN}, nil)
}

// walrelayStarts runs walrelay with args (the first is the command, run) and only env and
// PATH in its environment, with the brokers replaced by a closed port on 127.0.0.1 and no
// metrics listener (flags beat the file and the environment). It returns nil when walrelay
// got past its configuration and failed only on connecting.
func walrelayStarts(args, env []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args = append(slices.Clone(args), "--kafka-brokers", "127.0.0.1:1", "--kafka-timeout", "1s", "--metrics-addr", "")
	cmd := exec.CommandContext(ctx, walrelayBin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return fmt.Errorf("walrelay %q: want exit code 1 (could not connect), got %v\n%s", args, err, stderr.String())
	}
	if code := ee.ExitCode(); code != 1 || !strings.Contains(stderr.String(), "walrelay starting") {
		return fmt.Errorf("walrelay refused %q (exit code %d; 2 is a config error):\n%s", args, code, stderr.String())
	}
	return nil
}

func checkWalrelayConfig(t *testing.T, path string) {
	t.Helper()
	if err := walrelayAccepts(path); err != nil {
		t.Fatal(err)
	}
}

// walrelayRunFlags lists the flags of `walrelay run -h`.
func walrelayRunFlags(t *testing.T) map[string]bool {
	t.Helper()
	out, _ := exec.Command(walrelayBin, "run", "-h").CombinedOutput()
	flags := map[string]bool{}
	re := regexp.MustCompile(`^\s+-([a-z0-9-]+)`)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			flags[m[1]] = true
		}
	}
	if !flags["postgres-dsn"] || !flags["config"] {
		t.Fatalf("walrelay run -h lists no postgres-dsn or config flag:\n%s", out)
	}
	return flags
}

// readConfigKeys returns the top-level keys of a walrelay YAML config.
func readConfigKeys(t *testing.T, data []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal(data, &m); err != nil {
		t.Fatalf("walrelay config: %v", err)
	}
	return m
}

// checkConfigFile checks a walrelay config file: walrelay accepts it, every key is a flag
// of `walrelay run`, and it carries no Postgres DSN (the DSN holds a password: it belongs
// in a secret).
func checkConfigFile(t *testing.T, path string) map[string]any {
	t.Helper()
	keys := checkConfigKeys(t, path)
	checkWalrelayConfig(t, path)
	return keys
}

// checkConfigKeys checks that every key of a walrelay config file is a flag of
// `walrelay run` and that it carries no secret (a secret belongs in a Secret or a file).
func checkConfigKeys(t *testing.T, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	keys := readConfigKeys(t, data)
	flags := walrelayRunFlags(t)
	for k := range keys {
		if !flags[strings.ReplaceAll(k, "_", "-")] && k != "tables" {
			t.Errorf("%s: key %q is not a flag of walrelay run", path, k)
		}
	}
	for _, k := range []string{"postgres_dsn", "sasl_password"} {
		if _, ok := keys[k]; ok {
			t.Errorf("%s: %s belongs in a secret (a file named by %s_file), not in the config file", path, k, k)
		}
	}
	return keys
}

func TestExampleConfig(t *testing.T) {
	// deploy/walrelay.yaml is the file the systemd unit expects; it does carry a DSN
	// (without password), so only walrelay's own check applies.
	checkWalrelayConfig(t, filepath.Join(deployDir, "walrelay.yaml"))
}

func TestConfigCheckRejectsBadFile(t *testing.T) {
	// The check itself must catch what walrelay refuses: a bad value and an unknown key.
	for name, body := range map[string]string{
		"max-in-flight": "kafka_brokers: [k:9092]\nmax_in_flight: lots\n",
		"unknown key":   "kafka_brokers: [k:9092]\nmax_inflight: 10\n",
	} {
		t.Run(name, func(t *testing.T) {
			bad := filepath.Join(t.TempDir(), "bad.yaml")
			if err := os.WriteFile(bad, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			err := walrelayAccepts(bad)
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Fatalf("walrelayAccepts(%q) = %v, want a refusal naming %s", body, err, name)
			}
		})
	}
}
