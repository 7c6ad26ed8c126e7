package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/e2e/framework"
)

// Labels and names of the objects the run manages.
const (
	environment   = "chaos"
	envLabel      = "trustplane.dev/environment"
	registerLabel = "spiffe.trustplane.dev/register"
	bundleLabel   = "trustplane.dev/trust-bundle"
	optOutLabel   = "chaos.trustplane.dev/opt-out"
	variantLabel  = "identity.trustplane.dev/variant"
	appLabel      = "app"
	managedLabel  = "chaos.trustplane.dev/managed"

	policyName   = "chaos-workloads"
	bundleName   = "chaos-ca"
	targetName   = "chaos-ca"
	targetKey    = "ca.crt"
	sourceName   = "chaos-source"
	modelName    = "model"
	modelSA      = "model-sa"
	namespaces   = 4
	maxWorkloads = 10
	maxPods      = 3
	maxBindings  = 6
)

var (
	serviceAccounts = []string{"sa-a", "sa-b", "sa-c"}
	variants        = []string{"stable", "canary", "shadow"}
	ttls            = []string{"1h0m0s", "2h0m0s"}
)

func nsName(i int) string { return fmt.Sprintf("chaos-%d", i) }

// workload is the generator's own record of a Deployment it manages.
type workload struct {
	ns, name, sa string
	replicas     int
	pods         []string
	optOut       bool
	variant      string // model pods only
}

// world is the churn generator: it owns the objects of the run and changes
// them at random (from its seeded source), bounded in number.
type world struct {
	c      client.Client
	rnd    *rand.Rand
	rep    *Report
	td     string
	parent string
	gaps   *gapTracker
	src    *sourceCAs

	mu        sync.Mutex
	workloads map[string]*workload // ns/name
	bindings  map[string]string    // ns/name -> variant
	podSeq    int
	seq       int
	// detail names what the last step changed, for the progress log.
	detail string
	say    func(format string, args ...any)
}

func newWorld(c client.Client, rnd *rand.Rand, rep *Report, td, parent string, gaps *gapTracker, src *sourceCAs) *world {
	return &world{c: c, rnd: rnd, rep: rep, td: td, parent: parent, gaps: gaps, src: src,
		workloads: map[string]*workload{}, bindings: map[string]string{}}
}

// setup creates the namespaces, service accounts, the policy, the trust
// bundle with its source and the pool Deployments of the bindings.
func (w *world) setup(ctx context.Context) error {
	for i := range namespaces {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName(i), Labels: map[string]string{
			registerLabel: "true", bundleLabel: "chaos", managedLabel: "true"}}}
		if err := w.c.Create(ctx, ns); err != nil {
			return fmt.Errorf("create namespace: %w", err)
		}
		for _, sa := range append([]string{modelSA}, serviceAccounts...) {
			if err := w.c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: sa}}); err != nil {
				return fmt.Errorf("create service account: %w", err)
			}
		}
	}
	policy, err := framework.FromYAML(`
apiVersion: spiffe.trustplane.dev/v1alpha1
kind: SpiffeRegistration
metadata:
  name: %s
  labels: {%s: %s}
spec:
  trustDomain: %s
  parentID: %s
  x509SVIDTTL: %s
  namespaceSelector: {matchLabels: {%s: "true"}}
  workloadSelector: {matchExpressions: [{key: %s, operator: DoesNotExist}]}
`, policyName, envLabel, environment, w.td, w.parent, ttls[0], registerLabel, optOutLabel)
	if err != nil {
		return err
	}
	if err := w.c.Create(ctx, policy); err != nil {
		return fmt.Errorf("create policy: %w", err)
	}
	if err := w.writeSource(ctx, w.src.valid(), true); err != nil {
		return err
	}
	bundle, err := framework.FromYAML(`
apiVersion: bundle.trustplane.dev/v1alpha1
kind: TrustBundle
metadata:
  name: %s
  labels: {%s: %s}
spec:
  sources:
  - spire: {}
  - configMap: {namespace: %s, name: %s, key: %s}
  target:
    configMap:
      name: %s
      keys: {pem: %s}
    namespaceSelector: {matchLabels: {%s: chaos}}
`, bundleName, envLabel, environment, framework.Namespace, sourceName, targetKey, targetName, targetKey, bundleLabel)
	if err != nil {
		return err
	}
	if err := w.c.Create(ctx, bundle); err != nil {
		return fmt.Errorf("create trust bundle: %w", err)
	}
	// The pools of the bindings: a Deployment "model" in the first two namespaces.
	for i := range 2 {
		wl := &workload{ns: nsName(i), name: modelName, sa: modelSA, replicas: 2, variant: variants[i%2]}
		if err := w.createWorkload(ctx, wl); err != nil {
			return err
		}
	}
	return nil
}

