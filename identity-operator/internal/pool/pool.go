package pool

import (
	"context"
	"fmt"
	"strings"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/ctrlerrors"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/selector"
)

// InferencePoolGVK returns the InferencePool version the operator reads (a
// function, so no caller can change it for everyone).
func InferencePoolGVK() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: v1alpha1.InferencePoolGroup, Version: "v1", Kind: v1alpha1.InferencePoolKind}
}

// RefError is a pool reference that cannot be resolved, with the InvalidRef
// reason to report.
type RefError struct {
	// Reason is TargetPoolNotFound, InferencePoolCRDMissing or
	// UnsupportedPoolKind.
	Reason string
	err    error
}

// Error implements error.
func (e *RefError) Error() string { return e.err.Error() }

// Unwrap returns the underlying error.
func (e *RefError) Unwrap() error { return e.err }

// InferencePoolCRDName is the name of the InferencePool
// CustomResourceDefinition.
const InferencePoolCRDName = "inferencepools." + v1alpha1.InferencePoolGroup

// Resolver reads pools.
type Resolver struct {
	// Reader reads pools; the manager's cached client in production.
	Reader client.Reader
	// CRDReader reads the InferencePool CRD uncached (the manager's API
	// reader in production), to confirm that a kind the REST mapper does not
	// know is really not served before a binding is told its CRD is missing:
	// a stale discovery answer from one API server replica is not a missing
	// CRD. Nil means Reader.
	CRDReader client.Reader
	// Serving, when set, is what the operator last read of the CRD while it
	// runs: a CRD it says does not serve v1 InferencePools is missing,
	// whatever the cache and the REST mapper still hold.
	Serving *Serving
	// Informers, when set, is the cache behind Reader: a pool is read only
	// once the cache's informer for its kind has synced, and a pass never
	// waits for that. A cached read of a kind whose informer has not synced
	// waits for it until the pass's context ends; for an informer that
	// cannot sync (the operator's role allows neither list nor watch on the
	// kind: client-go's streaming list needs only watch, and it falls back
	// to a plain list) that is never, and the pass would hold its worker
	// for ever. Nil reads
	// Reader at once (a reader without informers, such as a test's client).
	Informers InformerGetter
}

// InformerGetter returns the cache's informer for an object's kind, as
// controller-runtime's cache.Cache does.
type InformerGetter interface {
	GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error)
}

// Selector returns the pool's selector labels. Errors are a *RefError, a
// *selector.Error (InvalidPoolSelector) or a transient read error.
func (r Resolver) Selector(ctx context.Context, namespace string, ref v1alpha1.PoolReference) (map[string]string, error) {
	ref = ref.Resolved()
	key := client.ObjectKey{Namespace: namespace, Name: ref.Name}
	switch {
	case ref.Group == v1alpha1.InferencePoolGroup && ref.Kind == v1alpha1.InferencePoolKind:
		if why := r.Serving.NotServing(); why != "" {
			return nil, &RefError{Reason: v1alpha1.ReasonInferencePoolCRDMissing,
				err: fmt.Errorf("the %s CRD %s %s", ref.Kind, InferencePoolCRDName, why)}
		}
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(InferencePoolGVK())
		if err := r.get(ctx, key, u, ref); err != nil {
			if meta.IsNoMatchError(err) {
				return nil, r.unmapped(ctx, ref, err)
			}
			return nil, readError(ref, namespace, err)
		}
		return InferencePoolSelector(u)
	case ref.Group == v1alpha1.AppsGroup && ref.Kind == v1alpha1.DeploymentKind:
		d := &appsv1.Deployment{}
		if err := r.get(ctx, key, d, ref); err != nil {
			return nil, readError(ref, namespace, err)
		}
		return LabelSelectorLabels(d.Spec.Selector)
	case ref.Group == v1alpha1.AppsGroup && ref.Kind == v1alpha1.StatefulSetKind:
		s := &appsv1.StatefulSet{}
		if err := r.get(ctx, key, s, ref); err != nil {
			return nil, readError(ref, namespace, err)
		}
		return LabelSelectorLabels(s.Spec.Selector)
	default:
		return nil, &RefError{Reason: v1alpha1.ReasonUnsupportedPoolKind,
			err: fmt.Errorf("poolRef kind %s in group %q is not supported: use InferencePool (%s), Deployment or StatefulSet (apps)",
				ref.Kind, ref.Group, v1alpha1.InferencePoolGroup)}
	}
}

