package validate

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// serviceMonitor is the part of the Prometheus Operator's monitoring.coreos.com/v1
// ServiceMonitor that the manifests use; unknown fields fail the strict decode.
type serviceMonitor struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		JobLabel          string               `json:"jobLabel,omitempty"`
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector *struct {
			Any        bool     `json:"any,omitempty"`
			MatchNames []string `json:"matchNames,omitempty"`
		} `json:"namespaceSelector,omitempty"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path,omitempty"`
			Scheme   string `json:"scheme,omitempty"`
			Interval string `json:"interval,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// manifests is what `kubectl apply -k deploy/kubernetes` would apply, decoded.
type manifests struct {
	deployment appsv1.Deployment
	configMap  corev1.ConfigMap
	secret     corev1.Secret
	service    corev1.Service
	pdb        policyv1.PodDisruptionBudget
	monitor    serviceMonitor
}

// strictDecode decodes one object into out; unknown or duplicate fields are errors.
func strictDecode(t *testing.T, what string, data []byte, out any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(data, out); err != nil {
		t.Fatalf("%s does not decode strictly: %v\n%s", what, err, data)
	}
}

// buildKustomization runs kustomize (as kubectl apply -k does) and strictly decodes each
// object into its Kubernetes API type.
func buildKustomization(t *testing.T) manifests {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(deployDir, "kubernetes"))
	if err != nil {
		t.Fatalf("kustomize build deploy/kubernetes: %v", err)
	}
	var m manifests
	seen := map[string]int{}
	for _, r := range res.Resources() {
		data, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		key := r.GetApiVersion() + " " + r.GetKind()
		seen[key]++
		switch key {
		case "apps/v1 Deployment":
			strictDecode(t, key, data, &m.deployment)
		case "v1 ConfigMap":
			strictDecode(t, key, data, &m.configMap)
		case "v1 Secret":
			strictDecode(t, key, data, &m.secret)
		case "v1 Service":
			strictDecode(t, key, data, &m.service)
		case "policy/v1 PodDisruptionBudget":
			strictDecode(t, key, data, &m.pdb)
		case "monitoring.coreos.com/v1 ServiceMonitor":
			strictDecode(t, key, data, &m.monitor)
		default:
			t.Errorf("unexpected object %s %s", key, r.GetName())
		}
	}
	for _, want := range []string{"apps/v1 Deployment", "v1 ConfigMap", "v1 Secret", "v1 Service",
		"policy/v1 PodDisruptionBudget", "monitoring.coreos.com/v1 ServiceMonitor"} {
		if seen[want] != 1 {
			t.Errorf("kustomize build has %d %s objects, want 1", seen[want], want)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return m
}

// imageName is the name `make image` tags (IMAGE in test/env/image.sh).
func imageName(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "test", "env", "image.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^IMAGE="\$\{IMAGE:-([^}]+)\}"`).FindSubmatch(b)
	if m == nil {
		t.Fatal(`test/env/image.sh has no IMAGE="${IMAGE:-...}" default`)
	}
	return string(m[1])
}

// imageUser is the USER of deploy/Containerfile, as uid and gid.
func imageUser(t *testing.T) (uid, gid string) {
	t.Helper()
	for _, l := range dockerfileStage(t, "Containerfile") {
		if rest, ok := strings.CutPrefix(l, "USER "); ok {
			uid, gid, _ = strings.Cut(rest, ":")
			return uid, gid
		}
	}
	t.Fatal("deploy/Containerfile has no USER")
	return "", ""
}

func selects(t *testing.T, what string, sel *metav1.LabelSelector, podLabels map[string]string) {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatalf("%s selector: %v", what, err)
	}
	if s.Empty() || !s.Matches(labels.Set(podLabels)) {
		t.Errorf("%s selector %v does not select the walrelay pods (labels %v)", what, s, podLabels)
	}
}

