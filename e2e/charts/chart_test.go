package charts_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/trustplane/trustplane/common/testenv"
	"github.com/trustplane/trustplane/e2e/charts"
	"github.com/trustplane/trustplane/e2e/operatorimage"
)

// modes are the values files the chart is linted, rendered and applied
// with: the defaults, and one per way of running it.
var modes = map[string][]string{
	"default": nil,
	"socket":  {"ci/socket-values.yaml"},
	"mtls":    {"ci/mtls-values.yaml"},
	"ha":      {"ci/ha-values.yaml"},
}

// TestGeneratedFilesAreCurrent proves the chart holds no hand-kept copy:
// its CRDs, RBAC rules and admission policies are the operators' config/
// files byte for byte, its flag values are each binary's flags, and its
// README's values table is the one its schema and values give. Stale files
// fail with the command that regenerates them.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	want, err := charts.ExpectedWith(env.root, env.flags)
	if err != nil {
		t.Fatal(err)
	}
	for p, b := range want {
		got, err := os.ReadFile(filepath.Join(env.root, p))
		if err != nil {
			t.Errorf("%s: %v (run make generate)", p, err)
			continue
		}
		if !bytes.Equal(got, b) {
			t.Errorf("%s is stale: run make generate", p)
		}
	}
	err = filepath.WalkDir(filepath.Join(env.root, charts.GeneratedDir), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(env.root, p)
		if _, ok := want[filepath.ToSlash(rel)]; !ok {
			t.Errorf("%s is a copy of nothing: run make generate", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestLint runs helm lint --strict with the default values and each mode's.
func TestLint(t *testing.T) {
	for mode, files := range modes {
		t.Run(mode, func(t *testing.T) {
			args := []string{"lint", "--strict", chartDir()}
			for _, f := range files {
				args = append(args, "--values", filepath.Join(chartDir(), f))
			}
			mustRun(t, nil, env.helm, args...)
		})
	}
}

// TestRenderingAppliesToTheAPIServer renders the chart with each mode's
// values and applies the result server-side with --dry-run=server to a
// real kube-apiserver: every object must pass its validation and
// admission (the namespace is created for real, since a dry-run creates
// nothing). The API server has prometheus-operator's ServiceMonitor CRD, so
// the HA mode's ServiceMonitors are validated too.
func TestRenderingAppliesToTheAPIServer(t *testing.T) {
	for mode, files := range modes {
		t.Run(mode, func(t *testing.T) {
			ns := "chart-" + mode
			r := mustTemplate(t, ns, files)
			if len(r.find("Deployment")) != 3 {
				t.Fatalf("%d Deployments, want one per operator", len(r.find("Deployment")))
			}
			if err := env.cp.Client.Create(t.Context(), &corev1.Namespace{ObjectMeta: metaName(ns)}); err != nil {
				t.Fatal(err)
			}
			var docs [][]byte
			for _, o := range r.objects {
				b, err := yaml.Marshal(o.Object)
				if err != nil {
					t.Fatal(err)
				}
				docs = append(docs, b)
			}
			out := mustRun(t, bytes.Join(docs, []byte("---\n")), env.kubectl, "apply", "--server-side",
				"--field-manager=chart-test", "--dry-run=server", "-f", "-")
			for _, o := range r.objects {
				if !strings.Contains(string(out), strings.ToLower(o.GetKind())) {
					t.Errorf("kubectl did not apply the %s %s:\n%s", o.GetKind(), o.GetName(), out)
				}
			}
		})
	}
}

// TestDeploymentsRunLocked proves every mode's managers run as non-root
// with a read-only root filesystem, no privilege escalation, no
// capabilities and seccomp RuntimeDefault, as the image's user.
func TestDeploymentsRunLocked(t *testing.T) {
	uid, err := strconv.ParseInt(strings.Split(operatorimage.User, ":")[0], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	for mode, files := range modes {
		r := mustTemplate(t, "chart-"+mode, files)
		for _, o := range operatorimage.Operators() {
			d := r.deployment(t, o.Name)
			pod := d.Spec.Template.Spec.SecurityContext
			c := d.Spec.Template.Spec.Containers[0].SecurityContext
			where := mode + "/" + o.Name
			switch {
			case pod == nil || c == nil:
				t.Errorf("%s: no securityContext", where)
			case pod.RunAsNonRoot == nil || !*pod.RunAsNonRoot || c.RunAsNonRoot == nil || !*c.RunAsNonRoot:
				t.Errorf("%s: runAsNonRoot is not set", where)
			case pod.RunAsUser == nil || *pod.RunAsUser != uid:
				t.Errorf("%s: runAsUser %v, want the image's %d", where, pod.RunAsUser, uid)
			case pod.SeccompProfile == nil || pod.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
				t.Errorf("%s: pod seccomp is not RuntimeDefault", where)
			case c.ReadOnlyRootFilesystem == nil || !*c.ReadOnlyRootFilesystem:
				t.Errorf("%s: root filesystem is writable", where)
			case c.AllowPrivilegeEscalation == nil || *c.AllowPrivilegeEscalation:
				t.Errorf("%s: privilege escalation allowed", where)
			case c.Capabilities == nil || !slices.Equal(c.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(c.Capabilities.Add) > 0:
				t.Errorf("%s: capabilities %+v, want all dropped", where, c.Capabilities)
			}
		}
	}
}

// TestClusterName proves spire.clusterName becomes spiffe-operator's
// --cluster-name (the default per-node parent IDs need it), example-cluster
// as in SPIRE's Helm charts unless set, no flag when empty, and no other
// operator gets it.
func TestClusterName(t *testing.T) {
	for _, tc := range []struct {
		set, want string
	}{
		{"", "--cluster-name=example-cluster"},
		{"spire.clusterName=prod-eu.1", "--cluster-name=prod-eu.1"},
		{"spire.clusterName=", ""},
	} {
		t.Run(tc.set, func(t *testing.T) {
			var sets []string
			if tc.set != "" {
				sets = append(sets, tc.set)
			}
			r := mustTemplate(t, "chart-default", nil, sets...)
			for _, op := range operatorimage.Operators() {
				var got []string
				for _, a := range r.args(t, op.Name) {
					if strings.HasPrefix(a, "--cluster-name") {
						got = append(got, a)
					}
				}
				var want []string
				if op.Name == "spiffe-operator" && tc.want != "" {
					want = []string{tc.want}
				}
				if !slices.Equal(got, want) {
					t.Errorf("%s: %q, want %q", op.Name, got, want)
				}
			}
		})
	}
}

// TestSpireConnection proves each mode wires spiffe-operator and
// bundle-operator to SPIRE as its values say, and identity-operator
// (which does not talk to SPIRE) not at all.
func TestSpireConnection(t *testing.T) {
	for _, tc := range []struct {
		mode       string
		args       []string
		absent     []string
		volumePath string
		csi        string
	}{
		{mode: "default", args: []string{
			"--spire-address=spire-server.spire-system.svc:8081",
			"--spire-server-id=spiffe://example.org/spire/server",
			"--workload-api-socket=unix:///run/spire/agent-sockets/spire-agent.sock",
		}, absent: []string{"--spire-socket"}, volumePath: "/run/spire/agent-sockets"},
		{mode: "mtls", args: []string{
			"--spire-address=spire-server.spire.svc.cluster.local:8081",
			"--spire-server-id=spiffe://prod.example.com/spire/server",
			"--workload-api-socket=unix:///run/spire/agent-sockets/agent.sock",
		}, absent: []string{"--spire-socket"}, csi: "csi.spiffe.io"},
		{mode: "socket", args: []string{"--spire-socket=/run/spire/server-sockets/api.sock"},
			absent: []string{"--spire-address", "--workload-api-socket", "--spire-server-id"}, volumePath: "/run/spire/server-sockets"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			r := mustTemplate(t, "chart-"+tc.mode, modes[tc.mode])
			for _, op := range []string{"spiffe-operator", "bundle-operator"} {
				args := r.args(t, op)
				for _, a := range tc.args {
					if !slices.Contains(args, a) {
						t.Errorf("%s: no %s in %q", op, a, args)
					}
				}
				for _, a := range tc.absent {
					if slices.ContainsFunc(args, func(s string) bool { return strings.HasPrefix(s, a+"=") }) {
						t.Errorf("%s: %s is set in %q", op, a, args)
					}
				}
				spec := r.deployment(t, op).Spec.Template.Spec
				var found bool
				for _, v := range spec.Volumes {
					switch {
					case tc.csi != "" && v.CSI != nil:
						found = v.CSI.Driver == tc.csi && v.CSI.ReadOnly != nil && *v.CSI.ReadOnly
					case tc.volumePath != "" && v.HostPath != nil:
						found = v.HostPath.Path == tc.volumePath
					}
				}
				if !found {
					t.Errorf("%s: no SPIRE socket volume (%s%s) in %+v", op, tc.volumePath, tc.csi, spec.Volumes)
				}
				if spec.NodeSelector == nil && tc.mode == "socket" {
					t.Errorf("%s: socket mode without the server's node selector", op)
				}
			}
			for _, a := range r.args(t, "identity-operator") {
				if strings.HasPrefix(a, "--spire-") || strings.HasPrefix(a, "--workload-api-socket") {
					t.Errorf("identity-operator is given %s", a)
				}
			}
		})
	}
}

// TestHighAvailability proves replicas > 1 bring leader election, a
// PodDisruptionBudget selecting exactly the operator's pods and pod
// anti-affinity across nodes, and one replica brings neither budget nor
// anti-affinity.
func TestHighAvailability(t *testing.T) {
	r := mustTemplate(t, "chart-ha", modes["ha"])
	for _, o := range operatorimage.Operators() {
		d := r.deployment(t, o.Name)
		if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
			t.Errorf("%s: replicas %v, want 3", o.Name, d.Spec.Replicas)
		}
		if !slices.Contains(r.args(t, o.Name), "--leader-elect=true") {
			t.Errorf("%s: no leader election with 3 replicas", o.Name)
		}
		pdb := r.object(t, "PodDisruptionBudget", o.Name)
		sel, _, _ := unstructuredMap(pdb.Object, "spec", "selector", "matchLabels")
		if !equality.Semantic.DeepEqual(sel, toAny(d.Spec.Selector.MatchLabels)) {
			t.Errorf("%s: budget selects %v, the Deployment %v", o.Name, sel, d.Spec.Selector.MatchLabels)
		}
		if min, _, _ := unstructuredMap(pdb.Object, "spec", "minAvailable"); fmt.Sprint(min) != "2" {
			t.Errorf("%s: minAvailable %v, want 2", o.Name, min)
		}
		aff := d.Spec.Template.Spec.Affinity
		if aff == nil || aff.PodAntiAffinity == nil || len(aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
			t.Fatalf("%s: no required pod anti-affinity: %+v", o.Name, aff)
		}
		term := aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0]
		if term.TopologyKey != corev1.LabelHostname || !equality.Semantic.DeepEqual(term.LabelSelector.MatchLabels, d.Spec.Selector.MatchLabels) {
			t.Errorf("%s: anti-affinity term %+v does not spread the operator's pods across nodes", o.Name, term)
		}
	}
	_, err := template(t, "chart-ha", modes["ha"], "bundleOperator.podDisruptionBudget.minAvailable=3")
	if err == nil || !strings.Contains(err.Error(), "bundleOperator.podDisruptionBudget.minAvailable (3) must be below replicas (3)") {
		t.Errorf("a budget no drain could meet: %v", err)
	}
	single := mustTemplate(t, "chart-default", nil, "spiffeOperator.replicas=1", "bundleOperator.replicas=1")
	if pdbs := single.find("PodDisruptionBudget"); len(pdbs) != 0 {
		t.Errorf("one replica each, yet %d PodDisruptionBudgets", len(pdbs))
	}
	for _, o := range operatorimage.Operators() {
		if single.deployment(t, o.Name).Spec.Template.Spec.Affinity != nil {
			t.Errorf("%s: anti-affinity with one replica", o.Name)
		}
	}
}

// TestServiceMonitorSelectsTheMetricsService applies the HA mode's metrics
// Services and ServiceMonitors to the API server, which has
// prometheus-operator's ServiceMonitor CRD, and proves from what the server
// stored that each ServiceMonitor selects exactly its operator's metrics
// Service, in the release's namespace, on a port the Service has and whose
// target is the manager's metrics port; and that there is none by default.
func TestServiceMonitorSelectsTheMetricsService(t *testing.T) {
	if sms := mustTemplate(t, "chart-default", nil).find("ServiceMonitor"); len(sms) != 0 {
		t.Fatalf("%d ServiceMonitors by default", len(sms))
	}
	const ns = "chart-monitoring"
	r := mustTemplate(t, ns, modes["ha"])
	if err := env.cp.Client.Create(t.Context(), &corev1.Namespace{ObjectMeta: metaName(ns)}); err != nil {
		t.Fatal(err)
	}
	var docs [][]byte
	for _, o := range r.objects {
		if o.GetKind() == "Service" || o.GetKind() == "ServiceMonitor" {
			b, err := yaml.Marshal(o.Object)
			if err != nil {
				t.Fatal(err)
			}
			docs = append(docs, b)
		}
	}
	// kubectl's field validation is strict: a field the CRD does not know fails the apply.
	mustRun(t, bytes.Join(docs, []byte("---\n")), env.kubectl, "apply", "--server-side", "--field-manager=chart-test", "-f", "-")

	services := &corev1.ServiceList{}
	if err := env.cp.Client.List(t.Context(), services, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, o := range operatorimage.Operators() {
		stored := &unstructured.Unstructured{}
		stored.SetGroupVersionKind(schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "ServiceMonitor"})
		if err := env.cp.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: o.Name}, stored); err != nil {
			t.Fatalf("%s: the stored ServiceMonitor: %v", o.Name, err)
		}
		var sm serviceMonitorSpec
		spec, _, _ := unstructuredMap(stored.Object, "spec")
		fromUnstructured(t, spec.(map[string]any), &sm)
		selector, err := metav1.LabelSelectorAsSelector(&sm.Selector)
		if err != nil {
			t.Fatalf("%s: selector: %v", o.Name, err)
		}
		var selected []string
		for _, svc := range services.Items {
			if (sm.NamespaceSelector.Any || slices.Contains(sm.NamespaceSelector.MatchNames, svc.Namespace)) &&
				!selector.Empty() && selector.Matches(labels.Set(svc.Labels)) {
				selected = append(selected, svc.Name)
			}
		}
		if want := []string{o.Name + "-metrics"}; !slices.Equal(selected, want) {
			t.Errorf("%s: ServiceMonitor selects Services %q, want %q", o.Name, selected, want)
			continue
		}
		if stored.GetLabels()["release"] != "prometheus" {
			t.Errorf("%s: ServiceMonitor labels %v lack the values' release=prometheus", o.Name, stored.GetLabels())
		}
		svc := services.Items[slices.IndexFunc(services.Items, func(s corev1.Service) bool { return s.Name == o.Name+"-metrics" })]
		container := r.deployment(t, o.Name).Spec.Template.Spec.Containers[0]
		if len(sm.Endpoints) == 0 {
			t.Errorf("%s: ServiceMonitor has no endpoint", o.Name)
		}
		for _, e := range sm.Endpoints {
			i := slices.IndexFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == e.Port })
			if i < 0 {
				t.Errorf("%s: ServiceMonitor endpoint port %q is not a port of Service %s: %v", o.Name, e.Port, svc.Name, svc.Spec.Ports)
				continue
			}
			target := svc.Spec.Ports[i].TargetPort
			if !slices.ContainsFunc(container.Ports, func(p corev1.ContainerPort) bool {
				return (target.StrVal != "" && p.Name == target.StrVal) || (target.StrVal == "" && p.ContainerPort == target.IntVal)
			}) || !slices.Contains(container.Args, "--metrics-bind-address=:"+strconv.Itoa(int(portOf(container.Ports, "metrics")))) {
				t.Errorf("%s: Service port %q targets %s, not the manager's metrics port (ports %v, args %q)", o.Name, e.Port, target.String(), container.Ports, container.Args)
			}
			// The operator serves its metrics over HTTPS, with a self-signed
			// certificate, to a bearer token allowed to get /metrics.
			if e.Scheme != "https" || e.BearerTokenFile == "" || !e.TLSConfig.InsecureSkipVerify {
				t.Errorf("%s: ServiceMonitor endpoint scrapes with scheme %q, token file %q, insecureSkipVerify %v; the operator serves HTTPS to a bearer token",
					o.Name, e.Scheme, e.BearerTokenFile, e.TLSConfig.InsecureSkipVerify)
			}
		}
		reader := r.object(t, "ClusterRole", "tp-"+o.Name+"-metrics-reader")
		if rules, _, _ := unstructuredMap(reader.Object, "rules"); fmt.Sprint(rules) != "[map[nonResourceURLs:[/metrics] verbs:[get]]]" {
			t.Errorf("%s: metrics reader ClusterRole rules %v, want get on /metrics only", o.Name, rules)
		}
	}
	plain := mustTemplate(t, ns, modes["ha"], "spiffeOperator.flags.metricsSecure=false")
	if sm := plain.object(t, "ServiceMonitor", "spiffe-operator"); fmt.Sprint(sm.Object["spec"]) == "" || strings.Contains(fmt.Sprint(sm.Object["spec"]), "https") {
		t.Errorf("with metricsSecure=false the ServiceMonitor still scrapes HTTPS: %v", sm.Object["spec"])
	}
	if roles := plain.find("ClusterRole"); slices.ContainsFunc(roles, func(u unstructured.Unstructured) bool { return u.GetName() == "tp-spiffe-operator-metrics-reader" }) {
		t.Error("with metricsSecure=false the chart still makes spiffe-operator's metrics reader ClusterRole")
	}
	if _, err := template(t, "chart-default", nil, "spiffeOperator.metrics.service.enabled=false", "spiffeOperator.metrics.serviceMonitor.enabled=true"); err == nil ||
		!strings.Contains(err.Error(), "spiffeOperator.metrics.serviceMonitor.enabled needs spiffeOperator.metrics.service.enabled") {
		t.Errorf("a ServiceMonitor without its Service: %v", err)
	}
}

