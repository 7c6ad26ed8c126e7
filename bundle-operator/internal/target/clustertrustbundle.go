package target

import (
	"context"
	"encoding/json"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/shared"
)

// ClusterTrustBundleGVK is the kind of the cluster-wide target: pods project
// its spec.trustBundle directly, without a per-namespace copy.
var ClusterTrustBundleGVK = schema.GroupVersionKind{Group: "certificates.k8s.io", Version: "v1", Kind: "ClusterTrustBundle"}

// ClusterTrustBundles writes the ClusterTrustBundle target of TrustBundles:
// one cluster-scoped object without a signer, its spec.trustBundle the PEM
// bundle.
type ClusterTrustBundles struct {
	// Cache reads PartialObjectMetadata of ClusterTrustBundles from the
	// metadata-only cache filtered by LabelTrustBundle.
	Cache client.Reader
	// Live reads metadata from the API server, for Fill and for an object
	// of the target's name the cache does not hold.
	Live client.Reader
	// Client applies and deletes.
	Client client.Client

	// left remembers the ClusterTrustBundles a release left in place.
	left leftInPlace
	// unseen remembers the writes of ours the cache may not show yet. No
	// watch event feeds it: a write is taken as seen once the cache holds
	// its resourceVersion, or after expectationTTL. A release fails while
	// a write to a ClusterTrustBundle it is to release is unseen.
	unseen Expectations
}

// kindClusterTrustBundle keys the ClusterTrustBundles a release left in place.
const kindClusterTrustBundle Kind = "ClusterTrustBundle"

// Sync makes the ClusterTrustBundle name hold pem and carry labels (the
// labels of the TrustBundle's targets, naming it under LabelTrustBundle),
// and releases the other ClusterTrustBundles of that TrustBundle (a renamed or removed
// target) as shared.Writer.Release does: one only we write is deleted, one
// another writer shares loses just our fields, and one the API server
// refuses without our fields is left in place (Report.Left) and not tried
// again until it changes. An empty name releases them all. Only an object
// whose labels make it ours (see ownedBy) is released or force-applied; one
// labelled as another owner's is left alone and reported, and one of that
// name someone else created is applied without force, so a conflict leaves
// it as it is and is reported. The ClusterTrustBundles are listed from
// the cache, which shows a write of ours only once its watch event
// arrived: one to release that a write of ours went to and that the cache
// does not show yet is reported as failed (errWriteNotSeen), so that the
// release is retried rather than taken as done.
func (c *ClusterTrustBundles) Sync(ctx context.Context, name string, pem []byte, labels map[string]string) Report {
	var rep Report
	if name != "" {
		rep.Add(c.syncOne(ctx, name, pem, labels, false))
	}
	bundle := labels[LabelTrustBundle]
	// Writes not in the cache are judged before the list: the cache only
	// moves on, so a write it shows now is in the list too.
	var writing []client.ObjectKey
	for _, k := range c.unseen.writing(kindClusterTrustBundle, bundle) {
		if k.Name != name {
			writing = append(writing, k)
		}
	}
	r, unseen := unseenWrites(ctx, c.Cache, &c.unseen, kindClusterTrustBundle, ClusterTrustBundleGVK, writing)
	rep.Add(r)
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(ClusterTrustBundleGVK.GroupVersion().WithKind(ClusterTrustBundleGVK.Kind + "List"))
	if err := c.Cache.List(ctx, l, client.MatchingLabels{LabelTrustBundle: bundle}); err != nil {
		rep.Fail("list ClusterTrustBundles of "+bundle, err)
		return rep
	}
	var stale []*metav1.PartialObjectMetadata
	for i := range l.Items {
		if l.Items[i].Name != name && ownedBy(l.Items[i].Labels, labels) {
			stale = append(stale, &l.Items[i])
		}
	}
	c.left.keepOnly(bundle, kindClusterTrustBundle, stale)
	for _, m := range stale {
		if unseen[client.ObjectKey{Name: m.Name}] {
			continue
		}
		key := leftKey{bundle: bundle, kind: kindClusterTrustBundle, name: m.Name}
		_, r, _ := c.left.release(ctx, writer(c.Client), key, m, ClusterTrustBundleGVK, "ClusterTrustBundle "+m.Name)
		rep.Add(r)
	}
	return rep
}

