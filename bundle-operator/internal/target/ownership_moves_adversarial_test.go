package target

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	klabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/trustplane/trustplane/common/labels"
)

// attackMeta is a metadata reader (cache or live) over a fixed set of
// objects of one kind, honouring namespace, label and metadata.name
// selectors, and returning managed fields exactly as given.
type attackMeta struct {
	mu    sync.Mutex
	items []metav1.PartialObjectMetadata
}

func (r *attackMeta) set(items ...metav1.PartialObjectMetadata) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.items = items
}

func (r *attackMeta) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := obj.(*metav1.PartialObjectMetadata)
	for _, it := range r.items {
		if it.Namespace == key.Namespace && it.Name == key.Name {
			gvk := m.GroupVersionKind()
			*m = *it.DeepCopy()
			m.SetGroupVersionKind(gvk)
			return nil
		}
	}
	return apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, key.Name)
}

func (r *attackMeta) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	lo := (&client.ListOptions{}).ApplyOptions(opts)
	l := list.(*metav1.PartialObjectMetadataList)
	for _, it := range r.items {
		if lo.Namespace != "" && it.Namespace != lo.Namespace {
			continue
		}
		if lo.LabelSelector != nil && !lo.LabelSelector.Matches(klabels.Set(it.Labels)) {
			continue
		}
		if lo.FieldSelector != nil && !lo.FieldSelector.Matches(fields.Set{"metadata.name": it.Name, "metadata.namespace": it.Namespace}) {
			continue
		}
		l.Items = append(l.Items, *it.DeepCopy())
	}
	return nil
}

// attackWrites records every write: "apply <ns>/<name>" (with " force" or
// " dry-run") and "delete <ns>/<name>".
type attackWrites struct {
	mu  sync.Mutex
	log []string
}

func (w *attackWrites) add(s string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.log = append(w.log, s)
}

func (w *attackWrites) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.log)
}

// attackWriter returns a client that records writes into w; apply, when
// set, decides the outcome of each non-dry-run apply.
func attackWriter(w *attackWrites, apply func(ns, name string, force bool, dryRun bool) error) client.Client {
	return fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithInterceptorFuncs(interceptor.Funcs{
		Apply: func(_ context.Context, _ client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			o := obj.(interface {
				GetNamespace() string
				GetName() string
			})
			ao := (&client.ApplyOptions{}).ApplyOptions(opts)
			force := ao.Force != nil && *ao.Force
			dry := ao.DryRun != nil
			s := "apply " + o.GetNamespace() + "/" + o.GetName()
			if force {
				s += " force"
			}
			if dry {
				s += " dry-run"
			}
			w.add(s)
			if apply != nil {
				return apply(o.GetNamespace(), o.GetName(), force, dry)
			}
			return nil
		},
		Delete: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.DeleteOption) error {
			w.add("delete " + obj.GetNamespace() + "/" + obj.GetName())
			return nil
		},
	}).Build()
}

// tbLabels are the labels of TrustBundle b's targets, UID uid, in env.
func tbLabels(uid, env string) map[string]string {
	return map[string]string{LabelTrustBundle: "b", labels.Environment: env,
		labels.OwnerUID: uid, labels.OwnerKind: "TrustBundle", labels.OwnerName: "b"}
}

// ourTarget is a ConfigMap target as our apply left it: our Apply entry
// owns its data, labels and hash annotation.
func ourTarget(ns, rv, hash string, l map[string]string, more ...metav1.ManagedFieldsEntry) metav1.PartialObjectMetadata {
	mf := []metav1.ManagedFieldsEntry{withVersion(managed(FieldManager, metav1.ManagedFieldsOperationApply,
		`{"f:data":{"f:ca.crt":{}},"f:metadata":{"f:labels":{},"f:annotations":{"f:`+AnnotationHash+`":{}}}}`))}
	for _, m := range more {
		mf = append(mf, withVersion(m))
	}
	return metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ca", UID: types.UID("uid-cm-" + ns), ResourceVersion: rv,
		Labels: l, Annotations: map[string]string{AnnotationHash: hash}, ManagedFields: mf}}
}

func hasPrefixIn(log []string, prefix string) bool {
	return slices.ContainsFunc(log, func(s string) bool { return strings.HasPrefix(s, prefix) })
}