// get reads the pool once the cache of its kind has synced. An informer
// that has not synced gives a transient error at once, with the reason
// PoolCacheNotSynced and what to check: the binding keeps its outputs and
// the pass is retried through the rate limiter, without holding a worker.
func (r Resolver) get(ctx context.Context, key client.ObjectKey, obj client.Object, ref v1alpha1.PoolReference) error {
	if r.Informers != nil {
		inf, err := r.Informers.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
		if err != nil {
			return fmt.Errorf("informer for %s: %w", resourceOf(ref), err)
		}
		if !inf.HasSynced() {
			resource := resourceOf(ref)
			return ctrlerrors.WithReason(v1alpha1.ReasonPoolCacheNotSynced, ctrlerrors.RetryableErrorf(
				"the operator's cache of %s has not synced yet: its first list has not completed, or its role allows neither list nor watch on %s (grant both; retrying, outputs kept)",
				resource, resource))
		}
	}
	return r.Reader.Get(ctx, key, obj)
}

// resourceOf names the resource of a supported pool kind as RBAC rules do
// (inferencepools.inference.networking.k8s.io, deployments.apps).
func resourceOf(ref v1alpha1.PoolReference) string {
	return strings.ToLower(ref.Kind) + "s." + ref.Group
}

// StripPodTemplate is a cache transform for Deployments and StatefulSets:
// pool lookups read only metadata and spec.selector, so the pod template,
// the status and the managed fields are dropped before the object enters
// the cache. Other objects pass unchanged.
func StripPodTemplate(obj any) (any, error) {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		o.Spec.Template = corev1.PodTemplateSpec{}
		o.Status = appsv1.DeploymentStatus{}
		o.SetManagedFields(nil)
	case *appsv1.StatefulSet:
		o.Spec.Template = corev1.PodTemplateSpec{}
		o.Spec.VolumeClaimTemplates = nil
		o.Status = appsv1.StatefulSetStatus{}
		o.SetManagedFields(nil)
	}
	return obj, nil
}

// InferencePoolSelector returns the selector labels of an InferencePool read
// as unstructured (spec.selector, in any of the shapes the decoder accepts).
func InferencePoolSelector(u *unstructured.Unstructured) (map[string]string, error) {
	raw, _, err := unstructured.NestedFieldNoCopy(u.Object, "spec", "selector")
	if err != nil {
		// spec itself is no object: a shape the pool's schema refuses, as
		// final as a selector that does not decode, never a transient error.
		return nil, &selector.Error{Reason: v1alpha1.ReasonInvalidPoolSelector,
			Message: fmt.Sprintf("the selector of InferencePool %s/%s cannot be read: %v", u.GetNamespace(), u.GetName(), err)}
	}
	return selector.DecodePoolSelector(raw)
}

