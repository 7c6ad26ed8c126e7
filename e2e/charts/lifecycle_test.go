package charts_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestHelmInstallUpgradeUninstall runs the release lifecycle against the
// real kube-apiserver (no node: the pods never run, the objects are real):
// helm install creates every object of the chart; helm upgrade with a
// changed flag changes spiffe-operator's Deployment and no other; a wrong
// value fails the upgrade with the schema's message and changes nothing;
// helm uninstall removes every object but the CRDs, which stay.
func TestHelmInstallUpgradeUninstall(t *testing.T) {
	const release, ns = "life", "chart-lifecycle"
	helm := func(args ...string) ([]byte, error) {
		return run(t, nil, env.helm, append(args, "--namespace", ns)...)
	}
	if _, err := helm("install", release, chartDir(), "--create-namespace"); err != nil {
		t.Fatal(err)
	}
	manifest, err := helm("get", "manifest", release)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decode(manifest)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) < 20 {
		t.Fatalf("the release has %d objects", len(objs))
	}
	generations := map[string]int64{}
	for _, o := range objs {
		got := get(t, o)
		if got == nil {
			t.Errorf("helm install did not create %s %s", o.GetKind(), o.GetName())
			continue
		}
		if o.GetKind() == "Deployment" {
			generations[o.GetName()] = got.GetGeneration()
		}
	}

	if _, err := helm("upgrade", release, chartDir(), "--reuse-values", "--set", "spiffeOperator.flags.requeueAfter=20m"); err != nil {
		t.Fatal(err)
	}
	for name, before := range generations {
		d := get(t, deploymentRef(ns, name))
		args, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		changed := d.GetGeneration() != before
		has := strings.Contains(strings.Join(toStrings(args), " "), "--requeue-after=20m")
		if name == "spiffe-operator" && (!changed || !has) {
			t.Errorf("spiffe-operator after the upgrade: generation %d (was %d), new flag passed: %v", d.GetGeneration(), before, has)
		}
		if name != "spiffe-operator" && (changed || has) {
			t.Errorf("%s changed on an upgrade of spiffe-operator's flag", name)
		}
	}
	after := get(t, deploymentRef(ns, "spiffe-operator")).GetGeneration()
	_, err = helm("upgrade", release, chartDir(), "--reuse-values", "--set", "spiffeOperator.flags.requeueAfter=soon")
	if err == nil || !strings.Contains(err.Error(), "at '/spiffeOperator/flags/requeueAfter': 'soon' does not match pattern") {
		t.Errorf("an upgrade with a wrong value: %v", err)
	}
	if g := get(t, deploymentRef(ns, "spiffe-operator")).GetGeneration(); g != after {
		t.Errorf("the failed upgrade changed the Deployment (generation %d, was %d)", g, after)
	}

	if _, err := helm("uninstall", release, "--wait"); err != nil {
		t.Fatal(err)
	}
	g := gomega.NewWithT(t)
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" {
			if get(t, o) == nil {
				t.Errorf("helm uninstall deleted CRD %s, which the chart keeps", o.GetName())
			}
			// Leave the API server as the test found it.
			deleteAndWait(t, o)
			continue
		}
		g.Eventually(func() *unstructured.Unstructured { return get(t, o) }, time.Minute, 100*time.Millisecond).
			Should(gomega.BeNil(), "%s %s is left after helm uninstall", o.GetKind(), o.GetName())
	}
}

// deleteAndWait deletes o and waits until it is gone (a CRD's deletion
// waits for the API server to clean up its objects).
func deleteAndWait(t *testing.T, o unstructured.Unstructured) {
	t.Helper()
	if o.GetKind() == "CustomResourceDefinition" {
		// The API server's cleanup of a CRD's instances fails while their
		// storage is still initialising ("could not list instances: storage
		// is (re)initializing", which an Established CRD can still give)
		// and backs off, which can outlast the wait below on a loaded
		// machine: delete only a CRD whose instances can be listed (or one
		// already gone).
		gomega.NewWithT(t).Eventually(func() bool { live := get(t, o); return live == nil || established(live) && instancesListable(t, live) },
			time.Minute, 100*time.Millisecond).Should(gomega.BeTrue(), "%s %s is not established, or its instances cannot be listed", o.GetKind(), o.GetName())
	}
	if err := env.cp.Client.Delete(t.Context(), o.DeepCopy()); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("delete %s %s: %v", o.GetKind(), o.GetName(), err)
	}
	gomega.NewWithT(t).Eventually(func() *unstructured.Unstructured { return get(t, o) }, time.Minute, 100*time.Millisecond).
		Should(gomega.BeNil(), "%s %s is still there", o.GetKind(), o.GetName())
}

