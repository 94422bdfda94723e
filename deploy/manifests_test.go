package deploy

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/berthrt/berth/node"
)

// manifests are the documents of kubernetes/berth.yaml, each decoded
// strictly into Kubernetes' own type for its kind.
type manifests struct {
	config *corev1.ConfigMap
	svc    *corev1.Service
	set    *appsv1.StatefulSet
	pdb    *policyv1.PodDisruptionBudget
}

// load decodes kubernetes/berth.yaml; a document of another kind, or a
// field its type does not have, fails t.
func load(t *testing.T) manifests {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("kubernetes", "berth.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m manifests
	for i, doc := range regexp.MustCompile(`(?m)^---$`).Split(string(b), -1) {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		var into any
		switch tm.APIVersion + " " + tm.Kind {
		case "v1 ConfigMap":
			m.config = new(corev1.ConfigMap)
			into = m.config
		case "v1 Service":
			m.svc = new(corev1.Service)
			into = m.svc
		case "apps/v1 StatefulSet":
			m.set = new(appsv1.StatefulSet)
			into = m.set
		case "policy/v1 PodDisruptionBudget":
			m.pdb = new(policyv1.PodDisruptionBudget)
			into = m.pdb
		default:
			t.Fatalf("document %d is a %s %s, which this test does not know", i, tm.APIVersion, tm.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
			t.Fatalf("document %d (%s): %v", i, tm.Kind, err)
		}
	}
	if m.config == nil || m.svc == nil || m.set == nil || m.pdb == nil {
		t.Fatalf("kubernetes/berth.yaml lacks a ConfigMap, a Service, a StatefulSet or a PodDisruptionBudget: %+v", m)
	}
	return m
}

// The manifests parse into Kubernetes' types with no unknown field, and
// fit together: the Service, the budget and the StatefulSet select the
// pods; the probes ask the node's /readyz and /healthz on its HTTP port;
// the preStop hook drains the node through its admin API; the grace
// period covers that drain, the stop and the close; the node runs as
// non-root with its secrets from Secrets, never on its command line; and
// the settings file loads as berth node loads it, with the files it names
// where the volumes put them.
func TestTheKubernetesManifestsFitTogetherAndTheNodesSettingsLoad(t *testing.T) {
	m := load(t)
	pod := m.set.Spec.Template
	podLabels := labels.Set(pod.Labels)
	for what, sel := range map[string]*metav1.LabelSelector{"the StatefulSet": m.set.Spec.Selector, "the budget": m.pdb.Spec.Selector} {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil || s.Empty() || !s.Matches(podLabels) {
			t.Errorf("%s's selector %v does not select the pods (%v): %v", what, sel, podLabels, err)
		}
	}
	if s := labels.SelectorFromSet(m.svc.Spec.Selector); s.Empty() || !s.Matches(podLabels) {
		t.Errorf("the Service's selector %v does not select the pods", m.svc.Spec.Selector)
	}
	if m.set.Spec.ServiceName != m.svc.Name || m.svc.Spec.ClusterIP != corev1.ClusterIPNone || !m.svc.Spec.PublishNotReadyAddresses {
		t.Errorf("the StatefulSet's service %q is not the headless Service %q that publishes pods not ready yet", m.set.Spec.ServiceName, m.svc.Name)
	}
	if mu := m.pdb.Spec.MaxUnavailable; mu == nil || mu.IntValue() != 1 {
		t.Errorf("the budget lets %v pods go at once, want 1: a drain needs the others", mu)
	}

	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want berth's alone", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	// The settings: the file of the ConfigMap, as the container's
	// arguments name it, loaded with the container's environment (the
	// pod's name and a database for the variables Kubernetes fills in).
	conf, ok := m.config.Data["berth.conf"]
	if !ok {
		t.Fatal("the ConfigMap has no berth.conf")
	}
	mounts := map[string]string{} // volume name: mount path
	for _, vm := range c.VolumeMounts {
		mounts[vm.Name] = vm.MountPath
	}
	if !slices.Equal(c.Args, []string{"-config", filepath.Join(mounts["conf"], "berth.conf")}) {
		t.Errorf("the container's arguments %q do not name the ConfigMap's berth.conf where it is mounted (%s)", c.Args, mounts["conf"])
	}
	dir := t.TempDir()
	confFile := filepath.Join(dir, "berth.conf")
	if err := os.WriteFile(confFile, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("an-admin-credential-of-a-test"), 0o600); err != nil {
		t.Fatal(err)
	}
	getenv := func(k string) string {
		switch k {
		case "BERTH_NAME":
			return "berth-0"
		case "BERTH_DB":
			return "postgres://berth:secret@db/berth"
		case "BERTH_ADMIN_TOKEN_FILE":
			return tokenFile // the Secret's file, here
		}
		return strings.NewReplacer("$(BERTH_NAME)", "berth-0", "$(POD_NAMESPACE)", "default").Replace(env[k].Value)
	}
	cfg, err := node.Load([]string{"-config", confFile}, getenv, &bytes.Buffer{})
	if err != nil {
		t.Fatalf("berth.conf with the container's environment: %v", err)
	}
	if cfg.Name != "berth-0" || cfg.Advertise != "berth-0.berth.default.svc.cluster.local:7000" || cfg.AdminToken == "" {
		t.Errorf("settings: name %q, advertise %q, credential read %v", cfg.Name, cfg.Advertise, cfg.AdminToken != "")
	}
	for _, f := range []string{cfg.TLSCert, cfg.TLSKey, cfg.TLSCA} {
		if filepath.Dir(f) != mounts["tls"] {
			t.Errorf("berth.conf names %s, outside the TLS Secret's mount %s", f, mounts["tls"])
		}
	}
	if filepath.Dir(env["BERTH_ADMIN_TOKEN_FILE"].Value) != mounts["admin"] {
		t.Errorf("$BERTH_ADMIN_TOKEN_FILE %s is outside the admin Secret's mount %s", env["BERTH_ADMIN_TOKEN_FILE"].Value, mounts["admin"])
	}
	if env["BERTH_NAME"].ValueFrom == nil || env["BERTH_NAME"].ValueFrom.FieldRef == nil || env["BERTH_NAME"].ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Error("$BERTH_NAME is not the pod's name")
	}
	if e := env["BERTH_DB"]; e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
		t.Error("$BERTH_DB does not come from a Secret")
	}
	secrets := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil {
			secrets[v.Name] = true
			if mode := v.Secret.DefaultMode; mode == nil || *mode&0o007 != 0 || pod.Spec.SecurityContext.FSGroup == nil {
				t.Errorf("the Secret volume %s is readable by others (mode %o) or not by the node's group", v.Name, *mode)
			}
		}
	}
	if !secrets["tls"] || !secrets["admin"] {
		t.Errorf("the TLS files and the credential are not Secrets: %v", secrets)
	}
	for _, a := range c.Args {
		if strings.Contains(a, "postgres://") || strings.Contains(a, "token") {
			t.Errorf("a secret on the command line: %q", a)
		}
	}

	// The probes, on the node's HTTP port.
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if fmt.Sprintf(":%d", ports["http"]) != cfg.HTTP {
		t.Errorf("the port named http is %d; the node serves HTTP on %s", ports["http"], cfg.HTTP)
	}
	if fmt.Sprintf(":%d", ports["transport"]) != cfg.Listen || fmt.Sprintf(":%d", ports["admin"]) != cfg.Admin {
		t.Errorf("ports %v; the node listens on %s and serves the admin API on %s", ports, cfg.Listen, cfg.Admin)
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"readiness", c.ReadinessProbe, "/readyz"}, {"liveness", c.LivenessProbe, "/healthz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "http" {
			t.Errorf("the %s probe is not GET %s on the http port: %+v", p.name, p.path, p.probe)
		}
	}
	// A stall pauses a node for up to a lease and more; liveness must give
	// it far longer than that before a restart.
	if l := c.LivenessProbe; time.Duration(l.PeriodSeconds*l.FailureThreshold)*time.Second < 30*time.Second {
		t.Errorf("the liveness probe restarts a node silent for %d s: a stall would become a restart", l.PeriodSeconds*l.FailureThreshold)
	}

	// The preStop hook drains the node through its admin API, on the
	// node's own address, checked against the TLS Secret's CA.
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil {
		t.Fatal("no preStop hook that runs a command")
	}
	hook := c.Lifecycle.PreStop.Exec.Command
	want := []string{"/berth", "admin", "-addr", fmt.Sprintf("127.0.0.1:%d", ports["admin"]), "-ca", cfg.TLSCA}
	if len(hook) < len(want)+1 || !slices.Equal(hook[:len(want)], want) || hook[len(hook)-1] != "drain" || !cfg.AdminWrite {
		t.Errorf("the preStop hook %q does not drain the node through its admin API (%v; writes allowed: %v)", hook, want, cfg.AdminWrite)
	}
	hookTimeout := time.Duration(0)
	if i := slices.Index(hook, "-timeout"); i >= 0 && i+1 < len(hook) {
		hookTimeout, _ = time.ParseDuration(hook[i+1])
	}
	if hookTimeout <= 0 {
		t.Errorf("the preStop hook %q has no -timeout: berth admin's default would end it before the drain", hook)
	}
	// The grace period covers the preStop drain, SIGTERM's stop after it,
	// and the 5 s a node gives its host's close.
	grace := time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	if need := hookTimeout + cfg.StopTimeout + 5*time.Second; grace < need {
		t.Errorf("terminationGracePeriodSeconds %v is under the preStop's %v, stop-timeout %v and the close's 5 s", grace, hookTimeout, cfg.StopTimeout)
	}

	sc := pod.Spec.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		t.Error("the pod may run as root")
	}
	if csc := c.SecurityContext; csc == nil || csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem ||
		csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
		t.Error("the container's file system is writable or it may gain privileges")
	}
}