// TestAdversarialATrustBundleMovedToAnotherEnvironmentStillUpdatesItsTargets:
// an admin moves TrustBundle b (UID uid-b) from environment dev to prod by
// editing its trustplane.dev/environment label (framework.md: "an owner
// moved from dev to prod keeps its children and stays Ready"). Its targets,
// written by b itself (same owner UID, kind and name) while it was in dev,
// now hold the bundle of before the CA rotation. Expected safe behaviour:
// they are b's own targets (a UID names one object for ever), so the next
// pass writes the new bundle into them (and their environment label), with
// no failure. A hole: every namespace keeps the old bundle for ever,
// reported as "the target of another owner" with the same UID.
func TestAdversarialATrustBundleMovedToAnotherEnvironmentStillUpdatesItsTargets(t *testing.T) {
	cache := &attackMeta{}
	cache.set(ourTarget("a", "5", "hash-before-rotation", tbLabels("uid-b", "dev")),
		ourTarget("c", "6", "hash-before-rotation", tbLabels("uid-b", "dev")))
	w := &attackWrites{}
	o := &Objects{Cache: cache, Live: cache, Client: attackWriter(w, nil)}
	d := Desired{Bundle: "b", Kind: KindConfigMap, Name: "ca", Namespaces: []string{"a", "c"},
		Data: map[string][]byte{"ca.crt": []byte("rotated pem")}, Labels: tbLabels("uid-b", "prod")}
	rep := o.Sync(context.Background(), d)
	log := w.all()
	if rep.FailedCount != 0 || !slices.Contains(log, "apply a/ca force") || !slices.Contains(log, "apply c/ca force") {
		t.Errorf("after moving TrustBundle b (uid-b) from dev to prod its own targets are not updated: writes %v, report failed=%d %v",
			log, rep.FailedCount, rep.Failed)
	}
}

// TestAdversarialATrustBundleMovedToAnotherEnvironmentReleasesItsTargets: the
// same move, then the TrustBundle is deleted (or the namespace is no longer
// selected). framework.md: on deletion "its children are then found by
// owner UID across environments". Expected safe behaviour: b's own
// targets (owner UID uid-b) are released (deleted: only our manager writes
// them), or at least reported. A hole: they are silently left behind for
// ever, not even named in the report.
func TestAdversarialATrustBundleMovedToAnotherEnvironmentReleasesItsTargets(t *testing.T) {
	cache := &attackMeta{}
	cache.set(ourTarget("a", "5", "h", tbLabels("uid-b", "dev")))
	w := &attackWrites{}
	o := &Objects{Cache: cache, Live: cache, Client: attackWriter(w, nil)}
	rep := o.ReleaseAll(context.Background(), KindConfigMap, tbLabels("uid-b", "prod"))
	log := w.all()
	if !slices.Contains(log, "delete a/ca") && rep.FailedCount == 0 && len(rep.Left) == 0 {
		t.Errorf("ReleaseAll of TrustBundle b (uid-b, now prod) left its own dev-labelled target a/ca silently: writes %v, report %+v", log, rep)
	}
}

// TestAdversarialARelabelledTargetDoesNotStopOtherNamespacesSync: a tenant
// relabels our target in their namespace; another namespace's target
// needs the new bundle. Expected: the other namespace is written (forced,
// it is ours) and only the tenant's namespace fails.
func TestAdversarialARelabelledTargetDoesNotStopOtherNamespacesSync(t *testing.T) {
	relabelled := tbLabels("uid-b", "prod")
	relabelled[labels.OwnerUID] = "chosen-by-the-tenant"
	cache := &attackMeta{}
	cache.set(ourTarget("tenant", "7", "old", relabelled), ourTarget("other", "8", "old", tbLabels("uid-b", "prod")))
	w := &attackWrites{}
	o := &Objects{Cache: cache, Live: cache, Client: attackWriter(w, nil)}
	d := Desired{Bundle: "b", Kind: KindConfigMap, Name: "ca", Namespaces: []string{"tenant", "other"},
		Data: map[string][]byte{"ca.crt": []byte("new pem")}, Labels: tbLabels("uid-b", "prod")}
	rep := o.Sync(context.Background(), d)
	log := w.all()
	if !slices.Contains(log, "apply other/ca force") || hasPrefixIn(log, "apply tenant/") || rep.FailedCount != 1 {
		t.Errorf("writes %v, report %+v: want other/ca forced, tenant/ca untouched and reported", log, rep)
	}
}

