package workload

import (
	"context"
	"fmt"
	"maps"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	k8stypes "k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// Workload is what the operator needs to know of one workload.
type Workload struct {
	// Kind is Deployment, StatefulSet or DaemonSet.
	Kind v1alpha1.WorkloadKind
	// Namespace of the workload.
	Namespace string
	// Name of the workload.
	Name string
	// UID of the workload object.
	UID k8stypes.UID
	// ResourceVersion of the cached object; it changes with every update.
	ResourceVersion string
	// Labels of the workload object.
	Labels map[string]string
	// ServiceAccount of its pods ("default" when unset).
	ServiceAccount string
	// MatchLabels is spec.selector.matchLabels.
	MatchLabels map[string]string
	// HasMatchExpressions is true when spec.selector also uses expressions,
	// which SPIRE selectors cannot express.
	HasMatchExpressions bool
}

// String names the workload for status messages: "Deployment prod/web".
func (w Workload) String() string { return fmt.Sprintf("%s %s/%s", w.Kind, w.Namespace, w.Name) }

// FromObject extracts a Workload from a typed workload object or from the
// cache's Object; ok is false for other kinds.
func FromObject(obj client.Object) (Workload, bool) {
	var (
		kind v1alpha1.WorkloadKind
		sel  *metav1.LabelSelector
		sa   string
	)
	switch o := obj.(type) {
	case *appsv1.Deployment:
		kind, sel, sa = v1alpha1.WorkloadKindDeployment, o.Spec.Selector, o.Spec.Template.Spec.ServiceAccountName
	case *appsv1.StatefulSet:
		kind, sel, sa = v1alpha1.WorkloadKindStatefulSet, o.Spec.Selector, o.Spec.Template.Spec.ServiceAccountName
	case *appsv1.DaemonSet:
		kind, sel, sa = v1alpha1.WorkloadKindDaemonSet, o.Spec.Selector, o.Spec.Template.Spec.ServiceAccountName
	case *Object:
		w := Workload{Kind: o.WorkloadKind, Namespace: o.Namespace, Name: o.Name, UID: o.UID, ResourceVersion: o.ResourceVersion,
			Labels: o.LabelSet.Map(), ServiceAccount: o.ServiceAccount, HasMatchExpressions: o.HasMatchExpressions}
		w.MatchLabels = w.Labels
		if !o.MatchLabels.Equal(o.LabelSet) {
			w.MatchLabels = o.MatchLabels.Map()
		}
		if w.ServiceAccount == "" {
			w.ServiceAccount = "default"
		}
		return w, true
	default:
		return Workload{}, false
	}
	if sa == "" {
		sa = "default"
	}
	w := Workload{Kind: kind, Namespace: obj.GetNamespace(), Name: obj.GetName(), UID: obj.GetUID(), ResourceVersion: obj.GetResourceVersion(),
		Labels: obj.GetLabels(), ServiceAccount: sa}
	if sel != nil {
		w.MatchLabels = sel.MatchLabels
		w.HasMatchExpressions = len(sel.MatchExpressions) > 0
	}
	return w, true
}

// Objects returns empty objects of every workload kind, for watches and
// cache options.
func Objects() map[v1alpha1.WorkloadKind]client.Object {
	return map[v1alpha1.WorkloadKind]client.Object{
		v1alpha1.WorkloadKindDeployment:  &appsv1.Deployment{},
		v1alpha1.WorkloadKindStatefulSet: &appsv1.StatefulSet{},
		v1alpha1.WorkloadKindDaemonSet:   &appsv1.DaemonSet{},
	}
}

// Selection is what a policy selects.
type Selection struct {
	// Kinds of workload.
	Kinds []v1alpha1.WorkloadKind
	// Namespaces selects namespaces by label; nil selects all.
	Namespaces labels.Selector
	// Workloads selects workloads by label; nil selects all.
	Workloads labels.Selector
	// ServiceAccount, when set, selects only workloads whose pods run as it.
	ServiceAccount string
	// IgnoreNamespaces are never selected, whatever their labels.
	IgnoreNamespaces []string
}

// SelectsWorkload reports whether sel selects w, a workload that is not
// being deleted, in namespace ns.
func (sel Selection) SelectsWorkload(ns *corev1.Namespace, w Workload) bool {
	return sel.SelectsNamespace(ns) && slices.Contains(sel.Kinds, w.Kind) &&
		(sel.Workloads == nil || sel.Workloads.Matches(labels.Set(w.Labels))) &&
		sel.SelectsAccount(w.ServiceAccount)
}

// SelectsAccount reports whether sel selects pods that run as the service
// account sa: any, unless sel names one.
func (sel Selection) SelectsAccount(sa string) bool {
	return sel.ServiceAccount == "" || sel.ServiceAccount == sa
}

// SelectsNamespace reports whether sel selects the namespace ns.
func (sel Selection) SelectsNamespace(ns *corev1.Namespace) bool {
	return ns != nil && ns.DeletionTimestamp == nil && !slices.Contains(sel.IgnoreNamespaces, ns.Name) &&
		(sel.Namespaces == nil || sel.Namespaces.Matches(labels.Set(ns.Labels)))
}

// objectLabels returns the labels of a cached Object without copying them,
// and those of any other object as a labels.Set.
func objectLabels(obj client.Object) labels.Labels {
	if o, ok := obj.(*Object); ok {
		return o.LabelSet
	}
	return labels.Set(obj.GetLabels())
}

// selectsObject applies the workload tests of sel (labels, service account,
// deletion) to obj.
func (sel Selection) selectsObject(obj client.Object) (Workload, bool) {
	if obj.GetDeletionTimestamp() != nil {
		return Workload{}, false
	}
	if sel.Workloads != nil && !sel.Workloads.Matches(objectLabels(obj)) {
		return Workload{}, false
	}
	w, ok := FromObject(obj)
	if !ok || !sel.SelectsAccount(w.ServiceAccount) {
		return Workload{}, false
	}
	return w, true
}

// Lister yields the cached workload objects of one kind in one namespace
// without copying them; fn must not modify or keep them.
type Lister interface {
	InNamespace(ctx context.Context, kind v1alpha1.WorkloadKind, namespace string, fn func(client.Object)) error
}

// CacheLister reads the informer cache's namespace index directly, so a pass
// over 10,000 workloads allocates no copies of them.
type CacheLister struct {
	// Cache is the manager's cache.
	Cache cache.Cache
}

// InNamespace implements Lister.
func (l CacheLister) InNamespace(ctx context.Context, kind v1alpha1.WorkloadKind, namespace string, fn func(client.Object)) error {
	proto, ok := Objects()[kind]
	if !ok {
		return fmt.Errorf("unknown workload kind %q", kind)
	}
	inf, err := l.Cache.GetInformer(ctx, proto)
	if err != nil {
		return fmt.Errorf("informer for %s: %w", kind, err)
	}
	sii, ok := inf.(toolscache.SharedIndexInformer)
	if !ok {
		return ReaderLister{Reader: l.Cache}.InNamespace(ctx, kind, namespace, fn)
	}
	items, err := sii.GetIndexer().ByIndex(toolscache.NamespaceIndex, namespace)
	if err != nil {
		return fmt.Errorf("list %s in %s: %w", kind, namespace, err)
	}
	for _, it := range items {
		if obj, ok := it.(client.Object); ok {
			fn(obj)
		}
	}
	return nil
}

// Getter reads one cached workload object without copying it; the caller
// must not modify or keep it. found is false when it does not exist.
type Getter interface {
	Get(ctx context.Context, kind v1alpha1.WorkloadKind, namespace, name string) (obj client.Object, found bool, err error)
}

// Get implements Getter.
func (l CacheLister) Get(ctx context.Context, kind v1alpha1.WorkloadKind, namespace, name string) (client.Object, bool, error) {
	proto, ok := Objects()[kind]
	if !ok {
		return nil, false, fmt.Errorf("unknown workload kind %q", kind)
	}
	inf, err := l.Cache.GetInformer(ctx, proto)
	if err != nil {
		return nil, false, fmt.Errorf("informer for %s: %w", kind, err)
	}
	sii, ok := inf.(toolscache.SharedIndexInformer)
	if !ok {
		return ReaderLister{Reader: l.Cache}.Get(ctx, kind, namespace, name)
	}
	it, exists, err := sii.GetIndexer().GetByKey(namespace + "/" + name)
	if err != nil {
		return nil, false, fmt.Errorf("get %s %s/%s: %w", kind, namespace, name, err)
	}
	if !exists {
		return nil, false, nil
	}
	obj, ok := it.(client.Object)
	return obj, ok, nil
}

// ReaderLister lists through a client.Reader (tests, or any reader).
type ReaderLister struct {
	// Reader lists the objects.
	Reader client.Reader
}

// InNamespace implements Lister.
func (rl ReaderLister) InNamespace(ctx context.Context, kind v1alpha1.WorkloadKind, namespace string, fn func(client.Object)) error {
	opts := []client.ListOption{client.InNamespace(namespace), client.UnsafeDisableDeepCopy}
	switch kind {
	case v1alpha1.WorkloadKindDeployment:
		var l appsv1.DeploymentList
		if err := lreader(ctx, rl.Reader, &l, opts); err != nil {
			return err
		}
		for i := range l.Items {
			fn(&l.Items[i])
		}
	case v1alpha1.WorkloadKindStatefulSet:
		var l appsv1.StatefulSetList
		if err := lreader(ctx, rl.Reader, &l, opts); err != nil {
			return err
		}
		for i := range l.Items {
			fn(&l.Items[i])
		}
	case v1alpha1.WorkloadKindDaemonSet:
		var l appsv1.DaemonSetList
		if err := lreader(ctx, rl.Reader, &l, opts); err != nil {
			return err
		}
		for i := range l.Items {
			fn(&l.Items[i])
		}
	}
	return nil
}

// Get implements Getter.
func (rl ReaderLister) Get(ctx context.Context, kind v1alpha1.WorkloadKind, namespace, name string) (client.Object, bool, error) {
	proto, ok := Objects()[kind]
	if !ok {
		return nil, false, fmt.Errorf("unknown workload kind %q", kind)
	}
	obj := proto.DeepCopyObject().(client.Object)
	if err := rl.Reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("get %s %s/%s: %w", kind, namespace, name, err)
	}
	return obj, true, nil
}