// serviceMonitorSpec is the part of a ServiceMonitor's spec that decides
// what it scrapes.
type serviceMonitorSpec struct {
	Selector          metav1.LabelSelector `json:"selector"`
	NamespaceSelector struct {
		Any        bool     `json:"any"`
		MatchNames []string `json:"matchNames"`
	} `json:"namespaceSelector"`
	Endpoints []struct {
		Port            string `json:"port"`
		Interval        string `json:"interval"`
		Scheme          string `json:"scheme"`
		BearerTokenFile string `json:"bearerTokenFile"`
		TLSConfig       struct {
			InsecureSkipVerify bool `json:"insecureSkipVerify"`
		} `json:"tlsConfig"`
	} `json:"endpoints"`
}

// portOf is the number of the named container port, 0 if there is none.
func portOf(ports []corev1.ContainerPort, name string) int32 {
	for _, p := range ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

// TestServiceMonitorIntervalsTheSchemaAcceptsAreValid proves the schema
// accepts exactly the scrape intervals the ServiceMonitor CRD accepts: a
// value that passes helm's validation cannot fail the install at the API
// server half-way, and one the API server would take is not refused.
func TestServiceMonitorIntervalsTheSchemaAcceptsAreValid(t *testing.T) {
	const ns = "chart-intervals"
	if err := env.cp.Client.Create(t.Context(), &corev1.Namespace{ObjectMeta: metaName(ns)}); err != nil {
		t.Fatal(err)
	}
	base := mustTemplate(t, ns, nil, "spiffeOperator.metrics.serviceMonitor.enabled=true").object(t, "ServiceMonitor", "spiffe-operator")
	for _, interval := range []string{"30s", "1m", "1m30s", "1h", "2d", "1w", "1y", "500ms", "0", "1h30m15s500ms",
		"1.5m", "100us", "1m1h", "30", "-1s", "1s1s", "5 m"} {
		// A values file, as --set would make 0 a number.
		values := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(values, fmt.Appendf(nil, "spiffeOperator: {metrics: {serviceMonitor: {enabled: true, interval: %q}}}\n", interval), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := template(t, ns, []string{values})
		schemaOK := err == nil
		if !schemaOK && !strings.Contains(err.Error(), "interval") {
			t.Errorf("interval %q: the schema's message does not name the value: %v", interval, err)
		}
		sm := base.DeepCopy()
		endpoints, _, _ := unstructuredMap(sm.Object, "spec", "endpoints")
		endpoints.([]any)[0].(map[string]any)["interval"] = interval
		b, err := yaml.Marshal(sm.Object)
		if err != nil {
			t.Fatal(err)
		}
		_, err = run(t, b, env.kubectl, "apply", "--server-side", "--field-manager=chart-test", "--dry-run=server", "-f", "-")
		if serverOK := err == nil; schemaOK != serverOK {
			t.Errorf("interval %q: the schema accepts it: %v; the API server accepts it: %v (%v)", interval, schemaOK, serverOK, err)
		}
	}
}

// TestRBACIsTheOperatorsRBAC proves the chart grants each operator exactly
// the rules of its config/rbac (generated from its kubebuilder markers),
// bound to its ServiceAccount, and bundle-operator's Secret rights only
// when a Secret flag is on.
func TestRBACIsTheOperatorsRBAC(t *testing.T) {
	r := mustTemplate(t, "chart-default", nil)
	for _, o := range operatorimage.Operators() {
		want := readRole(t, filepath.Join(env.root, o.Name, "config", "rbac", "role.yaml"))
		var got rbacv1.ClusterRole
		fromUnstructured(t, r.object(t, "ClusterRole", "tp-"+o.Name+"-manager").Object, &got)
		if !equality.Semantic.DeepEqual(got.Rules, want) {
			t.Errorf("%s: the chart's rules differ from config/rbac/role.yaml:\n got %+v\nwant %+v", o.Name, got.Rules, want)
		}
		var binding rbacv1.ClusterRoleBinding
		fromUnstructured(t, r.object(t, "ClusterRoleBinding", "tp-"+o.Name+"-manager").Object, &binding)
		if binding.RoleRef.Name != got.Name || len(binding.Subjects) != 1 || binding.Subjects[0].Name != o.Name || binding.Subjects[0].Namespace != "chart-default" {
			t.Errorf("%s: binding %+v", o.Name, binding)
		}
	}
	if cr := r.find("ClusterRole"); len(cr) != 6 {
		t.Errorf("%d ClusterRoles by default, want the three managers' and the three metrics readers' (no Secret rights)", len(cr))
	}
	// ConfigMap sources are read through a Role in each source namespace,
	// the release's by default; Secret rights come only with their flags.
	sourceRole := func(r rendering, name, ns, file string) {
		t.Helper()
		var role rbacv1.Role
		fromUnstructured(t, r.objectIn(t, "Role", ns, name).Object, &role)
		if want := readRole(t, filepath.Join(env.root, "bundle-operator", file)); !equality.Semantic.DeepEqual(role.Rules, want) {
			t.Errorf("Role %s/%s rules %+v differ from %s", ns, name, role.Rules, file)
		}
		var binding rbacv1.RoleBinding
		fromUnstructured(t, r.objectIn(t, "RoleBinding", ns, name).Object, &binding)
		if binding.RoleRef.Name != name || len(binding.Subjects) != 1 || binding.Subjects[0].Name != "bundle-operator" || binding.Subjects[0].Namespace != "chart-default" {
			t.Errorf("RoleBinding %s/%s: %+v", ns, name, binding)
		}
	}
	sourceRole(r, "bundle-operator-sources", "chart-default", "config/rbac/source_role.yaml")
	for _, role := range r.find("Role") {
		if strings.Contains(role.GetName(), "secret") {
			t.Errorf("Role %s without a Secret flag", role.GetName())
		}
	}
	withSecrets := mustTemplate(t, "chart-default", nil, "bundleOperator.flags.allowSecretTargets=true",
		"bundleOperator.flags.allowSecretSources=true", `bundleOperator.flags.sourceNamespaces=src-a\,src-b`)
	var secrets rbacv1.ClusterRole
	fromUnstructured(t, withSecrets.object(t, "ClusterRole", "tp-bundle-operator-secret-targets").Object, &secrets)
	want := readRole(t, filepath.Join(env.root, "bundle-operator", "config", "components", "secret-targets", "role.yaml"))
	if !equality.Semantic.DeepEqual(secrets.Rules, want) {
		t.Errorf("Secret rules differ from config/components/secret-targets: %+v", secrets.Rules)
	}
	withSecrets.object(t, "ClusterRoleBinding", "tp-bundle-operator-secret-targets")
	for _, ns := range []string{"src-a", "src-b"} {
		sourceRole(withSecrets, "bundle-operator-sources", ns, "config/rbac/source_role.yaml")
		sourceRole(withSecrets, "bundle-operator-secret-sources", ns, "config/components/secret-sources/role.yaml")
	}
}

// configPolicies counts the ValidatingAdmissionPolicies in
// <operator>/config/<dir>, read from the files themselves.
func configPolicies(t *testing.T, operator, dir string) int {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(env.root, operator, "config", dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decode(raw)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for _, o := range objs {
			if o.GetKind() == "ValidatingAdmissionPolicy" {
				n++
			}
		}
	}
	if n == 0 {
		t.Fatalf("no ValidatingAdmissionPolicy in %s/config/%s", operator, dir)
	}
	return n
}

// TestAdmissionPoliciesAreOnByDefault proves identity-operator's admission
// policies come with the chart unless switched off, their parameters in the
// release namespace, and that allowedGroups and allowedUsers replace
// config/policy's; the policy that limits the operator's own writes
// (config/rbac) comes with the operator whatever the switch, and so do
// bundle-operator's and spiffe-operator's.
func TestAdmissionPoliciesAreOnByDefault(t *testing.T) {
	r := mustTemplate(t, "chart-default", nil)
	identityOwn, bundleOwn := configPolicies(t, "identity-operator", "rbac"), configPolicies(t, "bundle-operator", "rbac")
	spiffeOwn := configPolicies(t, "spiffe-operator", "rbac")
	own := identityOwn + bundleOwn + spiffeOwn
	if n, want := len(r.find("ValidatingAdmissionPolicy")), configPolicies(t, "identity-operator", "policy")+own; n != want {
		t.Errorf("%d ValidatingAdmissionPolicies, want the %d of identity-operator/config/policy and the operators' config/rbac", n, want)
	}
	for _, name := range []string{"identity-operator-outputs.trustplane.dev", "bundle-operator-injection.trustplane.dev"} {
		r.object(t, "ValidatingAdmissionPolicy", name)
		r.object(t, "ValidatingAdmissionPolicyBinding", name)
	}
	for _, b := range r.find("ValidatingAdmissionPolicyBinding") {
		if ref, ok, _ := unstructuredMap(b.Object, "spec", "paramRef", "namespace"); ok && ref != "chart-default" {
			t.Errorf("binding %s reads its parameters from namespace %v", b.GetName(), ref)
		}
	}
	params := r.object(t, "ConfigMap", "identity-boundary-admission")
	if params.GetNamespace() != "chart-default" {
		t.Errorf("parameters in namespace %q", params.GetNamespace())
	}
	custom := mustTemplate(t, "chart-default", nil, "identityOperator.admissionPolicies.allowedGroups=platform:setters")
	if g, _, _ := unstructuredMap(custom.object(t, "ConfigMap", "identity-boundary-admission").Object, "data", "allowedGroups"); g != "platform:setters" {
		t.Errorf("allowedGroups %v, want the value's", g)
	}
	off := mustTemplate(t, "chart-default", nil, "identityOperator.admissionPolicies.enabled=false")
	if n := len(off.find("ValidatingAdmissionPolicy")) + len(off.find("ValidatingAdmissionPolicyBinding")); n != 2*own {
		t.Errorf("%d policies and bindings with the policies switched off, want only the operator's own %d", n, 2*own)
	}
	off.object(t, "ValidatingAdmissionPolicy", "identity-operator-outputs.trustplane.dev")
	without := mustTemplate(t, "chart-default", nil, "identityOperator.enabled=false")
	if n := len(without.find("ValidatingAdmissionPolicy")); n != bundleOwn+spiffeOwn {
		t.Errorf("%d policies without identity-operator, want bundle-operator's and spiffe-operator's own %d", n, bundleOwn+spiffeOwn)
	}
}

// TestEveryFlagIsAValue proves that every flag of every operator binary is
// either set by the chart from its own values or is a value under
// <operator>.flags: each value flag, set to a value of its type, reaches
// the manager's arguments once, and the arguments parse with a flag set of
// the binary's types (an independent check of the rendered syntax).
func TestEveryFlagIsAValue(t *testing.T) {
	for _, o := range operatorimage.Operators() {
		t.Run(o.Name, func(t *testing.T) {
			flags := env.flags[o.Name]
			var sets []string
			want := map[string]string{}
			for _, f := range charts.ValueFlags(flags) {
				set, arg := sample(f)
				sets = append(sets, charts.ValuesKey(o.Name)+".flags."+charts.ValueKey(f.Name)+"="+set)
				want[f.Name] = arg
			}
			// mtls and socket between them set every flag the chart sets itself.
			var args []string
			for _, mode := range []string{"default", "socket"} {
				args = append(args, mustTemplate(t, "chart-"+mode, modes[mode], sets...).args(t, o.Name)...)
			}
			for name, arg := range want {
				if n := count(args, "--"+name+"="+arg); n != 2 {
					t.Errorf("--%s=%s appears %d times in the two renderings, want once in each: %q", name, arg, n, args)
				}
			}
			for _, f := range flags {
				if _, chartSets := charts.ChartSet[f.Name]; !chartSets || f.Name == "kubeconfig" {
					continue
				}
				if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--"+f.Name+"=") }) {
					t.Errorf("the chart sets --%s itself, but no rendering passes it", f.Name)
				}
			}
			fs := pflag.NewFlagSet(o.Name, pflag.ContinueOnError)
			for _, f := range flags {
				switch f.Type {
				case "":
					fs.Bool(f.Name, false, "")
				case "duration":
					fs.Duration(f.Name, 0, "")
				case "int", "int32":
					fs.Int64(f.Name, 0, "")
				case "float", "float32":
					fs.Float64(f.Name, 0, "")
				case "strings":
					fs.StringSlice(f.Name, nil, "")
				default:
					fs.String(f.Name, "", "")
				}
			}
			for _, mode := range []string{"default", "socket"} {
				if err := fs.Parse(mustTemplate(t, "chart-"+mode, modes[mode], sets...).args(t, o.Name)); err != nil {
					t.Errorf("%s: the rendered arguments do not parse as the binary's flags: %v", mode, err)
				}
			}
		})
	}
}

// TestFlagValuesCannotAddArguments proves a flag value stays one argument
// of its flag, whatever it holds: quotes, newlines and what looks like
// further flags or YAML do not reach the manager as arguments of their own.
func TestFlagValuesCannotAddArguments(t *testing.T) {
	evil := "prod\"\n        - --leader-elect=false\n- --spire-socket=/tmp/x --trust-domain=evil.org"
	raw, err := yaml.Marshal(map[string]any{"spiffeOperator": map[string]any{"flags": map[string]any{"defaultEnvironment": evil}}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(file, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	args := mustTemplate(t, "chart-default", []string{file}).args(t, "spiffe-operator")
	if !slices.Contains(args, "--default-environment="+evil) {
		t.Errorf("the value is not one argument: %q", args)
	}
	for _, a := range args {
		if a == "--leader-elect=false" || strings.HasPrefix(a, "--spire-socket") || a == "--trust-domain=evil.org" {
			t.Errorf("a flag value added the argument %q", a)
		}
	}
}

// sample is a value for a flag of its type: as --set gives it, and as the
// argument must carry it.
func sample(f charts.Flag) (set, arg string) {
	switch f.Type {
	case "":
		return "true", "true"
	case "duration":
		return "1m30s", "1m30s"
	case "int", "int32":
		return "1234567", "1234567"
	case "float", "float32":
		return "0.25", "0.25"
	case "strings":
		return "{spiffeentry,clusterspiffeid}", "spiffeentry,clusterspiffeid"
	case "level":
		return "debug", "debug"
	case "encoder":
		return "console", "console"
	case "time-encoding":
		return "rfc3339", "rfc3339"
	default:
		return "some-value", "some-value"
	}
}

func count(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}

// TestWrongValuesFailWithAClearMessage proves values.schema.json turns a
// wrong value into an error of helm template (as of helm install) that
// names the value and what is wrong with it.
func TestWrongValuesFailWithAClearMessage(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"spire.mode=tcp", "at '/spire/mode': value must be one of 'mtls', 'socket'"},
		{"spiffeOperator.replicas=-1", "at '/spiffeOperator/replicas': minimum: got -1, want 0"},
		{"spiffeOperator.flags.requeueAfter=5 minutes", "at '/spiffeOperator/flags/requeueAfter': '5 minutes' does not match pattern"},
		{"spiffeOperator.flags.spireAdress=x:1", "at '/spiffeOperator/flags': additional properties 'spireAdress' not allowed"},
		{"bundleOperator.flags.pollInterval=5", "at '/bundleOperator/flags/pollInterval': got number, want string"},
		{"identityOperator.flags.output=spiffeentry", "at '/identityOperator/flags/output': got string, want array"},
		{"spire.mtls.address=spire-server", "at '/spire/mtls/address': 'spire-server' does not match pattern"},
		{"identityOperator.replicas=2,identityOperator.leaderElection=false", "at '/identityOperator/leaderElection': value must be true"},
		{"bundleOperator.podSecurityContext.runAsUser=0", "at '/bundleOperator/podSecurityContext/runAsUser': minimum: got 0, want 1"},
		{"trustDomain=", "at '/trustDomain'"},
		{"spire.clusterName=prod/eu", "at '/spire/clusterName': 'prod/eu' does not match pattern"},
		{"spiffeOperator.replica=2", "at '/spiffeOperator': additional properties 'replica' not allowed"},
		{"spiffeOperator.podSecurityContext.runAsNonRoot=false", "at '/spiffeOperator/podSecurityContext': additional properties 'runAsNonRoot' not allowed"},
		{"bundleOperator.podSecurityContext.privileged=true", "at '/bundleOperator/podSecurityContext': additional properties 'privileged' not allowed"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			_, err := template(t, "chart-default", nil, tc.set)
			if err == nil {
				t.Fatalf("helm template accepted %s", tc.set)
			}
			if !strings.Contains(err.Error(), "values don't meet the specifications of the schema") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error does not say %q:\n%v", tc.want, err)
			}
		})
	}
}