// LabelSelectorLabels feeds the typed selector of a Deployment or
// StatefulSet through the same decoder as an unstructured one.
func LabelSelectorLabels(sel *metav1.LabelSelector) (map[string]string, error) {
	if sel == nil {
		return selector.DecodePoolSelector(nil)
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(sel)
	if err != nil {
		return nil, fmt.Errorf("convert pool selector: %w", err)
	}
	return selector.DecodePoolSelector(m)
}

func readError(ref v1alpha1.PoolReference, namespace string, err error) error {
	if apierrors.IsNotFound(err) {
		return &RefError{Reason: v1alpha1.ReasonTargetPoolNotFound,
			err: fmt.Errorf("%s %s/%s not found", ref.Kind, namespace, ref.Name)}
	}
	return fmt.Errorf("get %s %s/%s: %w", ref.Kind, namespace, ref.Name, err)
}

// unmapped judges a NoMatch for InferencePools by the CRD itself, read
// uncached. Only a CRD that is absent, being deleted, not established or
// not serving the version the operator reads is a missing CRD (a *RefError
// with InferencePoolCRDMissing, which withdraws the binding's outputs).
// A CRD that serves it means the mapper's discovery answer was stale, and a
// CRD that cannot be read proves nothing: both are transient errors, which
// keep the binding's outputs and are retried.
func (r Resolver) unmapped(ctx context.Context, ref v1alpha1.PoolReference, noMatch error) error {
	gv := InferencePoolGVK().GroupVersion()
	reader := r.CRDReader
	if reader == nil {
		reader = r.Reader
	}
	why, err := ReadCRDServing(ctx, reader)
	switch {
	case err != nil:
		return fmt.Errorf("the API server does not map %s %s, and its CRD %s could not be read to confirm it is missing (retrying, outputs kept): %w; %w",
			ref.Kind, gv, InferencePoolCRDName, noMatch, err)
	case why != "":
		return &RefError{Reason: v1alpha1.ReasonInferencePoolCRDMissing,
			err: fmt.Errorf("the %s CRD %s %s: %w", ref.Kind, InferencePoolCRDName, why, noMatch)}
	}
	return fmt.Errorf("the API server does not map %s %s although its CRD %s serves it (discovery not yet up to date; retrying, outputs kept): %w",
		ref.Kind, gv, InferencePoolCRDName, noMatch)
}

// ReadCRDServing reads the InferencePool CRD through reader (uncached, to
// judge the API server's current state) and tells why it does not serve v1
// InferencePools ("is not installed" when it is absent; see CRDNotServing),
// or returns "" when it does. A read that fails says nothing: its error is
// returned.
func ReadCRDServing(ctx context.Context, reader client.Reader) (string, error) {
	gvk := InferencePoolGVK()
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	err := reader.Get(ctx, client.ObjectKey{Name: InferencePoolCRDName}, crd)
	switch {
	case apierrors.IsNotFound(err):
		return "is not installed", nil
	case err != nil:
		return "", fmt.Errorf("read the CRD %s: %w", InferencePoolCRDName, err)
	}
	return CRDNotServing(crd, gvk.Kind, gvk.Version), nil
}

// Serving holds what a running operator last read of the InferencePool CRD:
// why it does not serve v1 InferencePools, or "" when it does or has not
// been read. The REST mapper keeps a mapping it learned, so a CRD that
// stops serving v1 (or is deleted) while the operator runs gives no "no
// matches" error; the Resolver then learns it here. It is safe for
// concurrent use; a nil Serving knows nothing.
type Serving struct {
	mu  sync.Mutex
	why string
}

// Set records why the CRD does not serve v1 InferencePools ("" when it
// does) and reports whether that changed.
func (s *Serving) Set(why string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := s.why != why
	s.why = why
	return changed
}

// NotServing returns why the CRD does not serve v1 InferencePools, or ""
// when it does or is not known not to.
func (s *Serving) NotServing() string {
	if s == nil {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.why
}

// CRDNotServing tells why the CustomResourceDefinition crd, read as
// unstructured, does not serve kind in version, or returns "" when it does:
// it is established, not being deleted, has accepted kind as its kind and
// lists version as served. A CRD of the same name that defines another kind
// (deleted and created again with other names) does not serve kind: the
// REST mapper will never map it, so waiting for discovery would wait forever.
func CRDNotServing(crd *unstructured.Unstructured, kind, version string) string {
	if crd.GetDeletionTimestamp() != nil {
		return "is being deleted"
	}
	if accepted, _, _ := unstructured.NestedString(crd.Object, "status", "acceptedNames", "kind"); accepted != kind {
		if accepted == "" {
			return fmt.Sprintf("has not accepted the kind %s (no accepted names yet)", kind)
		}
		return fmt.Sprintf("defines the kind %s, not %s: install the CRD that defines %s", accepted, kind, kind)
	}
	var served []string
	servesVersion := false
	for _, v := range nestedObjects(crd.Object, "spec", "versions") {
		name, _, _ := unstructured.NestedString(v, "name")
		if on, _, _ := unstructured.NestedBool(v, "served"); !on {
			continue
		}
		served = append(served, name)
		servesVersion = servesVersion || name == version
	}
	if !servesVersion {
		if len(served) == 0 {
			return fmt.Sprintf("serves no version (the operator reads %s)", version)
		}
		return fmt.Sprintf("does not serve %s, which the operator reads (it serves %s): install a release of the CRD that serves %s", version, strings.Join(served, ", "), version)
	}
	for _, c := range nestedObjects(crd.Object, "status", "conditions") {
		typ, _, _ := unstructured.NestedString(c, "type")
		status, _, _ := unstructured.NestedString(c, "status")
		if typ == "Established" && status == "True" {
			return ""
		}
	}
	return "is not established yet"
}

// nestedObjects returns the elements of the list at fields in obj that are
// objects; a missing or malformed list, or element, gives nothing.
func nestedObjects(obj map[string]any, fields ...string) []map[string]any {
	list, _, _ := unstructured.NestedSlice(obj, fields...)
	var out []map[string]any
	for _, e := range list {
		if m, ok := e.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}