// step applies one change chosen at random.
func (w *world) step(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	type op struct {
		name   string
		weight int
		run    func(context.Context) error
	}
	ops := []op{
		{"workload created", 4, w.createRandomWorkload},
		{"workload deleted", 2, w.deleteWorkload},
		{"workload scaled", 4, w.scaleWorkload},
		{"workload moved to another service account", 3, w.moveWorkload},
		{"workload relabelled", 3, w.relabelWorkload},
		{"namespace registration label toggled", 2, w.toggleNamespace(registerLabel, "true")},
		{"namespace bundle label toggled", 2, w.toggleNamespace(bundleLabel, "chaos")},
		{"policy edited", 1, w.editPolicy},
		{"binding created", 2, w.createBinding},
		{"binding deleted", 1, w.deleteBinding},
		{"binding edited", 2, w.editBinding},
		{"pool pods relabelled", 2, w.relabelModelPods},
		{"trust bundle edited", 1, w.editBundle},
		{"bundle source rotated", 2, w.rotateSource},
		{"bundle source corrupted", 2, w.corruptSource},
	}
	total := 0
	for _, o := range ops {
		total += o.weight
	}
	n := w.rnd.IntN(total)
	for _, o := range ops {
		if n < o.weight {
			w.detail = ""
			err := o.run(ctx)
			if err == nil {
				w.rep.churned(o.name)
				if w.say != nil {
					w.say("+%s churn: %s %s", w.rep.since(), o.name, w.detail)
				}
			}
			return ignoreGone(err)
		}
		n -= o.weight
	}
	return nil
}

// ignoreGone treats an object that vanished or changed under a write as a
// change that did not happen: the generator picks another next time.
func ignoreGone(err error) error {
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

func (w *world) pick(filter func(*workload) bool) *workload {
	keys := make([]string, 0, len(w.workloads))
	for k, wl := range w.workloads {
		if filter(wl) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	sort.Strings(keys)
	return w.workloads[keys[w.rnd.IntN(len(keys))]]
}

func notModel(wl *workload) bool { return wl.name != modelName }

func (w *world) createRandomWorkload(ctx context.Context) error {
	n := 0
	for _, wl := range w.workloads {
		if notModel(wl) {
			n++
		}
	}
	if n >= maxWorkloads {
		return w.deleteWorkload(ctx)
	}
	w.seq++
	wl := &workload{ns: nsName(w.rnd.IntN(namespaces)), name: fmt.Sprintf("w-%d", w.seq),
		sa: serviceAccounts[w.rnd.IntN(len(serviceAccounts))], replicas: 1 + w.rnd.IntN(maxPods)}
	return w.createWorkload(ctx, wl)
}

func (w *world) deploymentObject(wl *workload) *appsv1.Deployment {
	labels := map[string]string{managedLabel: "true"}
	if wl.optOut {
		labels[optOutLabel] = "true"
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: wl.ns, Name: wl.name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(wl.replicas)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{appLabel: wl.name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{appLabel: wl.name}},
				Spec: corev1.PodSpec{ServiceAccountName: wl.sa,
					Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}
}

// createWorkload creates the Deployment and, as no controller manager
// runs, its pods directly.
func (w *world) createWorkload(ctx context.Context, wl *workload) error {
	if err := w.c.Create(ctx, w.deploymentObject(wl)); err != nil {
		return err
	}
	w.workloads[wl.ns+"/"+wl.name] = wl
	w.detail = fmt.Sprintf("%s/%s sa %s replicas %d", wl.ns, wl.name, wl.sa, wl.replicas)
	w.gaps.touch(wl.ns, wl.sa)
	return w.reconcilePods(ctx, wl)
}

// reconcilePods brings the workload's pods to its replicas, all with its
// service account.
func (w *world) reconcilePods(ctx context.Context, wl *workload) error {
	for len(wl.pods) > wl.replicas {
		last := wl.pods[len(wl.pods)-1]
		if err := w.deletePod(ctx, wl.ns, last); err != nil {
			return err
		}
		wl.pods = wl.pods[:len(wl.pods)-1]
	}
	for len(wl.pods) < wl.replicas {
		w.podSeq++
		name := fmt.Sprintf("%s-%d", wl.name, w.podSeq)
		labels := map[string]string{appLabel: wl.name, managedLabel: "true"}
		if wl.variant != "" {
			labels[variantLabel] = wl.variant
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: wl.ns, Name: name, Labels: labels},
			Spec: corev1.PodSpec{ServiceAccountName: wl.sa, AutomountServiceAccountToken: ptr.To(false),
				Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}}},
		}
		if err := w.c.Create(ctx, pod); err != nil {
			return fmt.Errorf("create pod: %w", err)
		}
		wl.pods = append(wl.pods, name)
	}
	return nil
}