func TestKubernetesManifests(t *testing.T) {
	m := buildKustomization(t)
	d := m.deployment
	pod := d.Spec.Template.Spec

	t.Run("deployment", func(t *testing.T) {
		if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
			t.Errorf("replicas = %s, want 2 (one streams, one stands by)", ptrString(d.Spec.Replicas))
		}
		selects(t, "deployment", d.Spec.Selector, d.Spec.Template.Labels)
		if len(pod.Containers) != 1 {
			t.Fatalf("%d containers, want 1", len(pod.Containers))
		}
		c := pod.Containers[0]
		repo, tag, _ := strings.Cut(c.Image, ":")
		if want := imageName(t); repo != want || tag == "" {
			t.Errorf("image %q, want %s:<tag> (the image make image builds)", c.Image, want)
		}
		// Rolling updates must not wait for a second pod to become ready while the old
		// one holds the slot: with maxUnavailable 0 the new pod must be Ready as a
		// standby, which is why readiness is /healthz (see deployment.yaml).
		if ru := d.Spec.Strategy.RollingUpdate; d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
			t.Errorf("strategy %+v, want RollingUpdate with maxUnavailable 0", d.Spec.Strategy)
		}
		if pod.TerminationGracePeriodSeconds == nil {
			t.Error("no terminationGracePeriodSeconds")
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("resources %+v: want cpu and memory requests and a memory limit", c.Resources)
		}
	})

	t.Run("probes", func(t *testing.T) {
		c := pod.Containers[0]
		var metricsPort *corev1.ContainerPort
		for i := range c.Ports {
			if c.Ports[i].Name == "metrics" {
				metricsPort = &c.Ports[i]
			}
		}
		if metricsPort == nil {
			t.Fatalf("container ports %+v: none named metrics", c.Ports)
		}
		for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
			if p == nil || p.HTTPGet == nil {
				t.Errorf("%s probe: want an httpGet probe, got %+v", name, p)
				continue
			}
			if p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.String() != "metrics" {
				t.Errorf("%s probe: GET %s on port %s, want /healthz on port metrics", name, p.HTTPGet.Path, p.HTTPGet.Port.String())
			}
		}
		// The port walrelay listens on (metrics_addr in its config) is the container port.
		cfg := readConfigKeys(t, []byte(m.configMap.Data["walrelay.yaml"]))
		addr, _ := cfg["metrics_addr"].(string)
		if _, port, err := net.SplitHostPort(addr); err != nil || port != "9187" || metricsPort.ContainerPort != 9187 {
			t.Errorf("metrics_addr %q and container port %d must agree on 9187 (the image's EXPOSE)", addr, metricsPort.ContainerPort)
		}
	})

	t.Run("security", func(t *testing.T) {
		uid, gid := imageUser(t)
		sc := pod.SecurityContext
		if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			t.Errorf("pod securityContext %+v: want runAsNonRoot", sc)
		}
		if sc == nil || sc.RunAsUser == nil || sc.RunAsGroup == nil || itoa(*sc.RunAsUser) != uid || itoa(*sc.RunAsGroup) != gid {
			t.Errorf("pod securityContext %+v: want runAsUser %s and runAsGroup %s (the image's USER)", sc, uid, gid)
		}
		csc := pod.Containers[0].SecurityContext
		if csc == nil || csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem ||
			csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation ||
			csc.Capabilities == nil || !slices.Equal(csc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("container securityContext %+v: want readOnlyRootFilesystem, no privilege escalation, drop ALL", csc)
		}
		if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
			t.Error("walrelay needs no Kubernetes API token: set automountServiceAccountToken: false")
		}
	})

	t.Run("config", func(t *testing.T) {
		c := pod.Containers[0]
		if len(c.Args) < 3 || c.Args[0] != "run" || c.Args[1] != "--config" {
			t.Fatalf("args %q, want run --config <file>", c.Args)
		}
		// The --config file is the ConfigMap's key, through a volume.
		var vol *corev1.Volume
		for i := range pod.Volumes {
			if cm := pod.Volumes[i].ConfigMap; cm != nil && cm.Name == m.configMap.Name {
				vol = &pod.Volumes[i]
			}
		}
		if vol == nil {
			t.Fatalf("no volume of ConfigMap %s", m.configMap.Name)
		}
		var file string
		for _, vm := range c.VolumeMounts {
			if vm.Name == vol.Name {
				file = filepath.Join(vm.MountPath, "walrelay.yaml")
			}
		}
		if c.Args[2] != file {
			t.Errorf("--config %s, want %s (key walrelay.yaml of the mounted ConfigMap)", c.Args[2], file)
		}
		if len(m.configMap.Data) != 1 || m.configMap.Data["walrelay.yaml"] == "" {
			t.Fatalf("ConfigMap data keys %v, want only walrelay.yaml", keysOf(m.configMap.Data))
		}
		path := filepath.Join(t.TempDir(), "walrelay.yaml")
		if err := os.WriteFile(path, []byte(m.configMap.Data["walrelay.yaml"]), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := checkConfigFile(t, path)
		// SIGTERM drains for shutdown_timeout; Kubernetes must wait longer before SIGKILL.
		st, err := time.ParseDuration(cfg["shutdown_timeout"].(string))
		if err != nil || pod.TerminationGracePeriodSeconds == nil || time.Duration(*pod.TerminationGracePeriodSeconds)*time.Second <= st {
			t.Errorf("terminationGracePeriodSeconds %s must exceed shutdown_timeout %v", ptrString(pod.TerminationGracePeriodSeconds), cfg["shutdown_timeout"])
		}
	})

	t.Run("secret", func(t *testing.T) {
		c := pod.Containers[0]
		var found bool
		for _, e := range c.Env {
			if e.Name != "WALRELAY_POSTGRES_DSN" {
				continue
			}
			found = true
			ref := e.ValueFrom
			if e.Value != "" || ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != m.secret.Name {
				t.Fatalf("WALRELAY_POSTGRES_DSN %+v: want it from Secret %s", e, m.secret.Name)
			}
			if _, ok := m.secret.StringData[ref.SecretKeyRef.Key]; !ok {
				t.Errorf("Secret %s has no key %s", m.secret.Name, ref.SecretKeyRef.Key)
			}
		}
		if !found {
			t.Error("no WALRELAY_POSTGRES_DSN in the container's env")
		}
	})

	t.Run("service", func(t *testing.T) {
		s := m.service
		selects(t, "service", &metav1.LabelSelector{MatchLabels: s.Spec.Selector}, d.Spec.Template.Labels)
		if len(s.Spec.Ports) != 1 || s.Spec.Ports[0].Name != "metrics" || s.Spec.Ports[0].TargetPort.String() != "metrics" {
			t.Errorf("service ports %+v, want one named metrics targeting the container port metrics", s.Spec.Ports)
		}
		if !s.Spec.PublishNotReadyAddresses {
			t.Error("publishNotReadyAddresses must be true: every instance is scraped, ready or not")
		}
	})

	t.Run("pdb", func(t *testing.T) {
		p := m.pdb.Spec
		selects(t, "pdb", p.Selector, d.Spec.Template.Labels)
		// Both pods are Ready (readiness is /healthz), so maxUnavailable 1 lets a drain
		// evict either one, never both at once.
		if p.MaxUnavailable == nil || p.MaxUnavailable.IntValue() != 1 || p.MinAvailable != nil {
			t.Errorf("pdb %+v, want maxUnavailable 1", p)
		}
	})

	t.Run("servicemonitor", func(t *testing.T) {
		sm := m.monitor.Spec
		selects(t, "servicemonitor", &sm.Selector, m.service.Labels)
		// deploy/alerts.yaml matches job="walrelay": the job label comes from the
		// Service's label named by jobLabel.
		if job := m.service.Labels[sm.JobLabel]; sm.JobLabel == "" || job != "walrelay" {
			t.Errorf("jobLabel %q gives job %q, want walrelay (deploy/alerts.yaml)", sm.JobLabel, job)
		}
		if len(sm.Endpoints) != 1 {
			t.Fatalf("%d endpoints, want 1", len(sm.Endpoints))
		}
		ep := sm.Endpoints[0]
		if ep.Port != m.service.Spec.Ports[0].Name || ep.Path != "/metrics" {
			t.Errorf("endpoint %+v, want port %s path /metrics", ep, m.service.Spec.Ports[0].Name)
		}
		if _, err := time.ParseDuration(ep.Interval); err != nil {
			t.Errorf("endpoint interval %q: %v", ep.Interval, err)
		}
	})
}