// Selects reports whether sel selects the workload obj of kind, given its
// namespace ns (nil when the namespace does not exist): the same test Each
// applies.
func Selects(sel Selection, kind v1alpha1.WorkloadKind, ns *corev1.Namespace, obj client.Object) bool {
	if !sel.SelectsNamespace(ns) || !slices.Contains(sel.Kinds, kind) {
		return false
	}
	_, ok := sel.selectsObject(obj)
	return ok
}

func lreader(ctx context.Context, r client.Reader, l client.ObjectList, opts []client.ListOption) error {
	if err := r.List(ctx, l, opts...); err != nil {
		return fmt.Errorf("list %T: %w", l, err)
	}
	return nil
}

// Each calls fn for every workload sel selects: namespaces are read through
// r, workloads through l. It returns how many it found.
func Each(ctx context.Context, r client.Reader, l Lister, sel Selection, fn func(Workload)) (int, error) {
	var nsList corev1.NamespaceList
	if err := r.List(ctx, &nsList, client.UnsafeDisableDeepCopy); err != nil {
		return 0, fmt.Errorf("list namespaces: %w", err)
	}
	n := 0
	for i := range nsList.Items {
		ns := &nsList.Items[i]
		if !sel.SelectsNamespace(ns) {
			continue
		}
		for _, k := range sel.Kinds {
			err := l.InNamespace(ctx, k, ns.Name, func(obj client.Object) {
				if w, ok := sel.selectsObject(obj); ok {
					n++
					fn(w)
				}
			})
			if err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// Changed reports whether an update of a workload can change what any
// policy renders for it: its labels, selector or service account, or its
// deletion. Status and pod-template changes are ignored.
func Changed(old, cur client.Object) bool {
	a, okA := FromObject(old)
	b, okB := FromObject(cur)
	if !okA || !okB {
		return true
	}
	return (old.GetDeletionTimestamp() == nil) != (cur.GetDeletionTimestamp() == nil) ||
		!maps.Equal(a.Labels, b.Labels) || !maps.Equal(a.MatchLabels, b.MatchLabels) ||
		a.HasMatchExpressions != b.HasMatchExpressions || a.ServiceAccount != b.ServiceAccount
}
