package validate

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"
)

// helmKubeVersion is the oldest Kubernetes the chart supports (kubeVersion in Chart.yaml):
// lint checks the templates against its API deprecations.
const helmKubeVersion = "v1.25.0"

// helmNamespace is the namespace of every rendered release.
const helmNamespace = "walrelay"

func chartDir() string { return filepath.Join(deployDir, "helm", "walrelay") }

// helmValues reads the example values files under deploy/helm/examples and merges them in
// order, as helm's -f flags do.
func helmValues(t *testing.T, files ...string) map[string]any {
	t.Helper()
	vals := map[string]any{}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(deployDir, "helm", "examples", f))
		if err != nil {
			t.Fatal(err)
		}
		v, err := loader.LoadValues(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		vals = loader.MergeMaps(vals, v)
	}
	return vals
}

// renderChart renders the chart as `helm install --dry-run` does without a cluster: the
// values checked against values.schema.json, the templates in strict mode (a missing value
// is an error). It returns the rendered files by name.
func renderChart(t *testing.T, release string, vals map[string]any) (map[string]string, error) {
	t.Helper()
	chrt, err := loader.Load(chartDir())
	if err != nil {
		t.Fatalf("load deploy/helm/walrelay: %v", err)
	}
	kv, err := common.ParseKubeVersion(helmKubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	caps := common.DefaultCapabilities.Copy()
	caps.KubeVersion = *kv
	top, err := util.ToRenderValuesWithSchemaValidation(chrt, vals,
		common.ReleaseOptions{Name: release, Namespace: helmNamespace, Revision: 1, IsInstall: true}, caps, false)
	if err != nil {
		return nil, err
	}
	return engine.Engine{Strict: true}.Render(chrt, top)
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// helmObjects renders the chart and strictly decodes every object it holds.
func helmObjects(t *testing.T, release string, vals map[string]any) (objects, map[string]string) {
	t.Helper()
	files, err := renderChart(t, release, vals)
	if err != nil {
		t.Fatalf("render deploy/helm/walrelay: %v", err)
	}
	var o objects
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if !strings.HasSuffix(name, ".yaml") {
			continue // NOTES.txt, _helpers.tpl
		}
		for i, doc := range docSeparator.Split(files[name], -1) {
			var m map[string]any
			if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
				t.Fatalf("%s document %d: %v\n%s", name, i, err, doc)
			}
			if len(m) == 0 {
				continue // only comments, or a template switched off
			}
			o.add(t, fmt.Sprintf("%s document %d", name, i), []byte(doc))
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return o, files
}

// helmCase is one release in the values matrix of TestHelmChart.
type helmCase struct {
	name    string
	release string
	files   []string       // under deploy/helm/examples, merged in order
	vals    map[string]any // merged last, as --set does
	check   func(t *testing.T, w workload, files map[string]string)
}

func TestHelmChart(t *testing.T) {
	chrt, err := loader.Load(chartDir())
	if err != nil {
		t.Fatal(err)
	}
	if chrt.Metadata.APIVersion != chart.APIVersionV2 {
		t.Errorf("Chart.yaml apiVersion %s, want %s", chrt.Metadata.APIVersion, chart.APIVersionV2)
	}
	cases := []helmCase{
		{name: "defaults", release: "walrelay", check: func(t *testing.T, w workload, files map[string]string) {
			if r := w.d.Spec.Replicas; r == nil || *r != 2 {
				t.Errorf("replicas = %s, want 2 (one streams, one stands by)", ptrString(r))
			}
			if want := imageName(t) + ":" + chrt.Metadata.AppVersion; w.c.Image != want {
				t.Errorf("image %q, want %s (the image make image builds, tagged with the appVersion)", w.c.Image, want)
			}
			wantSecrets(t, w, map[string]secretFile{"WALRELAY_POSTGRES_DSN_FILE": {"walrelay", "postgres-dsn"}})
			if n := len(w.o.monitors) + len(w.o.rules) + len(w.o.serviceAccounts); n != 0 || len(w.o.configMaps) != 1 || len(w.o.pdbs) != 1 {
				t.Errorf("defaults render %d ServiceMonitors, PrometheusRules and ServiceAccounts (want none), %d ConfigMaps and %d PDBs (want 1 each)", n, len(w.o.configMaps), len(w.o.pdbs))
			}
			if notes := files["walrelay/templates/NOTES.txt"]; !strings.Contains(notes, "create secret generic walrelay --from-literal=postgres-dsn=") {
				t.Errorf("NOTES.txt does not say how to create the Secret:\n%s", notes)
			}
		}},
		{name: "release name", release: "orders", check: func(t *testing.T, w workload, _ map[string]string) {
			// Objects and the default DSN Secret follow the release; selectors hold the
			// instance, so two releases in a namespace never select each other's pods.
			if w.d.Name != "walrelay-orders" {
				t.Errorf("Deployment %s, want walrelay-orders", w.d.Name)
			}
			wantSecrets(t, w, map[string]secretFile{"WALRELAY_POSTGRES_DSN_FILE": {"walrelay-orders", "postgres-dsn"}})
			if got := w.d.Spec.Selector.MatchLabels["app.kubernetes.io/instance"]; got != "orders" {
				t.Errorf("selector %v, want app.kubernetes.io/instance: orders", w.d.Spec.Selector.MatchLabels)
			}
		}},
		{name: "sasl-ssl", release: "walrelay", files: []string{"sasl-ssl.yaml"}, check: func(t *testing.T, w workload, _ map[string]string) {
			wantSecrets(t, w, map[string]secretFile{
				"WALRELAY_POSTGRES_DSN_FILE":  {"walrelay", "postgres-dsn"},
				"WALRELAY_SASL_PASSWORD_FILE": {"walrelay", "password"},
				"WALRELAY_KAFKA_TLS_CA_FILE":  {"my-cluster-cluster-ca-cert", "ca.crt"},
			})
			if cfg := renderedConfig(t, w); cfg["sasl_mechanism"] != "SCRAM-SHA-512" || cfg["sasl_username"] != "walrelay" {
				t.Errorf("config %v, want sasl_mechanism SCRAM-SHA-512 and sasl_username walrelay", cfg)
			}
		}},
		{name: "mtls", release: "walrelay", files: []string{"mtls.yaml"}, check: func(t *testing.T, w workload, _ map[string]string) {
			wantSecrets(t, w, map[string]secretFile{
				"WALRELAY_POSTGRES_DSN_FILE":   {"walrelay", "postgres-dsn"},
				"WALRELAY_KAFKA_TLS_CA_FILE":   {"my-cluster-cluster-ca-cert", "ca.crt"},
				"WALRELAY_KAFKA_TLS_CERT_FILE": {"walrelay", "user.crt"},
				"WALRELAY_KAFKA_TLS_KEY_FILE":  {"walrelay", "user.key"},
			})
		}},
		{name: "exactly-once", release: "walrelay", files: []string{"exactly-once.yaml"}, check: func(t *testing.T, w workload, _ map[string]string) {
			if cfg := renderedConfig(t, w); cfg["delivery"] != "exactly-once" || cfg["transactional_id"] != "walrelay-outbox" {
				t.Errorf("config %v, want delivery exactly-once and transactional_id walrelay-outbox", cfg)
			}
		}},
		{name: "monitoring", release: "walrelay", files: []string{"monitoring.yaml"}, check: func(t *testing.T, w workload, _ map[string]string) {
			checkMonitoring(t, w.o)
		}},
		{name: "every option", release: "walrelay", vals: map[string]any{
			"replicaCount":      3,
			"image":             map[string]any{"digest": "sha256:" + strings.Repeat("ab", 32)},
			"imagePullSecrets":  []any{map[string]any{"name": "registry"}},
			"serviceAccount":    map[string]any{"create": true, "annotations": map[string]any{"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/walrelay"}},
			"podAnnotations":    map[string]any{"example.com/team": "payments"},
			"podLabels":         map[string]any{"team": "payments"},
			"nodeSelector":      map[string]any{"kubernetes.io/os": "linux"},
			"tolerations":       []any{map[string]any{"key": "dedicated", "operator": "Equal", "value": "cdc", "effect": "NoSchedule"}},
			"priorityClassName": "high",
			"topologySpreadConstraints": []any{map[string]any{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway",
				"labelSelector": map[string]any{"matchLabels": map[string]any{"app.kubernetes.io/name": "walrelay"}}}},
			"extraEnv":          []any{map[string]any{"name": "AWS_REGION", "value": "eu-west-1"}},
			"extraVolumes":      []any{map[string]any{"name": "tmp", "emptyDir": map[string]any{}}},
			"extraVolumeMounts": []any{map[string]any{"name": "tmp", "mountPath": "/tmp"}},
			"service":           map[string]any{"annotations": map[string]any{"example.com/scrape": "true"}},
			"metrics":           map[string]any{"port": 9300},
			"secrets":           map[string]any{"saslOAuthToken": map[string]any{"name": "walrelay-oauth"}},
			"config":            map[string]any{"sasl_mechanism": "OAUTHBEARER", "kafka_tls": true},
		}, check: func(t *testing.T, w workload, _ map[string]string) {
			if len(w.o.serviceAccounts) != 1 || w.pod.ServiceAccountName != w.o.serviceAccounts[0].Name || w.o.serviceAccounts[0].Annotations["eks.amazonaws.com/role-arn"] == "" {
				t.Errorf("ServiceAccounts %+v, pod's %q: want the created one, annotated", w.o.serviceAccounts, w.pod.ServiceAccountName)
			}
			if want := imageName(t) + "@sha256:" + strings.Repeat("ab", 32); w.c.Image != want {
				t.Errorf("image %q, want %s", w.c.Image, want)
			}
			if w.c.Ports[0].ContainerPort != 9300 || w.pod.PriorityClassName != "high" || len(w.pod.Tolerations) != 1 || len(w.pod.TopologySpreadConstraints) != 1 {
				t.Errorf("port %d, priority class %q, %d tolerations, %d spread constraints: want 9300, high, 1, 1",
					w.c.Ports[0].ContainerPort, w.pod.PriorityClassName, len(w.pod.Tolerations), len(w.pod.TopologySpreadConstraints))
			}
			wantSecrets(t, w, map[string]secretFile{
				"WALRELAY_POSTGRES_DSN_FILE":     {"walrelay", "postgres-dsn"},
				"WALRELAY_SASL_OAUTH_TOKEN_FILE": {"walrelay-oauth", "token"},
			})
		}},
		{name: "everything", release: "walrelay", files: []string{"sasl-ssl.yaml", "exactly-once.yaml", "monitoring.yaml"}, check: func(t *testing.T, w workload, _ map[string]string) {
			if len(w.secretEnv) != 3 || len(w.o.monitors) != 1 || len(w.o.rules) != 1 {
				t.Errorf("%d Secret files, %d ServiceMonitors, %d PrometheusRules, want 3, 1, 1", len(w.secretEnv), len(w.o.monitors), len(w.o.rules))
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vals := loader.MergeMaps(helmValues(t, tc.files...), tc.vals)
			helmLint(t, vals)
			o, files := helmObjects(t, tc.release, vals)
			w := checkWorkload(t, o)
			tc.check(t, w, files)
		})
	}
}

// helmLint runs helm lint's checks (Chart.yaml, values against the schema, templates
// rendered in strict mode and parsed, deprecated APIs at helmKubeVersion): no error and no
// warning may remain.
func helmLint(t *testing.T, vals map[string]any) {
	t.Helper()
	kv, err := common.ParseKubeVersion(helmKubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	res := lint.RunAll(chartDir(), vals, helmNamespace, lint.WithKubeVersion(kv))
	for _, m := range res.Messages {
		if m.Severity >= support.WarningSev {
			t.Errorf("helm lint: %s", m)
		} else {
			t.Logf("helm lint: %s", m)
		}
	}
}

// wantSecrets checks the Secret files walrelay is given.
func wantSecrets(t *testing.T, w workload, want map[string]secretFile) {
	t.Helper()
	if !maps.Equal(w.secretEnv, want) {
		t.Errorf("Secret files %v, want %v", w.secretEnv, want)
	}
}

// renderedConfig is the walrelay config file of the workload's ConfigMap.
func renderedConfig(t *testing.T, w workload) map[string]any {
	t.Helper()
	return readConfigKeys(t, []byte(w.configMap.Data["walrelay.yaml"]))
}

// checkMonitoring checks the ServiceMonitor (by checkWorkload), the PrometheusRule and the
// dashboard ConfigMap: the rules and the dashboard are deploy/'s, unchanged.
func checkMonitoring(t *testing.T, o objects) {
	t.Helper()
	if len(o.monitors) != 1 || len(o.rules) != 1 {
		t.Fatalf("%d ServiceMonitors and %d PrometheusRules, want 1 each", len(o.monitors), len(o.rules))
	}
	for what, l := range map[string]map[string]string{"ServiceMonitor": o.monitors[0].Metadata.Labels, "PrometheusRule": o.rules[0].Metadata.Labels} {
		if l["release"] != "kube-prometheus-stack" {
			t.Errorf("%s labels %v: want release: kube-prometheus-stack (the example's)", what, l)
		}
	}
	b, err := os.ReadFile(filepath.Join(deployDir, "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want ruleGroups
	strictDecode(t, "deploy/alerts.yaml", b, &want)
	if len(want.Groups) == 0 || !reflect.DeepEqual(o.rules[0].Spec, want) {
		t.Errorf("PrometheusRule spec differs from deploy/alerts.yaml:\n%+v\nwant\n%+v", o.rules[0].Spec, want)
	}
	dash, err := os.ReadFile(filepath.Join(deployDir, "grafana", "walrelay-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var found int
	for _, cm := range o.configMaps {
		if cm.Labels["grafana_dashboard"] != "1" {
			continue
		}
		found++
		if got := cm.Data["walrelay-dashboard.json"]; got != string(dash) || len(cm.Data) != 1 {
			t.Errorf("ConfigMap %s: data keys %v, want walrelay-dashboard.json equal to deploy/grafana/walrelay-dashboard.json", cm.Name, keysOf(cm.Data))
		}
		if cm.Annotations["grafana_folder"] != "Kafka" {
			t.Errorf("ConfigMap %s annotations %v, want grafana_folder: Kafka (the example's)", cm.Name, cm.Annotations)
		}
	}
	if found != 1 {
		t.Errorf("%d ConfigMaps labelled grafana_dashboard: \"1\", want 1", found)
	}
}

// TestHelmChartFilesAreDeployCopies: the chart holds copies of the alert rules and the
// dashboard (helm packages only files inside the chart), which must equal deploy/'s.
func TestHelmChartFilesAreDeployCopies(t *testing.T) {
	for copy, orig := range map[string]string{
		"files/alerts.yaml":             "alerts.yaml",
		"files/walrelay-dashboard.json": "grafana/walrelay-dashboard.json",
	} {
		a, err := os.ReadFile(filepath.Join(chartDir(), copy))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(deployDir, orig))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("deploy/helm/walrelay/%s differs from deploy/%s; after editing deploy/%s run: cp deploy/%s deploy/helm/walrelay/%s", copy, orig, orig, orig, copy)
		}
	}
}

// TestHelmChartRejectsBadValues: values.schema.json stops misspelt keys, wrong types and
// secrets put into the config before anything is rendered.
func TestHelmChartRejectsBadValues(t *testing.T) {
	for name, tc := range map[string]struct {
		vals map[string]any
		want string
	}{
		"unknown key":          {map[string]any{"replicas": 3}, "replicas"},
		"wrong type":           {map[string]any{"replicaCount": "two"}, "replicaCount"},
		"dsn in config":        {map[string]any{"config": map[string]any{"postgres_dsn": "postgres://u:pw@db/app"}}, "postgres_dsn"},
		"password in config":   {map[string]any{"config": map[string]any{"sasl_password": "pw"}}, "sasl_password"},
		"metrics_addr":         {map[string]any{"config": map[string]any{"metrics_addr": ":9000"}}, "metrics_addr"},
		"config key spelling":  {map[string]any{"config": map[string]any{"max-in-flight": 10}}, "max-in-flight"},
		"unknown secret field": {map[string]any{"secrets": map[string]any{"saslPassword": map[string]any{"secret": "x"}}}, "secret"},
		"empty secret key":     {map[string]any{"secrets": map[string]any{"postgresDSN": map[string]any{"key": ""}}}, "key"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := renderChart(t, "walrelay", tc.vals)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("render with %v: %v, want a schema error naming %s", tc.vals, err, tc.want)
			}
		})
	}
}

// TestHelmChartConfigRollsPods: a config change changes the pod template (its checksum
// annotation), so helm upgrade rolls the pods as the kustomization's hashed ConfigMap does.
func TestHelmChartConfigRollsPods(t *testing.T) {
	a, _ := helmObjects(t, "walrelay", nil)
	b, _ := helmObjects(t, "walrelay", map[string]any{"config": map[string]any{"log_level": "debug"}})
	ta, tb := a.deployments[0].Spec.Template.Annotations, b.deployments[0].Spec.Template.Annotations
	if ta["checksum/config"] == "" || ta["checksum/config"] == tb["checksum/config"] {
		t.Errorf("pod template annotations %v and %v: want a checksum/config that changes with the config", ta, tb)
	}
}

// TestHelmChartMatchesKustomization: the chart's defaults run walrelay as the kustomization
// does (security contexts, resources, probes, rollout, grace period), so the two ways of
// installing cannot drift apart.
func TestHelmChartMatchesKustomization(t *testing.T) {
	h, _ := helmObjects(t, "walrelay", nil)
	k := buildKustomization(t)
	hp, kp := h.deployments[0].Spec.Template.Spec, k.deployments[0].Spec.Template.Spec
	hc, kc := hp.Containers[0], kp.Containers[0]
	for _, f := range []struct {
		what string
		h, k any
	}{
		{"pod securityContext", hp.SecurityContext, kp.SecurityContext},
		{"container securityContext", hc.SecurityContext, kc.SecurityContext},
		{"resources", hc.Resources, kc.Resources},
		{"livenessProbe", hc.LivenessProbe, kc.LivenessProbe},
		{"readinessProbe", hc.ReadinessProbe, kc.ReadinessProbe},
		{"ports", hc.Ports, kc.Ports},
		{"args", hc.Args, kc.Args},
		{"strategy", h.deployments[0].Spec.Strategy, k.deployments[0].Spec.Strategy},
		{"replicas", h.deployments[0].Spec.Replicas, k.deployments[0].Spec.Replicas},
		{"terminationGracePeriodSeconds", hp.TerminationGracePeriodSeconds, kp.TerminationGracePeriodSeconds},
		{"automountServiceAccountToken", hp.AutomountServiceAccountToken, kp.AutomountServiceAccountToken},
		{"pdb maxUnavailable", h.pdbs[0].Spec.MaxUnavailable, k.pdbs[0].Spec.MaxUnavailable},
	} {
		if !equality.Semantic.DeepEqual(f.h, f.k) {
			t.Errorf("%s: chart %+v, kustomization %+v", f.what, f.h, f.k)
		}
	}
}