func (w *world) deletePod(ctx context.Context, ns, name string) error {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := w.c.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete pod: %w", err)
	}
	return nil
}

func (w *world) deleteWorkload(ctx context.Context) error {
	wl := w.pick(notModel)
	if wl == nil {
		return nil
	}
	w.gaps.touch(wl.ns, wl.sa)
	if err := w.c.Delete(ctx, w.deploymentObject(wl)); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	wl.replicas = 0
	if err := w.reconcilePods(ctx, wl); err != nil {
		return err
	}
	delete(w.workloads, wl.ns+"/"+wl.name)
	return nil
}

func (w *world) updateDeployment(ctx context.Context, wl *workload) error {
	w.detail = fmt.Sprintf("%s/%s sa %s replicas %d opt-out %v", wl.ns, wl.name, wl.sa, wl.replicas, wl.optOut)
	d := &appsv1.Deployment{}
	if err := w.c.Get(ctx, client.ObjectKey{Namespace: wl.ns, Name: wl.name}, d); err != nil {
		return err
	}
	want := w.deploymentObject(wl)
	d.Labels, d.Spec.Replicas, d.Spec.Template.Spec.ServiceAccountName = want.Labels, want.Spec.Replicas, wl.sa
	return w.c.Update(ctx, d)
}

func (w *world) scaleWorkload(ctx context.Context) error {
	wl := w.pick(func(*workload) bool { return true })
	if wl == nil {
		return nil
	}
	wl.replicas = w.rnd.IntN(maxPods + 1)
	if wl.name == modelName && wl.replicas == 0 {
		wl.replicas = 1
	}
	if err := w.updateDeployment(ctx, wl); err != nil {
		return err
	}
	return w.reconcilePods(ctx, wl)
}

// moveWorkload changes the service account and rolls the pods: the old
// ones go, new ones start.
func (w *world) moveWorkload(ctx context.Context) error {
	wl := w.pick(notModel)
	if wl == nil {
		return nil
	}
	w.gaps.touch(wl.ns, wl.sa)
	old := wl.replicas
	wl.sa = serviceAccounts[w.rnd.IntN(len(serviceAccounts))]
	w.gaps.touch(wl.ns, wl.sa)
	if err := w.updateDeployment(ctx, wl); err != nil {
		return err
	}
	wl.replicas = 0
	if err := w.reconcilePods(ctx, wl); err != nil {
		return err
	}
	wl.replicas = old
	return w.reconcilePods(ctx, wl)
}

func (w *world) relabelWorkload(ctx context.Context) error {
	wl := w.pick(notModel)
	if wl == nil {
		return nil
	}
	w.gaps.touch(wl.ns, wl.sa)
	wl.optOut = !wl.optOut
	return w.updateDeployment(ctx, wl)
}

func (w *world) toggleNamespace(label, value string) func(context.Context) error {
	return func(ctx context.Context) error {
		ns := &corev1.Namespace{}
		if err := w.c.Get(ctx, client.ObjectKey{Name: nsName(w.rnd.IntN(namespaces))}, ns); err != nil {
			return err
		}
		if label == registerLabel {
			w.gaps.touchNamespace(ns.Name)
		}
		if ns.Labels[label] == value {
			delete(ns.Labels, label)
			w.detail = ns.Name + " -" + label
		} else {
			ns.Labels[label] = value
			w.detail = ns.Name + " +" + label
		}
		return w.c.Update(ctx, ns)
	}
}

