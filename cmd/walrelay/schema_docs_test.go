package main

import (
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/walrelay/walrelay/cmd/walrelay/internal/config"
)

// TestSchemaDocExamplesLoad: every YAML example of the schema registry
// settings in the README and the docs is a configuration walrelay run
// takes, with the rules it shows.
func TestSchemaDocExamplesLoad(t *testing.T) {
	block := regexp.MustCompile("(?s)```yaml\n(.*?)```")
	n := 0
	for _, doc := range []string{"../../README.md", "../../docs/schema-registry.md", "../../docs/configuration.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range block.FindAllStringSubmatch(string(b), -1) {
			if !strings.Contains(m[1], "schema_") {
				continue
			}
			n++
			t.Run(fmt.Sprintf("%s#%d", doc, i), func(t *testing.T) {
				dir := t.TempDir()
				// The secret's file of the example, and a URL for an example of the rules alone.
				text := strings.ReplaceAll(m[1], "/run/secrets/registry-password", writeFile(t, dir, "pw", "secret\n"))
				file := writeFile(t, dir, "walrelay.yaml", text)
				cfg := config.Defaults()
				args := []string{"--config", file, "--postgres-dsn", "postgres://u@h/db", "--kafka-brokers", "k:9092",
					"--table", "public.outbox,billing.outbox"}
				env := envMap(map[string]string{"WALRELAY_SCHEMA_REGISTRY_URL": "http://registry:8081"})
				if err := config.Load(config.Command{Name: "run"}, &cfg, args, env, io.Discard); err != nil {
					t.Fatalf("%v\n%s", err, m[1])
				}
				sc := cfg.Sink().Schema
				if len(sc.URLs) == 0 || !sc.Enabled() && !strings.Contains(m[1], "schema_dir") {
					t.Errorf("no registry URL or no rules from\n%s", m[1])
				}
				if rules := strings.Count(m[1], "- table:"); len(sc.Rules) != rules {
					t.Errorf("%d rules, the example shows %d:\n%s", len(sc.Rules), rules, m[1])
				}
			})
		}
	}
	if n < 4 {
		t.Errorf("found %d YAML examples of schema settings, want at least 4 (schema-registry.md, configuration.md)", n)
	}
}
