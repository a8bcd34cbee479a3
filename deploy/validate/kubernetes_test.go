package validate

import (
	"fmt"
	"net"
	"os"
	"path"
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
			Port          string `json:"port"`
			Path          string `json:"path,omitempty"`
			Scheme        string `json:"scheme,omitempty"`
			Interval      string `json:"interval,omitempty"`
			ScrapeTimeout string `json:"scrapeTimeout,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// ruleGroups is a Prometheus rule file (deploy/alerts.yaml) and the spec of a Prometheus
// Operator PrometheusRule, which has the same shape; unknown fields fail the strict decode.
type ruleGroups struct {
	Groups []struct {
		Name     string `json:"name"`
		Interval string `json:"interval,omitempty"`
		Rules    []struct {
			Alert       string            `json:"alert,omitempty"`
			Record      string            `json:"record,omitempty"`
			Expr        string            `json:"expr"`
			For         string            `json:"for,omitempty"`
			Labels      map[string]string `json:"labels,omitempty"`
			Annotations map[string]string `json:"annotations,omitempty"`
		} `json:"rules"`
	} `json:"groups"`
}

// prometheusRule is the Prometheus Operator's monitoring.coreos.com/v1 PrometheusRule.
type prometheusRule struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            ruleGroups        `json:"spec"`
}

// objects is what `kubectl apply -k deploy/kubernetes` or `helm install` would apply, each
// object decoded strictly into its API type.
type objects struct {
	deployments     []appsv1.Deployment
	configMaps      []corev1.ConfigMap
	secrets         []corev1.Secret
	services        []corev1.Service
	serviceAccounts []corev1.ServiceAccount
	pdbs            []policyv1.PodDisruptionBudget
	monitors        []serviceMonitor
	rules           []prometheusRule
}

// strictDecode decodes one object into out; unknown or duplicate fields are errors.
func strictDecode(t *testing.T, what string, data []byte, out any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(data, out); err != nil {
		t.Fatalf("%s does not decode strictly: %v\n%s", what, err, data)
	}
}

// decodeAs strictly decodes data into a new T and appends it to list.
func decodeAs[T any](t *testing.T, what string, data []byte, list *[]T) {
	t.Helper()
	var v T
	strictDecode(t, what, data, &v)
	*list = append(*list, v)
}

// add decodes one manifest by its apiVersion and kind; a kind the deploy files are not
// expected to hold is an error.
func (o *objects) add(t *testing.T, what string, data []byte) {
	t.Helper()
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(data, &tm); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	key := tm.APIVersion + " " + tm.Kind
	what += " " + key
	switch key {
	case "apps/v1 Deployment":
		decodeAs(t, what, data, &o.deployments)
	case "v1 ConfigMap":
		decodeAs(t, what, data, &o.configMaps)
	case "v1 Secret":
		decodeAs(t, what, data, &o.secrets)
	case "v1 Service":
		decodeAs(t, what, data, &o.services)
	case "v1 ServiceAccount":
		decodeAs(t, what, data, &o.serviceAccounts)
	case "policy/v1 PodDisruptionBudget":
		decodeAs(t, what, data, &o.pdbs)
	case "monitoring.coreos.com/v1 ServiceMonitor":
		decodeAs(t, what, data, &o.monitors)
	case "monitoring.coreos.com/v1 PrometheusRule":
		decodeAs(t, what, data, &o.rules)
	default:
		t.Errorf("%s: unexpected object", what)
	}
}

// buildKustomization runs kustomize (as kubectl apply -k does) and strictly decodes each
// object into its Kubernetes API type.
func buildKustomization(t *testing.T) objects {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(deployDir, "kubernetes"))
	if err != nil {
		t.Fatalf("kustomize build deploy/kubernetes: %v", err)
	}
	var o objects
	for _, r := range res.Resources() {
		data, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		o.add(t, "kustomize build deploy/kubernetes: "+r.GetName(), data)
	}
	if t.Failed() {
		t.FailNow()
	}
	return o
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

// secretFile is a file of the walrelay container that a Secret's key provides.
type secretFile struct{ secret, key string }

// workload is the walrelay Deployment of a set of objects with what it refers to.
type workload struct {
	o         objects
	d         appsv1.Deployment
	pod       corev1.PodSpec
	c         corev1.Container
	configMap corev1.ConfigMap
	service   corev1.Service
	// secretEnv maps each WALRELAY_*_FILE variable to the Secret key mounted at its path.
	secretEnv map[string]secretFile
}

// checkWorkload checks what every way of deploying walrelay on Kubernetes must get right
// and returns the workload for the caller's own checks.
func checkWorkload(t *testing.T, o objects) workload {
	t.Helper()
	if len(o.deployments) != 1 || len(o.services) != 1 {
		t.Fatalf("%d Deployments and %d Services, want 1 each", len(o.deployments), len(o.services))
	}
	w := workload{o: o, d: o.deployments[0], service: o.services[0]}
	w.pod = w.d.Spec.Template.Spec
	if len(w.pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(w.pod.Containers))
	}
	w.c = w.pod.Containers[0]
	// Secrets are the user's: a shipped Secret would overwrite the real one on every apply.
	if len(o.secrets) != 0 {
		t.Errorf("%d Secret objects (%s): the Secrets are the user's; applying a placeholder would overwrite the real one", len(o.secrets), o.secrets[0].Name)
	}
	w.secretEnv = secretEnv(t, w.pod, w.c)
	if _, ok := w.secretEnv["WALRELAY_POSTGRES_DSN_FILE"]; !ok {
		t.Errorf("no WALRELAY_POSTGRES_DSN_FILE naming a file of a mounted Secret in env %+v", w.c.Env)
	}
	// The --config file is the key walrelay.yaml of a ConfigMap, through a volume.
	if len(w.c.Args) < 3 || w.c.Args[0] != "run" || w.c.Args[1] != "--config" {
		t.Fatalf("args %q, want run --config <file>", w.c.Args)
	}
	for _, vm := range w.c.VolumeMounts {
		for _, v := range w.pod.Volumes {
			if v.Name != vm.Name || v.ConfigMap == nil || path.Join(vm.MountPath, "walrelay.yaml") != w.c.Args[2] {
				continue
			}
			for _, cm := range o.configMaps {
				if cm.Name == v.ConfigMap.Name {
					w.configMap = cm
				}
			}
		}
	}
	if w.configMap.Name == "" {
		t.Fatalf("--config %s is not walrelay.yaml of a mounted ConfigMap", w.c.Args[2])
	}

	t.Run("deployment", func(t *testing.T) {
		d := w.d
		selects(t, "deployment", d.Spec.Selector, d.Spec.Template.Labels)
		// Rolling updates must not wait for a second pod to become ready while the old
		// one holds the slot: with maxUnavailable 0 the new pod must be Ready as a
		// standby, which is why readiness is /healthz.
		if ru := d.Spec.Strategy.RollingUpdate; d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
			t.Errorf("strategy %+v, want RollingUpdate with maxUnavailable 0", d.Spec.Strategy)
		}
		if w.pod.TerminationGracePeriodSeconds == nil {
			t.Error("no terminationGracePeriodSeconds")
		}
		if w.c.Resources.Requests.Cpu().IsZero() || w.c.Resources.Requests.Memory().IsZero() || w.c.Resources.Limits.Memory().IsZero() {
			t.Errorf("resources %+v: want cpu and memory requests and a memory limit", w.c.Resources)
		}
	})

	t.Run("probes", func(t *testing.T) {
		var metricsPort *corev1.ContainerPort
		for i := range w.c.Ports {
			if w.c.Ports[i].Name == "metrics" {
				metricsPort = &w.c.Ports[i]
			}
		}
		if metricsPort == nil {
			t.Fatalf("container ports %+v: none named metrics", w.c.Ports)
		}
		for name, p := range map[string]*corev1.Probe{"liveness": w.c.LivenessProbe, "readiness": w.c.ReadinessProbe} {
			if p == nil || p.HTTPGet == nil {
				t.Errorf("%s probe: want an httpGet probe, got %+v", name, p)
				continue
			}
			if p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.String() != "metrics" {
				t.Errorf("%s probe: GET %s on port %s, want /healthz on port metrics", name, p.HTTPGet.Path, p.HTTPGet.Port.String())
			}
		}
		// The port walrelay listens on (metrics_addr in its config) is the container port.
		cfg := readConfigKeys(t, []byte(w.configMap.Data["walrelay.yaml"]))
		addr, _ := cfg["metrics_addr"].(string)
		if _, port, err := net.SplitHostPort(addr); err != nil || port != itoa(int64(metricsPort.ContainerPort)) {
			t.Errorf("metrics_addr %q and container port %d must agree", addr, metricsPort.ContainerPort)
		}
	})

	t.Run("security", func(t *testing.T) {
		uid, gid := imageUser(t)
		sc := w.pod.SecurityContext
		if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			t.Errorf("pod securityContext %+v: want runAsNonRoot", sc)
		}
		if sc == nil || sc.RunAsUser == nil || sc.RunAsGroup == nil || itoa(*sc.RunAsUser) != uid || itoa(*sc.RunAsGroup) != gid {
			t.Errorf("pod securityContext %+v: want runAsUser %s and runAsGroup %s (the image's USER)", sc, uid, gid)
		}
		csc := w.c.SecurityContext
		if csc == nil || csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem ||
			csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation ||
			csc.Capabilities == nil || !slices.Equal(csc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("container securityContext %+v: want readOnlyRootFilesystem, no privilege escalation, drop ALL", csc)
		}
		if w.pod.AutomountServiceAccountToken == nil || *w.pod.AutomountServiceAccountToken {
			t.Error("walrelay needs no Kubernetes API token: set automountServiceAccountToken: false")
		}
	})

	t.Run("config", func(t *testing.T) {
		if len(w.configMap.Data) != 1 || w.configMap.Data["walrelay.yaml"] == "" {
			t.Fatalf("ConfigMap %s data keys %v, want only walrelay.yaml", w.configMap.Name, keysOf(w.configMap.Data))
		}
		dir := t.TempDir()
		cfgPath := filepath.Join(dir, "walrelay.yaml")
		if err := os.WriteFile(cfgPath, []byte(w.configMap.Data["walrelay.yaml"]), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := checkConfigKeys(t, cfgPath)
		// SIGTERM drains for shutdown_timeout; Kubernetes must wait longer before SIGKILL.
		st, err := time.ParseDuration(fmt.Sprint(cfg["shutdown_timeout"]))
		if err != nil || w.pod.TerminationGracePeriodSeconds == nil || time.Duration(*w.pod.TerminationGracePeriodSeconds)*time.Second <= st {
			t.Errorf("terminationGracePeriodSeconds %s must exceed shutdown_timeout %v", ptrString(w.pod.TerminationGracePeriodSeconds), cfg["shutdown_timeout"])
		}
		// walrelay accepts the container's arguments and environment as the pod gives
		// them, with a file of made-up content at each Secret file's path.
		args := slices.Clone(w.c.Args)
		args[2] = cfgPath
		if err := walrelayStarts(args, podEnv(t, dir, w.c, w.secretEnv)); err != nil {
			t.Error(err)
		}
	})

	t.Run("service", func(t *testing.T) {
		s := w.service
		selects(t, "service", &metav1.LabelSelector{MatchLabels: s.Spec.Selector}, w.d.Spec.Template.Labels)
		if len(s.Spec.Ports) != 1 || s.Spec.Ports[0].Name != "metrics" || s.Spec.Ports[0].TargetPort.String() != "metrics" {
			t.Errorf("service ports %+v, want one named metrics targeting the container port metrics", s.Spec.Ports)
		}
		if !s.Spec.PublishNotReadyAddresses {
			t.Error("publishNotReadyAddresses must be true: every instance is scraped, ready or not")
		}
	})

	t.Run("pdb", func(t *testing.T) {
		for _, pdb := range o.pdbs {
			p := pdb.Spec
			selects(t, "pdb", p.Selector, w.d.Spec.Template.Labels)
			// Both pods are Ready (readiness is /healthz), so maxUnavailable 1 lets a
			// drain evict either one, never both at once.
			if p.MaxUnavailable == nil || p.MaxUnavailable.IntValue() != 1 || p.MinAvailable != nil {
				t.Errorf("pdb %+v, want maxUnavailable 1", p)
			}
		}
	})

	t.Run("servicemonitor", func(t *testing.T) {
		for _, m := range o.monitors {
			sm := m.Spec
			selects(t, "servicemonitor", &sm.Selector, w.service.Labels)
			// deploy/alerts.yaml matches job="walrelay": the job label comes from the
			// Service's label named by jobLabel.
			if job := w.service.Labels[sm.JobLabel]; sm.JobLabel == "" || job != "walrelay" {
				t.Errorf("jobLabel %q gives job %q, want walrelay (deploy/alerts.yaml)", sm.JobLabel, job)
			}
			if len(sm.Endpoints) != 1 {
				t.Fatalf("%d endpoints, want 1", len(sm.Endpoints))
			}
			ep := sm.Endpoints[0]
			if ep.Port != w.service.Spec.Ports[0].Name || ep.Path != "/metrics" {
				t.Errorf("endpoint %+v, want port %s path /metrics", ep, w.service.Spec.Ports[0].Name)
			}
			if _, err := time.ParseDuration(ep.Interval); err != nil {
				t.Errorf("endpoint interval %q: %v", ep.Interval, err)
			}
		}
	})
	return w
}

// secretEnv maps each environment variable of c whose value is a path into a mounted
// Secret to that Secret's key. A secret passed as a value or through secretKeyRef is an
// error: walrelay reads secrets from files, which keeps them out of the environment.
func secretEnv(t *testing.T, pod corev1.PodSpec, c corev1.Container) map[string]secretFile {
	t.Helper()
	files := map[string]secretFile{}
	for _, vm := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name != vm.Name || v.Secret == nil {
				continue
			}
			if !vm.ReadOnly || vm.SubPath != "" {
				t.Errorf("Secret volume %s: mount it read-only and whole (a subPath mount never sees an updated Secret)", v.Name)
			}
			if len(v.Secret.Items) == 0 {
				t.Errorf("Secret volume %s: list the keys it provides (items)", v.Name)
			}
			for _, it := range v.Secret.Items {
				files[path.Join(vm.MountPath, it.Path)] = secretFile{v.Secret.SecretName, it.Key}
				// The files belong to root (and to the fsGroup, when set); walrelay
				// runs as a non-root user.
				mode := int32(0o644)
				if it.Mode != nil {
					mode = *it.Mode
				} else if v.Secret.DefaultMode != nil {
					mode = *v.Secret.DefaultMode
				}
				fsGroup := pod.SecurityContext != nil && pod.SecurityContext.FSGroup != nil
				if mode&0o004 == 0 && (mode&0o040 == 0 || !fsGroup) {
					t.Errorf("Secret volume %s: mode %#o without an fsGroup: walrelay cannot read %s", v.Name, mode, it.Path)
				}
			}
		}
	}
	env := map[string]secretFile{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			t.Errorf("env %s comes from a Secret: mount the Secret and set %s_FILE instead", e.Name, e.Name)
		}
		f, ok := files[e.Value]
		switch {
		case ok && strings.HasSuffix(e.Name, "_FILE"):
			env[e.Name] = f
		case ok:
			t.Errorf("env %s names a Secret file, but only *_FILE settings read files", e.Name)
		case strings.HasSuffix(e.Name, "_FILE"):
			t.Errorf("env %s=%s is no file of a mounted Secret", e.Name, e.Value)
		}
	}
	return env
}

func TestKubernetesManifests(t *testing.T) {
	o := buildKustomization(t)
	w := checkWorkload(t, o)

	if r := w.d.Spec.Replicas; r == nil || *r != 2 {
		t.Errorf("replicas = %s, want 2 (one streams, one stands by)", ptrString(r))
	}
	repo, tag, _ := strings.Cut(w.c.Image, ":")
	if want := imageName(t); repo != want || tag == "" {
		t.Errorf("image %q, want %s:<tag> (the image make image builds)", w.c.Image, want)
	}
	for _, kinds := range []struct {
		what string
		n    int
	}{{"ConfigMap", len(o.configMaps)}, {"PodDisruptionBudget", len(o.pdbs)}, {"ServiceMonitor", len(o.monitors)}} {
		if kinds.n != 1 {
			t.Errorf("kustomize build has %d %s objects, want 1", kinds.n, kinds.what)
		}
	}

	t.Run("secret documented", func(t *testing.T) {
		// The user creates the Secret: docs/deployment.md and the kustomization's
		// comment must name the Secret and key the Deployment mounts.
		f, ok := w.secretEnv["WALRELAY_POSTGRES_DSN_FILE"]
		if !ok {
			t.Fatal("no DSN file")
		}
		want := fmt.Sprintf("create secret generic %s --from-literal=%s=", f.secret, f.key)
		for _, doc := range []string{filepath.Join(repoRoot, "docs", "deployment.md"), filepath.Join(deployDir, "kubernetes", "kustomization.yaml")} {
			b, err := os.ReadFile(doc)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), want) {
				t.Errorf("%s does not say how to create the Secret (%q)", doc, want)
			}
		}
	})
}

// TestKubernetesFilesStrict decodes each manifest file as written (before kustomize) too.
func TestKubernetesFilesStrict(t *testing.T) {
	types := map[string]any{
		"deployment.yaml":     &appsv1.Deployment{},
		"service.yaml":        &corev1.Service{},
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