func (w *world) getUnstructured(ctx context.Context, apiVersion, kind, ns, name string) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	if err := w.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
		return nil, err
	}
	return u, nil
}

func (w *world) editPolicy(ctx context.Context) error {
	u, err := w.getUnstructured(ctx, "spiffe.trustplane.dev/v1alpha1", "SpiffeRegistration", "", policyName)
	if err != nil {
		return err
	}
	cur, _, _ := unstructured.NestedString(u.Object, "spec", "x509SVIDTTL")
	next := ttls[0]
	if cur == ttls[0] {
		next = ttls[1]
	}
	if err := unstructured.SetNestedField(u.Object, next, "spec", "x509SVIDTTL"); err != nil {
		return err
	}
	return w.c.Update(ctx, u)
}

func (w *world) createBinding(ctx context.Context) error {
	if len(w.bindings) >= maxBindings {
		return w.deleteBinding(ctx)
	}
	w.seq++
	ns := nsName(w.rnd.IntN(2))
	name := fmt.Sprintf("b-%d", w.seq)
	variant := variants[w.rnd.IntN(len(variants))]
	b, err := framework.FromYAML(`
apiVersion: identity.trustplane.dev/v1alpha1
kind: IdentityBinding
metadata:
  name: %s
  namespace: %s
  labels: {%s: %s}
spec:
  poolRef: {group: apps, kind: Deployment, name: %s}
  serviceAccountName: %s
  identityBoundary: {variant: %s}
`, name, ns, envLabel, environment, modelName, modelSA, variant)
	if err != nil {
		return err
	}
	if err := w.c.Create(ctx, b); err != nil {
		return err
	}
	w.bindings[ns+"/"+name] = variant
	w.detail = ns + "/" + name + " variant " + variant
	return nil
}

func (w *world) pickBinding() (string, string, bool) {
	keys := make([]string, 0, len(w.bindings))
	for k := range w.bindings {
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return "", "", false
	}
	sort.Strings(keys)
	k := keys[w.rnd.IntN(len(keys))]
	ns, name, _ := cutSlash(k)
	return ns, name, true
}

func cutSlash(s string) (string, string, bool) {
	for i := range len(s) {
		if s[i] == '/' {
			return s[:i], s[i+1:], true
		}
	}
	return "", s, false
}

func (w *world) deleteBinding(ctx context.Context) error {
	ns, name, ok := w.pickBinding()
	if !ok {
		return nil
	}
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("identity.trustplane.dev/v1alpha1")
	u.SetKind("IdentityBinding")
	u.SetNamespace(ns)
	u.SetName(name)
	delete(w.bindings, ns+"/"+name)
	return w.c.Delete(ctx, u)
}

func (w *world) editBinding(ctx context.Context) error {
	ns, name, ok := w.pickBinding()
	if !ok {
		return nil
	}
	u, err := w.getUnstructured(ctx, "identity.trustplane.dev/v1alpha1", "IdentityBinding", ns, name)
	if err != nil {
		return err
	}
	variant := variants[w.rnd.IntN(len(variants))]
	if err := unstructured.SetNestedField(u.Object, variant, "spec", "identityBoundary", "variant"); err != nil {
		return err
	}
	if err := w.c.Update(ctx, u); err != nil {
		return err
	}
	w.bindings[ns+"/"+name] = variant
	return nil
}

// relabelModelPods rolls a pool's pods to the other variant.
func (w *world) relabelModelPods(ctx context.Context) error {
	wl := w.pick(func(wl *workload) bool { return wl.name == modelName })
	if wl == nil {
		return nil
	}
	n := wl.replicas
	wl.replicas = 0
	if err := w.reconcilePods(ctx, wl); err != nil {
		return err
	}
	wl.variant = variants[w.rnd.IntN(len(variants))]
	wl.replicas = n
	return w.reconcilePods(ctx, wl)
}