// TestOlderKubernetesIsRefused proves the chart refuses a cluster that
// serves no ValidatingAdmissionPolicy v1 (before 1.30) instead of failing
// halfway through an install, and takes the version the tests run.
func TestOlderKubernetesIsRefused(t *testing.T) {
	_, err := run(t, nil, env.helm, "template", "tp", chartDir(), "--kube-version", "1.29.5")
	if err == nil || !strings.Contains(err.Error(), "chart requires kubeVersion: >=1.30.0-0 which is incompatible with Kubernetes v1.29.5") {
		t.Errorf("helm template for Kubernetes 1.29: %v", err)
	}
	mustRun(t, nil, env.helm, "template", "tp", chartDir(), "--kube-version", testenv.KubernetesVersion)
}

// TestInstallersApplyCleanly runs the script behind make installers and
// applies each one-file installer for real, server-side, to the API server:
// everything is created, the manager's image is the release image, and a
// second apply changes nothing (a GitOps controller re-applies the same file).
func TestInstallersApplyCleanly(t *testing.T) {
	out := t.TempDir()
	mustRun(t, nil, filepath.Join(env.root, "hack", "installers.sh"), out)
	for _, o := range operatorimage.Operators() {
		t.Run(o.Name, func(t *testing.T) {
			file := filepath.Join(out, o.Name+".yaml")
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			objs, err := decode(raw)
			if err != nil {
				t.Fatal(err)
			}
			applied := string(mustRun(t, nil, env.kubectl, "apply", "--server-side", "--field-manager=installer", "-f", file))
			for _, obj := range objs {
				if !strings.Contains(applied, obj.GetName()) {
					t.Errorf("%s %s was not applied:\n%s", obj.GetKind(), obj.GetName(), applied)
				}
				u := obj.DeepCopy()
				if err := env.cp.Client.Get(t.Context(), client.ObjectKeyFromObject(u), u); err != nil {
					t.Errorf("%s %s after apply: %v", obj.GetKind(), obj.GetName(), err)
				}
			}
			var d struct {
				Spec struct {
					Template corev1.PodTemplateSpec
				}
			}
			for _, obj := range objs {
				if obj.GetKind() == "Deployment" {
					b, _ := yaml.Marshal(obj.Object)
					if err := yaml.Unmarshal(b, &d); err != nil {
						t.Fatal(err)
					}
				}
			}
			if img := d.Spec.Template.Spec.Containers[0].Image; img != o.Ref("dev") {
				t.Errorf("installer image %q, want %q", img, o.Ref("dev"))
			}
			expectLockedDown(t, d.Spec.Template.Spec)
			again := string(mustRun(t, nil, env.kubectl, "apply", "--server-side", "--field-manager=installer", "-f", file))
			if strings.Contains(again, "configured") || strings.Contains(again, "created") {
				t.Errorf("a second apply changed objects:\n%s", again)
			}
			// The CRDs and the admission policies (cluster-scoped, named as
			// the chart names them) go again, so that a Helm release can own
			// them later (the namespaced objects live in the installers'
			// namespace, which the chart tests do not use).
			for _, obj := range objs {
				if k := obj.GetKind(); k == "CustomResourceDefinition" || strings.HasPrefix(k, "ValidatingAdmissionPolicy") {
					deleteAndWait(t, obj)
				}
			}
		})
	}
}