// established reports whether the CRD live has the condition
// Established=True.
func established(live *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(live.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// instancesListable reports whether the instances of the CRD live can be
// listed at its storage version.
func instancesListable(t *testing.T, live *unstructured.Unstructured) bool {
	t.Helper()
	group, _, _ := unstructured.NestedString(live.Object, "spec", "group")
	kind, _, _ := unstructured.NestedString(live.Object, "spec", "names", "kind")
	versions, _, _ := unstructured.NestedSlice(live.Object, "spec", "versions")
	for _, v := range versions {
		m, ok := v.(map[string]any)
		if !ok || m["storage"] != true {
			continue
		}
		name, _ := m["name"].(string)
		l := &unstructured.UnstructuredList{}
		l.SetGroupVersionKind(schema.GroupVersionKind{Group: group, Version: name, Kind: kind + "List"})
		return env.cp.Client.List(t.Context(), l, client.Limit(1)) == nil
	}
	return false
}

// get returns the live object of o's kind, namespace and name, or nil when
// it does not exist.
func get(t *testing.T, o unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(o.GroupVersionKind())
	err := env.cp.Client.Get(t.Context(), client.ObjectKeyFromObject(&o), got)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("get %s %s: %v", o.GetKind(), o.GetName(), err)
	}
	return got
}

func deploymentRef(ns, name string) unstructured.Unstructured {
	var u unstructured.Unstructured
	u.SetAPIVersion("apps/v1")
	u.SetKind("Deployment")
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// toStrings flattens the containers' args for a substring check.
func toStrings(containers []any) []string {
	var out []string
	for _, c := range containers {
		m, _ := c.(map[string]any)
		args, _ := m["args"].([]any)
		for _, a := range args {
			if s, ok := a.(string); ok {
				out = append(out, s)
			}
		}
	}
	return slices.Clip(out)
}

// TestHelmAdoptsCRDsOfAnInstaller proves the documented move from the
// one-file installer (or make deploy) to the chart: helm install refuses
// CRDs it does not own, naming the ownership it misses, and takes them
// over once they carry the release's label and annotations.
func TestHelmAdoptsCRDsOfAnInstaller(t *testing.T) {
	const release, ns = "adopt", "chart-adopt"
	crdDir := filepath.Join(env.root, "spiffe-operator", "config", "crd", "bases")
	mustRun(t, nil, env.kubectl, "apply", "--server-side", "--field-manager=installer", "-f", crdDir)
	raw := mustRun(t, nil, env.kubectl, "get", "-f", crdDir, "-o", "yaml")
	list, err := decode(raw)
	if err != nil || len(list) != 1 {
		t.Fatalf("the applied CRDs: %v, %d lists", err, len(list))
	}
	items, _, _ := unstructured.NestedSlice(list[0].Object, "items")
	var crds []unstructured.Unstructured
	for _, i := range items {
		crds = append(crds, unstructured.Unstructured{Object: i.(map[string]any)})
	}
	defer func() {
		for _, c := range crds {
			deleteAndWait(t, c)
		}
	}()
	install := []string{"install", release, chartDir(), "--namespace", ns, "--create-namespace",
		"--set", "identityOperator.enabled=false", "--set", "bundleOperator.enabled=false"}
	_, err = run(t, nil, env.helm, install...)
	if err == nil || !strings.Contains(err.Error(), "exists and cannot be imported into the current release: invalid ownership metadata") {
		t.Fatalf("helm install over the installer's CRDs: %v", err)
	}
	// The commands of the chart's README.
	for _, c := range crds {
		mustRun(t, nil, env.kubectl, "label", "crd", c.GetName(), "app.kubernetes.io/managed-by=Helm")
		mustRun(t, nil, env.kubectl, "annotate", "crd", c.GetName(), "meta.helm.sh/release-name="+release, "meta.helm.sh/release-namespace="+ns)
	}
	mustRun(t, nil, env.helm, install...)
	for _, c := range crds {
		got := get(t, c)
		if got == nil || got.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
			t.Errorf("CRD %s after helm install: %v", c.GetName(), got)
		}
	}
	mustRun(t, nil, env.helm, "uninstall", release, "--namespace", ns, "--wait")
}
