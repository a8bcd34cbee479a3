package validate

import (
	"context"
	"encoding/json"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

// loadCompose loads deploy/docker-compose.yml with compose-go (the loader of docker
// compose), which validates it against the compose specification's schema.
func loadCompose(t *testing.T, path string) *types.Project {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{path}, cli.WithWorkingDirectory(filepath.Dir(path)))
	if err != nil {
		t.Fatal(err)
	}
	p, err := cli.ProjectFromOptions(context.Background(), opts)
	if err != nil {
		t.Fatalf("compose file %s: %v", path, err)
	}
	return p
}

// bindSource returns the host file mounted at target in service s ("" when none).
func bindSource(s types.ServiceConfig, target string) string {
	for _, v := range s.Volumes {
		if v.Type == types.VolumeTypeBind && v.Target == target {
			return v.Source
		}
	}
	return ""
}

func env(s types.ServiceConfig, key string) string {
	if v := s.Environment[key]; v != nil {
		return *v
	}
	return ""
}

func published(t *testing.T, s types.ServiceConfig, target uint32) {
	t.Helper()
	for _, p := range s.Ports {
		if p.Target == target && p.Published != "" {
			return
		}
	}
	t.Errorf("service %s does not publish port %d", s.Name, target)
}

// prometheusConfig is the part of prometheus.yml the compose setup uses; unknown fields
// fail the strict decode.
type prometheusConfig struct {
	Global struct {
		ScrapeInterval     string `json:"scrape_interval"`
		EvaluationInterval string `json:"evaluation_interval"`
	} `json:"global"`
	RuleFiles     []string `json:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `json:"job_name"`
		StaticConfigs []struct {
			Targets []string `json:"targets"`
		} `json:"static_configs"`
	} `json:"scrape_configs"`
}

type grafanaDatasources struct {
	APIVersion  int `json:"apiVersion"`
	Datasources []struct {
		Name      string `json:"name"`
		UID       string `json:"uid"`
		Type      string `json:"type"`
		Access    string `json:"access"`
		URL       string `json:"url"`
		IsDefault bool   `json:"isDefault"`
		Editable  bool   `json:"editable"`
	} `json:"datasources"`
}

type grafanaDashboards struct {
	APIVersion int `json:"apiVersion"`
	Providers  []struct {
		Name            string `json:"name"`
		Folder          string `json:"folder"`
		Type            string `json:"type"`
		DisableDeletion bool   `json:"disableDeletion"`
		AllowUIUpdates  bool   `json:"allowUiUpdates"`
		Options         struct {
			Path string `json:"path"`
		} `json:"options"`
	} `json:"providers"`
}

func readStrict(t *testing.T, path string, out any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	strictDecode(t, path, data, out)
}

func TestCompose(t *testing.T) {
	p := loadCompose(t, filepath.Join(deployDir, "docker-compose.yml"))
	want := []string{"grafana", "kafka", "migrate", "postgres", "prometheus", "walrelay"}
	if got := p.ServiceNames(); !slices.Equal(sortedCopy(got), want) {
		t.Fatalf("services %v, want %v", got, want)
	}
	svc := p.Services

	t.Run("bind mounts exist in deploy", func(t *testing.T) {
		for _, s := range svc {
			for _, v := range s.Volumes {
				if v.Type != types.VolumeTypeBind {
					if _, ok := p.Volumes[v.Source]; !ok {
						t.Errorf("%s: volume %q is not declared", s.Name, v.Source)
					}
					continue
				}
				if !v.ReadOnly {
					t.Errorf("%s: bind mount %s should be read-only", s.Name, v.Source)
				}
				rel, err := filepath.Rel(deployDir, v.Source)
				if err != nil || strings.HasPrefix(rel, "..") {
					t.Errorf("%s: bind mount %s is outside deploy/", s.Name, v.Source)
				}
				if fi, err := os.Stat(v.Source); err != nil || fi.IsDir() {
					t.Errorf("%s: bind mount source %s is not a file in the repository: %v", s.Name, v.Source, err)
				}
			}
		}
	})

	t.Run("postgres", func(t *testing.T) {
		pg := svc["postgres"]
		if !slices.Contains(pg.Command, "wal_level=logical") {
			t.Errorf("postgres command %q lacks wal_level=logical", pg.Command)
		}
		if pg.HealthCheck == nil {
			t.Error("postgres has no healthcheck (walrelay waits for it)")
		}
		published(t, pg, 5432)
	})

	brokers := func(t *testing.T) []string {
		k := svc["kafka"]
		if k.HealthCheck == nil {
			t.Error("kafka has no healthcheck (walrelay waits for it)")
		}
		published(t, k, 29092)
		var internal []string
		for _, l := range strings.Split(env(k, "KAFKA_ADVERTISED_LISTENERS"), ",") {
			if u, err := url.Parse(l); err == nil && strings.EqualFold(u.Scheme, env(k, "KAFKA_INTER_BROKER_LISTENER_NAME")) {
				internal = append(internal, u.Host)
			}
		}
		if len(internal) == 0 {
			t.Fatalf("kafka advertises no %s listener", env(k, "KAFKA_INTER_BROKER_LISTENER_NAME"))
		}
		return internal
	}

	t.Run("walrelay", func(t *testing.T) {
		w := svc["walrelay"]
		if w.Build == nil || w.Build.Context != repoRoot || w.Build.Dockerfile != "deploy/Dockerfile" {
			t.Errorf("walrelay build %+v, want context .. (the repository) and deploy/Dockerfile", w.Build)
		}
		if w.Image != imageName(t)+":latest" {
			t.Errorf("walrelay image %q, want %s:latest (the name make image tags)", w.Image, imageName(t))
		}
		if w.User != "65532:65532" || !w.ReadOnly {
			t.Errorf("walrelay user %q read_only %v, want 65532:65532 and read-only", w.User, w.ReadOnly)
		}
		published(t, w, 8187)
		if len(w.Command) != 3 || w.Command[0] != "run" || w.Command[1] != "--config" {
			t.Fatalf("walrelay command %q, want run --config <file>", w.Command)
		}
		file := bindSource(w, w.Command[2])
		if file == "" {
			t.Fatalf("walrelay --config %s is not a bind-mounted file", w.Command[2])
		}
		cfg := checkConfigFile(t, file)
		got, _ := cfg["kafka_brokers"].([]any)
		if want := brokers(t); len(got) != 1 || got[0] != want[0] {
			t.Errorf("walrelay kafka_brokers %v, want the broker's internal listener %v", got, want)
		}
		checkMetricsAllInterfaces(t, cfg, "8187")
		for _, name := range []string{"walrelay", "migrate"} {
			s := svc[name]
			u, err := url.Parse(env(s, "WALRELAY_POSTGRES_DSN"))
			if err != nil || u.Hostname() != "postgres" || u.User.Username() != env(svc["postgres"], "POSTGRES_USER") ||
				strings.TrimPrefix(u.Path, "/") != env(svc["postgres"], "POSTGRES_DB") {
				t.Errorf("%s: WALRELAY_POSTGRES_DSN %q does not point at the postgres service's user and database", name, env(s, "WALRELAY_POSTGRES_DSN"))
			}
		}
		for dep, cond := range map[string]string{"postgres": "service_healthy", "kafka": "service_healthy", "migrate": "service_completed_successfully"} {
			if w.DependsOn[dep].Condition != cond {
				t.Errorf("walrelay depends_on %s: condition %q, want %s", dep, w.DependsOn[dep].Condition, cond)
			}
		}
		m := svc["migrate"]
		if !slices.Equal([]string(m.Command), []string{"migrate"}) || m.Image != w.Image {
			t.Errorf("migrate: command %q image %q, want migrate on %s", m.Command, m.Image, w.Image)
		}
	})

	t.Run("prometheus", func(t *testing.T) {
		pr := svc["prometheus"]
		published(t, pr, 9090)
		var cfg prometheusConfig
		readStrict(t, bindSource(pr, "/etc/prometheus/prometheus.yml"), &cfg)
		for _, rf := range cfg.RuleFiles {
			if src := bindSource(pr, rf); src != filepath.Join(deployDir, "alerts.yaml") {
				t.Errorf("rule file %s is mounted from %q, want deploy/alerts.yaml", rf, src)
			}
		}
		if len(cfg.RuleFiles) != 1 {
			t.Errorf("rule_files %v, want deploy/alerts.yaml", cfg.RuleFiles)
		}
		// alerts.yaml expects job="walrelay"; the target is the walrelay service's metrics port.
		var ok bool
		for _, sc := range cfg.ScrapeConfigs {
			if sc.JobName == "walrelay" && len(sc.StaticConfigs) == 1 && slices.Equal(sc.StaticConfigs[0].Targets, []string{"walrelay:8187"}) {
				ok = true
			}
		}
		if !ok {
			t.Errorf("prometheus.yml has no job walrelay scraping walrelay:8187: %+v", cfg.ScrapeConfigs)
		}
	})

	t.Run("grafana", func(t *testing.T) {
		g := svc["grafana"]
		published(t, g, 3000)
		var ds grafanaDatasources
		readStrict(t, bindSource(g, "/etc/grafana/provisioning/datasources/walrelay.yaml"), &ds)
		if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" {
			t.Fatalf("datasources %+v, want one prometheus", ds.Datasources)
		}
		if u, err := url.Parse(ds.Datasources[0].URL); err != nil || u.Host != net.JoinHostPort("prometheus", "9090") {
			t.Errorf("datasource url %q, want the prometheus service", ds.Datasources[0].URL)
		}
		var db grafanaDashboards
		readStrict(t, bindSource(g, "/etc/grafana/provisioning/dashboards/walrelay.yaml"), &db)
		if len(db.Providers) != 1 || db.Providers[0].Type != "file" {
			t.Fatalf("dashboard providers %+v, want one of type file", db.Providers)
		}
		dash := bindSource(g, filepath.Join(db.Providers[0].Options.Path, "walrelay-dashboard.json"))
		if dash != filepath.Join(deployDir, "grafana", "walrelay-dashboard.json") {
			t.Fatalf("the provider's directory %s does not hold deploy/grafana/walrelay-dashboard.json (got %q)", db.Providers[0].Options.Path, dash)
		}
		b, err := os.ReadFile(dash)
		if err != nil {
			t.Fatal(err)
		}
		var d map[string]any
		if err := json.Unmarshal(b, &d); err != nil || d["panels"] == nil {
			t.Errorf("%s is not a Grafana dashboard (JSON with panels): %v", dash, err)
		}
	})
}

// TestComposeLoaderRejectsUnknownField: the loader really validates the schema.
func TestComposeLoaderRejectsUnknownField(t *testing.T) {
	path := filepath.Join(t.TempDir(), "compose.yml")
	if err := os.WriteFile(path, []byte("services:\n  a:\n    image: x\n    restrat: always\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	opts, err := cli.NewProjectOptions([]string{path}, cli.WithWorkingDirectory(filepath.Dir(path)), cli.WithName("x"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.ProjectFromOptions(context.Background(), opts); err == nil || !strings.Contains(err.Error(), "restrat") {
		t.Fatalf("loading a service with restrat: %v, want a schema error", err)
	}
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}