// Fill creates the ClusterTrustBundle name with pem when no object of that
// name exists, and writes nothing else. It runs while the sources fail.
func (c *ClusterTrustBundles) Fill(ctx context.Context, name string, pem []byte, labels map[string]string) Report {
	return c.syncOne(ctx, name, pem, labels, true)
}

func (c *ClusterTrustBundles) syncOne(ctx context.Context, name string, pem []byte, labels map[string]string, fillOnly bool) Report {
	var rep Report
	what := "ClusterTrustBundle " + name
	hash := Hash(map[string][]byte{"trustBundle": pem})
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(ClusterTrustBundleGVK)
	err := c.Cache.Get(ctx, client.ObjectKey{Name: name}, m)
	if err != nil && !apierrors.IsNotFound(err) {
		rep.Fail(what, err)
		return rep
	}
	ours := err == nil && ownedBy(m.Labels, labels)
	if fillOnly {
		if err == nil {
			return rep
		}
		if err = c.Live.Get(ctx, client.ObjectKey{Name: name}, m); err == nil || !apierrors.IsNotFound(err) {
			if err != nil {
				rep.Fail(what, err)
			}
			return rep
		}
	}
	if err == nil {
		if err := heldByOther(m.Labels, labels); err != nil {
			rep.Fail(what, err)
			return rep
		}
	}
	if ours && m.Annotations[AnnotationHash] == hash && ownsTrustBundle(m.ManagedFields) && m.DeletionTimestamp == nil {
		rep.InSync++
		return rep
	}
	obj := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"trustBundle": string(pem)}}}
	obj.SetGroupVersionKind(ClusterTrustBundleGVK)
	obj.SetName(name)
	obj.SetLabels(labels)
	obj.SetAnnotations(map[string]string{AnnotationHash: hash, AnnotationKeys: "trustBundle"})
	if err != nil && !fillOnly {
		// Not in the cache: create it only where no object of its name
		// exists. One that does was created since the cache last saw the
		// name; another TrustBundle's is left to it.
		if written, err := c.createOrInspect(ctx, labels, obj); written || err != nil {
			if err != nil {
				rep.Fail(what, err)
				return rep
			}
			c.unseen.expectFor(labels[LabelTrustBundle], kindClusterTrustBundle, "", name, obj.GetResourceVersion())
			rep.InSync++
			rep.Written++
			return rep
		}
	}
	if err := applyOurs(ctx, c.Client, obj, ours); err != nil {
		rep.Fail(what, err)
		return rep
	}
	c.unseen.expectFor(labels[LabelTrustBundle], kindClusterTrustBundle, "", name, obj.GetResourceVersion())
	rep.InSync++
	rep.Written++
	return rep
}

// createOrInspect writes obj, a ClusterTrustBundle the cache does not
// hold, only if no object of its name exists, and reports whether it did.
// Where one exists it reads its labels live, and returns an error when it
// is another TrustBundle's or gone meanwhile; otherwise neither, and the
// caller applies obj without force beside its writers' fields. Once it
// wrote, obj holds the resourceVersion the API server answered.
func (c *ClusterTrustBundles) createOrInspect(ctx context.Context, labels map[string]string, obj *unstructured.Unstructured) (bool, error) {
	obj.SetResourceVersion(shared.CreateOnly)
	err := applyOurs(ctx, c.Client, obj, false)
	if err == nil {
		return true, nil
	}
	obj.SetResourceVersion("")
	if !apierrors.IsConflict(err) {
		return false, err
	}
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(ClusterTrustBundleGVK)
	if err := c.Live.Get(ctx, client.ObjectKey{Name: obj.GetName()}, m); err != nil {
		return false, err
	}
	return false, heldByOther(m.Labels, labels)
}

// ownsTrustBundle reports whether our field manager's apply owns
// spec.trustBundle: a hand edit moves it to the editor's manager.
func ownsTrustBundle(entries []metav1.ManagedFieldsEntry) bool {
	for _, e := range entries {
		if e.Manager != FieldManager || e.Operation != metav1.ManagedFieldsOperationApply || e.FieldsV1 == nil {
			continue
		}
		var fields struct {
			Spec map[string]any `json:"f:spec"`
		}
		if err := json.Unmarshal(e.FieldsV1.Raw, &fields); err != nil {
			return false
		}
		_, ok := fields.Spec["f:trustBundle"]
		return ok
	}
	return false
}