// expectLockedDown checks what the chart's Deployments also hold: the
// restricted Pod Security Standard's settings (non-root, seccomp
// RuntimeDefault, no privilege escalation, every capability dropped; its
// volume rule aside, which a hostPath agent socket breaks on both paths)
// and a read-only root filesystem.
func expectLockedDown(t *testing.T, spec corev1.PodSpec) {
	t.Helper()
	pod := spec.SecurityContext
	if pod == nil || pod.RunAsNonRoot == nil || !*pod.RunAsNonRoot {
		t.Error("the pod may run as root")
	}
	if pod == nil || pod.SeccompProfile == nil || pod.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("the pod has no seccomp profile RuntimeDefault")
	}
	for _, c := range spec.Containers {
		sc := c.SecurityContext
		switch {
		case sc == nil:
			t.Errorf("container %s has no security context", c.Name)
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Errorf("container %s may escalate privileges", c.Name)
		case sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL"):
			t.Errorf("container %s keeps capabilities", c.Name)
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Errorf("container %s may write its root filesystem", c.Name)
		}
	}
}

func readRole(t *testing.T, path string) []rbacv1.PolicyRule {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r rbacv1.ClusterRole
	if err := yaml.Unmarshal(raw, &r); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(r.Rules) == 0 {
		t.Fatalf("%s has no rules", path)
	}
	return r.Rules
}