// TestAdversarialFillSkipsAForeignLabelledObjectAsSyncDoes: while the sources
// fail, a tenant's own ConfigMap carrying only bundle.trustplane.dev/
// trustbundle=b (and a hash annotation it chose) sits in their selected
// namespace, and a newcomer namespace starts matching. Expected: Fill
// neither writes the tenant's object nor lets it decide what the
// newcomer gets: the newcomer's target is created.
func TestAdversarialFillSkipsAForeignLabelledObjectAsSyncDoes(t *testing.T) {
	cache := &attackMeta{}
	cache.set(ourTarget("tenant", "7", "chosen-by-the-tenant", map[string]string{LabelTrustBundle: "b"}))
	w := &attackWrites{}
	o := &Objects{Cache: cache, Live: cache, Client: attackWriter(w, nil)}
	d := Desired{Bundle: "b", Kind: KindConfigMap, Name: "ca", Namespaces: []string{"tenant", "newcomer"},
		Data: map[string][]byte{"ca.crt": []byte("last good pem")}, Labels: tbLabels("uid-b", "prod")}
	_, err := o.Fill(context.Background(), d)
	log := w.all()
	if err != nil || !slices.Contains(log, "apply newcomer/ca") || hasPrefixIn(log, "apply tenant/") {
		t.Errorf("Fill() = %v, writes %v: want the newcomer created and the tenant's object untouched", err, log)
	}
}

// TestAdversarialLeftInPlaceBookkeepingSurvivesAFlipOfOwnership: our target in
// a deselected namespace is shared with an immutable-making writer, so its
// release is refused and left in place (not retried while unchanged). The
// tenant then relabels owner-uid (not ours: forgotten, untouched), and
// relabels it back (ours again, at a new resourceVersion). Expected: no
// write while it is not ours, and the release is tried again once it is
// ours again, exactly once per change.
func TestAdversarialLeftInPlaceBookkeepingSurvivesAFlipOfOwnership(t *testing.T) {
	refused := apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "ca",
		field.ErrorList{field.Forbidden(field.NewPath("data"), "field is immutable when `immutable` is set")})
	other := managed("someone", metav1.ManagedFieldsOperationUpdate, `{"f:immutable":{}}`)
	foreign := tbLabels("uid-b", "prod")
	foreign[labels.OwnerUID] = "chosen-by-the-tenant"
	cache := &attackMeta{}
	w := &attackWrites{}
	o := &Objects{Cache: cache, Live: cache, Client: attackWriter(w, func(ns, _ string, _, _ bool) error {
		if ns == "old" {
			return refused
		}
		return nil
	})}
	d := Desired{Bundle: "b", Kind: KindConfigMap, Name: "ca", Namespaces: nil,
		Data: map[string][]byte{"ca.crt": []byte("pem")}, Labels: tbLabels("uid-b", "prod")}
	count := func() int {
		n := 0
		for _, s := range w.all() {
			if strings.HasPrefix(s, "apply old/") || strings.HasPrefix(s, "delete old/") {
				n++
			}
		}
		return n
	}
	steps := []struct {
		what string
		obj  metav1.PartialObjectMetadata
		want int
	}{
		{"ours, first pass", ourTarget("old", "5", "h", tbLabels("uid-b", "prod"), other), 1},
		{"ours, unchanged", ourTarget("old", "5", "h", tbLabels("uid-b", "prod"), other), 1},
		{"relabelled by the tenant", ourTarget("old", "6", "h", foreign, other), 1},
		{"relabelled back", ourTarget("old", "7", "h", tbLabels("uid-b", "prod"), other), 2},
		{"back, unchanged", ourTarget("old", "7", "h", tbLabels("uid-b", "prod"), other), 2},
	}
	for _, s := range steps {
		cache.set(s.obj)
		rep := o.Sync(context.Background(), d)
		if got := count(); got != s.want || rep.FailedCount != 0 {
			t.Fatalf("%s: %d release attempts of old/ca (want %d), report %+v, writes %v", s.what, got, s.want, rep, w.all())
		}
	}
}

