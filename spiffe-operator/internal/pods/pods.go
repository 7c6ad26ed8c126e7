package pods

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
	"github.com/trustplane/trustplane/spiffe-operator/internal/labelset"
)

// ServiceAccountIndex is the cache index of pods by namespace and service
// account (see Index).
const ServiceAccountIndex = "namespace/serviceAccount"

// MirrorAnnotation marks a mirror pod: the API server's copy of a static
// pod, created by the kubelet of the node that runs it.
const MirrorAnnotation = "kubernetes.io/config.mirror"

// lastApplied is kubectl's copy of an applied object, often the largest
// annotation, which no template needs.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// Object is what the cache keeps of a pod (see Transform): its name,
// namespace, UID, resourceVersion, labels (as a compact LabelSet;
// ObjectMeta.Labels stays nil), annotations (for pod templates; not
// kubectl's last-applied configuration), owner references and deletion
// timestamp, the service account it runs as, its node and its phase. It is
// a fraction of a typed Pod's size.
type Object struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	// LabelSet holds the pod's labels.
	LabelSet labelset.Set
	// ServiceAccount is the account the pod runs as: "default" when the pod
	// names none, "" for a mirror pod (see serviceAccount).
	ServiceAccount string
	// NodeName is spec.nodeName; empty while the pod is not scheduled.
	NodeName string
	// Phase is status.phase.
	Phase corev1.PodPhase
}

var _ client.Object = &Object{}

// DeepCopyObject implements runtime.Object (a LabelSet is never changed,
// so the copy shares it).
func (o *Object) DeepCopyObject() runtime.Object {
	c := *o
	o.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return &c
}

// GetLabels implements metav1.Object: a new map of LabelSet.
func (o *Object) GetLabels() map[string]string { return o.LabelSet.Map() }

// SetLabels implements metav1.Object.
func (o *Object) SetLabels(l map[string]string) { o.LabelSet = labelset.FromMap(l) }

// keptAnnotationValue is how much of an annotation's value an Object keeps:
// one byte over the longest SPIFFE ID, so that a longer value, which no
// template can render into an entry, is still refused as too long, while
// whoever creates pods cannot make the shared cache hold up to 256 KiB of
// annotations a pod for every policy of the cluster.
const keptAnnotationValue = entries.MaxIDLength + 1

// FromPod returns the Object of a typed pod. An annotation's value is kept
// up to keptAnnotationValue bytes.
func FromPod(p *corev1.Pod) *Object {
	var annotations map[string]string
	for k, v := range p.Annotations {
		if k == lastApplied {
			continue
		}
		if len(v) > keptAnnotationValue {
			v = v[:keptAnnotationValue]
		}
		if annotations == nil {
			annotations = make(map[string]string, len(p.Annotations))
		}
		annotations[k] = v
	}
	return &Object{
		TypeMeta: p.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			OwnerReferences: p.OwnerReferences, DeletionTimestamp: p.DeletionTimestamp,
			Annotations: annotations,
		},
		LabelSet:       labelset.FromMap(p.Labels),
		ServiceAccount: serviceAccount(p), NodeName: p.Spec.NodeName, Phase: p.Status.Phase,
	}
}

// Transform is a cache transform (cache.TransformFunc) that keeps of a pod
// only its Object. The cache then holds *Object for pods: read them
// through Cache, not through a typed client.Reader.
func Transform(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return FromPod(p), nil
}

// serviceAccount returns the pod's service account; the API server sets
// "default" when the pod names none, and so does this. A mirror pod has
// none: the API server neither sets one nor lets it name one, and the
// kubelet runs it without, so it runs as no service account (""), and no
// entry of the operator, which always names one, matches it. Any kubelet
// may create mirror pods in any namespace; counting them as "default"
// would let a node attract the entries of its namespace's default account.
func serviceAccount(p *corev1.Pod) string {
	if _, mirror := p.Annotations[MirrorAnnotation]; mirror {
		return ""
	}
	if p.Spec.ServiceAccountName == "" {
		return "default"
	}
	return p.Spec.ServiceAccountName
}

// IndexServiceAccount is the indexer of ServiceAccountIndex: the
// namespace and service account of a pod, as "namespace/account".
func IndexServiceAccount(obj any) ([]string, error) {
	o, ok := obj.(*Object)
	if !ok {
		return nil, nil
	}
	return []string{o.Namespace + "/" + o.ServiceAccount}, nil
}

// Running reports whether a pod may still run, and so need its identity:
// it has not reached Succeeded or Failed. A terminating pod still runs.
func Running(p *Object) bool {
	return p.Phase != corev1.PodSucceeded && p.Phase != corev1.PodFailed
}