func fromUnstructured(t *testing.T, obj map[string]any, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, into); err != nil {
		t.Fatal(err)
	}
}

func unstructuredMap(obj map[string]any, fields ...string) (any, bool, error) {
	var cur any = obj
	for _, f := range fields {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false, nil
		}
		if cur, ok = m[f]; !ok {
			return nil, false, nil
		}
	}
	return cur, true, nil
}

func toAny(m map[string]string) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// TestSVIDFilesReplaceTheAgentSocket proves that with no agent socket
// directory the chart mounts no socket and passes no --workload-api-socket,
// so the SVID-file flags (which the operators refuse next to it) work.
func TestSVIDFilesReplaceTheAgentSocket(t *testing.T) {
	r := mustTemplate(t, "chart-default", nil, "spire.mtls.agentSocketDir=",
		"spiffeOperator.flags.svidCertFile=/svid/cert.pem", "spiffeOperator.flags.svidKeyFile=/svid/key.pem",
		"spiffeOperator.flags.bundleFile=/svid/bundle.pem")
	args := r.args(t, "spiffe-operator")
	for _, a := range []string{"--svid-cert-file=/svid/cert.pem", "--svid-key-file=/svid/key.pem", "--bundle-file=/svid/bundle.pem", "--spire-address=spire-server.spire-system.svc:8081"} {
		if !slices.Contains(args, a) {
			t.Errorf("no %s in %q", a, args)
		}
	}
	if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--workload-api-socket") }) {
		t.Errorf("--workload-api-socket next to the SVID files: %q", args)
	}
	for _, v := range r.deployment(t, "spiffe-operator").Spec.Template.Spec.Volumes {
		if v.Name == "spire-agent-socket" {
			t.Errorf("the agent socket is mounted: %+v", v)
		}
	}
}