// TestKubernetesFilesStrict decodes each manifest file as written (before kustomize) too.
func TestKubernetesFilesStrict(t *testing.T) {
	types := map[string]any{
		"deployment.yaml":     &appsv1.Deployment{},
		"service.yaml":        &corev1.Service{},
		"secret.yaml":         &corev1.Secret{},
		"pdb.yaml":            &policyv1.PodDisruptionBudget{},
		"servicemonitor.yaml": &serviceMonitor{},
	}
	entries, err := os.ReadDir(filepath.Join(deployDir, "kubernetes"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := e.Name()
		if name == "kustomization.yaml" || name == "walrelay.yaml" {
			continue
		}
		out, ok := types[name]
		if !ok {
			t.Errorf("deploy/kubernetes/%s: not known to this test (add it to kustomization.yaml and here)", name)
			continue
		}
		data, err := os.ReadFile(filepath.Join(deployDir, "kubernetes", name))
		if err != nil {
			t.Fatal(err)
		}
		strictDecode(t, name, data, out)
	}
}

func TestStrictDecodeRejectsUnknownField(t *testing.T) {
	var d appsv1.Deployment
	err := yaml.UnmarshalStrict([]byte("apiVersion: apps/v1\nkind: Deployment\nspec:\n  replica: 2\n"), &d)
	if err == nil || !strings.Contains(err.Error(), "replica") {
		t.Fatalf("UnmarshalStrict with spec.replica: %v, want an unknown-field error", err)
	}
}

func ptrString[T any](p *T) string {
	if p == nil {
		return "unset"
	}
	return fmt.Sprint(*p)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func keysOf(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