// RunningPod is a running pod, as RunningPods reports it.
type RunningPod struct {
	// UID is the pod's UID.
	UID string
	// Node is the pod's spec.nodeName; empty while it is not scheduled.
	Node string
	// Labels are the pod's labels.
	Labels labelset.Set
}

// Source reads the pods of the informer cache, which holds *Object (see
// Transform and Index), or, without Cache, typed pods through Reader (for
// readers without the transform, such as tests' clients).
type Source struct {
	// Cache is the manager's cache.
	Cache cache.Cache
	// Reader is read when Cache is nil.
	Reader client.Reader
}

// Index registers ServiceAccountIndex on the pod informer of c; call it
// before the cache starts.
func Index(ctx context.Context, c cache.Cache) error {
	sii, err := podInformer(ctx, c)
	if err != nil {
		return err
	}
	if err := sii.AddIndexers(toolscache.Indexers{ServiceAccountIndex: IndexServiceAccount}); err != nil {
		return fmt.Errorf("index pods by service account: %w", err)
	}
	return nil
}

func podInformer(ctx context.Context, c cache.Cache) (toolscache.SharedIndexInformer, error) {
	inf, err := c.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return nil, fmt.Errorf("pod informer: %w", err)
	}
	sii, ok := inf.(toolscache.SharedIndexInformer)
	if !ok {
		return nil, fmt.Errorf("pod informer %T has no indexer", inf)
	}
	return sii, nil
}

// each calls fn for every pod of namespace (of one service account when
// account is set), running or not, without copying them.
func (s Source) each(ctx context.Context, namespace, account string, fn func(*Object)) error {
	if s.Cache == nil {
		opts := []client.ListOption{client.InNamespace(namespace)}
		var l corev1.PodList
		if err := s.Reader.List(ctx, &l, opts...); err != nil {
			return fmt.Errorf("list pods of namespace %s: %w", namespace, err)
		}
		for i := range l.Items {
			if o := FromPod(&l.Items[i]); account == "" || o.ServiceAccount == account {
				fn(o)
			}
		}
		return nil
	}
	sii, err := podInformer(ctx, s.Cache)
	if err != nil {
		return err
	}
	var items []any
	if account != "" {
		items, err = sii.GetIndexer().ByIndex(ServiceAccountIndex, namespace+"/"+account)
	} else {
		items, err = sii.GetIndexer().ByIndex(toolscache.NamespaceIndex, namespace)
	}
	if err != nil {
		return fmt.Errorf("list pods of namespace %s: %w", namespace, err)
	}
	for _, it := range items {
		if o, ok := it.(*Object); ok {
			fn(o)
		}
	}
	return nil
}

// RunningPods returns the running pods of one service account in one
// namespace, scheduled or not. Mirror pods (which run as no service
// account) are left out.
func (s Source) RunningPods(ctx context.Context, namespace, account string) ([]RunningPod, error) {
	if account == "" {
		return nil, nil
	}
	var out []RunningPod
	err := s.each(ctx, namespace, account, func(p *Object) {
		if Running(p) && p.ServiceAccount == account {
			out = append(out, RunningPod{UID: string(p.UID), Node: p.NodeName, Labels: p.LabelSet})
		}
	})
	if err != nil {
		return nil, fmt.Errorf("list pods of service account %s/%s: %w", namespace, account, err)
	}
	return out, nil
}

// InNamespace calls fn for the running pods of namespace, mirror pods
// excepted, without copying them; fn must not keep or modify them.
func (s Source) InNamespace(ctx context.Context, namespace string, fn func(*Object)) error {
	return s.each(ctx, namespace, "", func(p *Object) {
		if Running(p) && !Mirror(p) {
			fn(p)
		}
	})
}

// Mirror reports whether p is a mirror pod.
func Mirror(p *Object) bool {
	_, ok := p.Annotations[MirrorAnnotation]
	return ok
}

// Owner returns the kind and name of p's controller (or, without one, of
// its first owner); empty for a bare pod.
func Owner(p *Object) (kind, name string) {
	for _, o := range p.OwnerReferences {
		if o.Controller != nil && *o.Controller {
			return o.Kind, o.Name
		}
	}
	if len(p.OwnerReferences) > 0 {
		return p.OwnerReferences[0].Kind, p.OwnerReferences[0].Name
	}
	return "", ""
}

// Lister returns an entrysync.PodLister reading s: the UIDs and labels of
// RunningPods.
func Lister(s Source) entrysync.PodLister {
	return func(ctx context.Context, namespace, serviceAccount string) ([]entrysync.Pod, error) {
		running, err := s.RunningPods(ctx, namespace, serviceAccount)
		if err != nil {
			return nil, err
		}
		out := make([]entrysync.Pod, len(running))
		for i, p := range running {
			out[i] = entrysync.Pod{UID: p.UID, Labels: p.Labels, Node: p.Node}
		}
		return out, nil
	}
}