// TestCRDsStayOnUninstall proves every CRD the chart installs is marked to
// stay on helm uninstall (and with it the objects of its kind), and that
// the chart installs exactly the CRDs of the enabled operators.
func TestCRDsStayOnUninstall(t *testing.T) {
	r := mustTemplate(t, "chart-default", nil)
	var total int
	for _, o := range operatorimage.Operators() {
		files, err := filepath.Glob(filepath.Join(env.root, o.Name, "config", "crd", "bases", "*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		total += len(files)
	}
	crds := r.find("CustomResourceDefinition")
	if len(crds) != total {
		t.Errorf("%d CRDs, the operators have %d", len(crds), total)
	}
	for _, c := range crds {
		if c.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
			t.Errorf("CRD %s is not kept on uninstall: %v", c.GetName(), c.GetAnnotations())
		}
	}
	only := mustTemplate(t, "chart-default", nil, "spiffeOperator.enabled=false", "identityOperator.enabled=false")
	for _, c := range only.find("CustomResourceDefinition") {
		if !strings.HasSuffix(c.GetName(), ".bundle.trustplane.dev") {
			t.Errorf("bundle-operator alone installs CRD %s", c.GetName())
		}
	}
	if n := len(only.find("Deployment")); n != 1 {
		t.Errorf("bundle-operator alone: %d Deployments", n)
	}
}