// ctbMeta is a ClusterTrustBundle as our apply left it, labelled l.
func ctbMeta(name string, l map[string]string) metav1.PartialObjectMetadata {
	m := metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-ctb-" + name), ResourceVersion: "3", Labels: l,
		Annotations: map[string]string{AnnotationHash: "h"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: FieldManager, Operation: metav1.ManagedFieldsOperationApply,
			APIVersion: "certificates.k8s.io/v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:trustBundle":{}}}`)}}}}}
	m.SetGroupVersionKind(ClusterTrustBundleGVK)
	return m
}

// TestAdversarialARecreatedTrustBundleNeverTouchesItsPredecessorsClusterTrustBundle:
// an admin force-deletes TrustBundle b (finalizer removed by hand) and
// creates b again (new UID). The old b's ClusterTrustBundle "roots" (and a
// renamed one "roots-old") remain. Expected: the new b neither
// force-writes "roots" (it reports it), nor releases either on Sync, on
// Fill, or on its own deletion.
func TestAdversarialARecreatedTrustBundleNeverTouchesItsPredecessorsClusterTrustBundle(t *testing.T) {
	cache := &attackMeta{}
	cache.set(ctbMeta("roots", tbLabels("uid-old-b", "prod")), ctbMeta("roots-old", tbLabels("uid-old-b", "prod")))
	w := &attackWrites{}
	c := &ClusterTrustBundles{Cache: cache, Live: cache, Client: attackWriter(w, nil)}
	ctx := context.Background()
	newB := tbLabels("uid-new-b", "prod")
	rep := c.Sync(ctx, "roots", []byte("pem"), newB)
	c.Fill(ctx, "roots", []byte("pem"), newB)
	c.Sync(ctx, "", nil, newB)
	if log := w.all(); len(log) > 0 || rep.FailedCount != 1 {
		t.Errorf("writes %v, report %+v: want no write to the old b's ClusterTrustBundles and roots reported", log, rep)
	}
}

// TestAdversarialAClusterTrustBundleOfAnotherEnvironmentSameUIDIsStillOurs:
// the ClusterTrustBundle counterpart of the environment move: TrustBundle
// b (uid-b) moved from dev to prod; its ClusterTrustBundle "roots" still
// carries dev. Expected safe behaviour: the rotated bundle is written to
// it. A hole: reported as another owner's for ever.
func TestAdversarialAClusterTrustBundleOfAnotherEnvironmentSameUIDIsStillOurs(t *testing.T) {
	cache := &attackMeta{}
	cache.set(ctbMeta("roots", tbLabels("uid-b", "dev")))
	w := &attackWrites{}
	c := &ClusterTrustBundles{Cache: cache, Live: cache, Client: attackWriter(w, nil)}
	rep := c.Sync(context.Background(), "roots", []byte("rotated pem"), tbLabels("uid-b", "prod"))
	if !slices.Contains(w.all(), "apply /roots force") || rep.FailedCount != 0 {
		t.Errorf("writes %v, report %s: TrustBundle b's own ClusterTrustBundle is not updated after an environment move",
			w.all(), fmt.Sprint(rep.Failed))
	}
}

// TestAdversarialARelabelAndBackCannotStopTheFill: the tenant's namespace is
// the only one with a target when the last bundle was published. The
// tenant relabels our target (owner-uid) just before a CA rotation: Sync
// refuses it as another owner's, so it keeps the previous bundle's hash
// under our Apply entry. During a later source outage the tenant puts the
// owner-uid label back (kubectl label: the label is now kubectl's), so the
// target is "ours" again, writable, with a hash other than the last good
// bundle's; a newcomer namespace starts matching. Expected safe behaviour:
// whoever may edit one namespace's target must not decide what another
// namespace gets (fillselectedtenant_test.go): the newcomer gets the last
// good bundle. A hole: Fill refuses to create anything.
func TestAdversarialARelabelAndBackCannotStopTheFill(t *testing.T) {
	cache := &attackMeta{}
	cache.set(ourTarget("tenant", "9", "hash-of-the-previous-bundle", tbLabels("uid-b", "prod"),
		managed("kubectl-label", metav1.ManagedFieldsOperationUpdate, `{"f:metadata":{"f:labels":{"f:trustplane.dev/owner-uid":{}}}}`)))
	w := &attackWrites{}
	o := &Objects{Cache: cache, Live: cache, Client: attackWriter(w, nil)}
	d := Desired{Bundle: "b", Kind: KindConfigMap, Name: "ca", Namespaces: []string{"tenant", "newcomer"},
		Data: map[string][]byte{"ca.crt": []byte("last good pem")}, Labels: tbLabels("uid-b", "prod")}
	_, err := o.Fill(context.Background(), d)
	if err != nil || !slices.Contains(w.all(), "apply newcomer/ca") {
		t.Errorf("Fill() = %v, writes %v: the tenant's relabel-and-back kept the newcomer from the last good bundle", err, w.all())
	}
}