func (w *world) editBundle(ctx context.Context) error {
	u, err := w.getUnstructured(ctx, "bundle.trustplane.dev/v1alpha1", "TrustBundle", "", bundleName)
	if err != nil {
		return err
	}
	_, has, _ := unstructured.NestedString(u.Object, "spec", "target", "configMap", "keys", "spiffe")
	if has {
		unstructured.RemoveNestedField(u.Object, "spec", "target", "configMap", "keys", "spiffe")
	} else if err := unstructured.SetNestedField(u.Object, "bundle.spiffe", "spec", "target", "configMap", "keys", "spiffe"); err != nil {
		return err
	}
	return w.c.Update(ctx, u)
}

func (w *world) rotateSource(ctx context.Context) error {
	pem, err := w.src.rotate(w.rnd)
	if err != nil {
		return err
	}
	return w.writeSource(ctx, pem, false)
}

func (w *world) corruptSource(ctx context.Context) error {
	pem, err := w.src.corrupt(w.rnd)
	if err != nil {
		return err
	}
	return w.writeSource(ctx, pem, false)
}

// restoreSource writes the last valid version back.
func (w *world) restoreSource(ctx context.Context) error {
	return w.writeSource(ctx, w.src.valid(), false)
}

func (w *world) writeSource(ctx context.Context, pem string, create bool) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: framework.Namespace, Name: sourceName},
		Data: map[string]string{targetKey: pem}}
	if create {
		return w.c.Create(ctx, cm)
	}
	return w.c.Update(ctx, cm)
}

// settle ends the churn in a state whose desired entries the oracle can
// compute from the objects alone: the model's Deployments as the model says
// (a step a restart interrupted may have left them half-changed), and no pod
// left that only an entry no object wants anymore matches, as if every
// rollout had finished. It returns whether it changed anything.
func (w *world) settle(ctx context.Context, outputs []entryKey) (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	nsList := &corev1.NamespaceList{}
	if err := w.c.List(ctx, nsList, client.MatchingLabels{managedLabel: "true"}); err != nil {
		return false, err
	}
	registered := map[string]bool{}
	for _, ns := range nsList.Items {
		registered[ns.Name] = ns.Labels[registerLabel] == "true"
	}
	changed := false
	for key, wl := range w.workloads {
		keep := registered[wl.ns] && !wl.optOut
		if wl.name == modelName && keep {
			keep = false
			for _, o := range outputs {
				if o.matchesPod(wl.ns, wl.sa, map[string]string{appLabel: modelName, variantLabel: wl.variant}) {
					keep = true
				}
			}
		}
		if !keep {
			wl.replicas = 0
		}
		d := &appsv1.Deployment{}
		if err := w.c.Get(ctx, client.ObjectKey{Namespace: wl.ns, Name: wl.name}, d); err != nil {
			if apierrors.IsNotFound(err) { // deleted by a step a restart interrupted
				delete(w.workloads, key)
				changed = true
				continue
			}
			return false, err
		}
		want := w.deploymentObject(wl)
		if d.Spec.Template.Spec.ServiceAccountName != wl.sa || *d.Spec.Replicas != *want.Spec.Replicas ||
			d.Labels[optOutLabel] != want.Labels[optOutLabel] {
			if err := w.updateDeployment(ctx, wl); err != nil {
				return false, err
			}
			changed = true
		}
	}
	pods := &corev1.PodList{}
	if err := w.c.List(ctx, pods, client.MatchingLabels{managedLabel: "true"}); err != nil {
		return false, err
	}
	for _, p := range pods.Items {
		wl := w.workloads[p.Namespace+"/"+p.Labels[appLabel]]
		if wl != nil && wl.replicas > 0 && p.Spec.ServiceAccountName == wl.sa && p.Labels[variantLabel] == wl.variant {
			continue
		}
		if err := w.deletePod(ctx, p.Namespace, p.Name); err != nil {
			return false, err
		}
		changed = true
	}
	for _, wl := range w.workloads {
		if wl.replicas == 0 {
			wl.pods = nil
		}
	}
	return changed, nil
}

// sleepRandom waits between steps: base plus up to base again.
func sleepRandom(ctx context.Context, rnd *rand.Rand, base time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(base + time.Duration(rnd.Int64N(int64(base)))):
	}
}
