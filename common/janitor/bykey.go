package janitor

import (
	"context"
	"fmt"
	"maps"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/common/scoped"
	"github.com/trustplane/trustplane/common/shared"
)

// The writes of a child named by key that the scoped client offers besides
// CreateOrUpdate, Create, Update and Patch (janitor.go). Each reads the
// object of that name first, in every environment as Claim does, and
// leaves one the owner does not own as it is: a handler is given the
// janitor as its client, so none of its writes may delete, adopt or write
// over an object someone else created under a child's name.

// readOwned reads the object key names into obj, in every environment, and
// returns a *NotOwnedError when the owner does not own it. A failed read
// returns its error (apierrors.IsNotFound when there is no such object).
func (j *Client) readOwned(ctx context.Context, r client.Reader, key client.ObjectKey, obj client.Object) error {
	if err := r.Get(ctx, key, obj); err != nil {
		return fmt.Errorf("get %s %s: %w", j.kindOf(obj), keyString(key), err)
	}
	if !j.Owns(obj) {
		return j.notOwned(obj)
	}
	return nil
}

// Delete deletes obj, a child of the owner, by its name. An object of that
// name the owner does not own is left as it is and a *NotOwnedError
// returned; none returns NotFound. The delete is preconditioned on the UID
// and resourceVersion read, so an object put in the child's place, or
// changed, since the read makes it conflict instead; preconditions the
// caller gives are kept in their place.
func (j *Client) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	cur, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return fmt.Errorf("delete %s: object is not a client.Object", obj.GetName())
	}
	if err := j.readOwned(ctx, j.Client.Client, client.ObjectKeyFromObject(obj), cur); err != nil {
		return err
	}
	if given := (&client.DeleteOptions{}).ApplyOptions(opts); given.Preconditions == nil {
		uid, rv := cur.GetUID(), cur.GetResourceVersion()
		opts = append(opts, client.Preconditions{UID: &uid, ResourceVersion: &rv})
	}
	return j.Client.Client.Delete(ctx, cur, opts...)
}

// DeleteAllOf deletes, of the objects of this environment that opts
// select, only the owner's children: those whose owner labels are the
// owner's (UID, kind, namespace and name), which every write of the
// janitor puts on a child. Where a label holds the owner's name, one
// server-side delete selects them by these labels. For an owner whose name
// no label can hold, the children carry it in an annotation, which no
// selector reads: the objects the labels select are listed, and each that
// Owns accepts is deleted, preconditioned on the UID and resourceVersion
// listed.
func (j *Client) DeleteAllOf(ctx context.Context, obj client.Object, opts ...client.DeleteAllOfOption) error {
	if scoped.SelectsNothing(opts...) {
		return nil
	}
	own := labels.Owner(j.owner, j.ownerGVK.Kind)
	if _, named := own[labels.OwnerName]; named {
		// MatchingLabels adds to a selector opts hold; a
		// MatchingLabelsSelector would replace it, deleting every child
		// instead of those the caller selected.
		return j.Client.DeleteAllOf(ctx, obj, append(opts, client.MatchingLabels(own))...)
	}
	unnamed, err := k8slabels.NewRequirement(labels.OwnerName, selection.DoesNotExist, nil)
	if err != nil {
		return fmt.Errorf("select the children of %s: %w", j.owner.GetName(), err)
	}
	given := (&client.DeleteAllOfOptions{}).ApplyOptions(opts)
	list := &unstructured.UnstructuredList{}
	gvk, err := apiutil.GVKForObject(obj, j.Scheme())
	if err != nil {
		return fmt.Errorf("kind of %T: %w", obj, err)
	}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	listOpts := given.ListOptions
	listOpts.LabelSelector = k8slabels.SelectorFromSet(own).Add(*unnamed)
	if given.LabelSelector != nil {
		reqs, _ := given.LabelSelector.Requirements()
		listOpts.LabelSelector = listOpts.LabelSelector.Add(reqs...)
	}
	if err := j.Client.List(ctx, list, &listOpts); err != nil {
		return fmt.Errorf("list the %s children of %s: %w", gvk.Kind, j.owner.GetName(), err)
	}
	for i := range list.Items {
		child := &list.Items[i]
		if !j.Owns(child) {
			continue
		}
		uid, rv := child.GetUID(), child.GetResourceVersion()
		del := given.DeleteOptions
		del.Preconditions = &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}
		if err := j.Client.Client.Delete(ctx, child, &del); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete %s %s: %w", gvk.Kind, client.ObjectKeyFromObject(child), err)
		}
	}
	return nil
}

// Apply server-side applies ac as a child of the owner: marked as its
// child (SetOwnership), with the environment label, and recorded as
// touched, so Cleanup sweeps it once a pass no longer applies it. An
// object of ac's name the owner does not own is left as it is and a
// *NotOwnedError returned. The apply carries the UID of the child read, so
// an object put in its place since is refused by the API server; where no
// child was read the apply may only create. When that create meets an
// object (the read lagged behind, or one was created meanwhile), the
// object is read again, uncached when the janitor has a live reader, and
// applied over only when it is the owner's.
func (j *Client) Apply(ctx context.Context, ac runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	u, err := scoped.ToUnstructured(ac)
	if err != nil {
		return err
	}
	if err := j.SetOwnership(u); err != nil {
		return err
	}
	err = j.applyOver(ctx, j.Client.Client, u, opts)
	if apierrors.IsConflict(err) && u.GetResourceVersion() == shared.CreateOnly {
		u.SetResourceVersion("")
		err = j.applyOver(ctx, j.liveReader(), u, opts)
	}
	j.noteChild()
	if err != nil {
		return err
	}
	j.record(u)
	return nil
}

// applyOver applies u over the owner's child of its name as r reads it:
// with its UID as a precondition, or create-only where r finds none.
func (j *Client) applyOver(ctx context.Context, r client.Reader, u *unstructured.Unstructured, opts []client.ApplyOption) error {
	cur := j.objectOf(u)
	switch err := j.readOwned(ctx, r, client.ObjectKeyFromObject(u), cur); {
	case apierrors.IsNotFound(err):
		if u.GetResourceVersion() == "" {
			u.SetResourceVersion(shared.CreateOnly)
		}
	case err != nil:
		return err
	default:
		u.SetUID(cur.GetUID())
	}
	return j.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), opts...)
}

// objectOf returns an empty object of u's kind to read it into: typed when
// the scheme knows the kind (so a cached client reads it from its cache),
// unstructured otherwise.
func (j *Client) objectOf(u *unstructured.Unstructured) client.Object {
	if o, err := j.Scheme().New(u.GroupVersionKind()); err == nil {
		if obj, ok := o.(client.Object); ok {
			return obj
		}
	}
	cur := &unstructured.Unstructured{}
	cur.SetGroupVersionKind(u.GroupVersionKind())
	return cur
}

// liveReader reads uncached when the janitor has a live reader.
func (j *Client) liveReader() client.Reader {
	if j.live != nil {
		return j.live
	}
	return j.Client.Client
}

// Status returns the writer of children's status, as SubResource("status").
func (j *Client) Status() client.SubResourceWriter { return j.SubResource("status") }

// SubResource returns the client of a subresource of children. Its writes
// first check, as Update does, that the object is the owner's: one the
// owner does not own is left as it is and a *NotOwnedError returned.
func (j *Client) SubResource(subResource string) client.SubResourceClient {
	return &ownedSubResource{SubResourceClient: j.Client.SubResource(subResource), j: j}
}

// ownedSubResource is a SubResourceClient whose writes go only to the
// owner's children.
type ownedSubResource struct {
	client.SubResourceClient
	j *Client
}

// Create creates subResource of obj when obj is the owner's child.
func (s *ownedSubResource) Create(ctx context.Context, obj client.Object, subResource client.Object, opts ...client.SubResourceCreateOption) error {
	if _, err := s.j.ownedVersion(ctx, obj); err != nil {
		return err
	}
	return s.SubResourceClient.Create(ctx, obj, subResource, opts...)
}

// Update updates the subresource of obj when obj is the owner's child,
// over the version found owned when obj carries no resourceVersion.
func (s *ownedSubResource) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	rv, err := s.j.ownedVersion(ctx, obj)
	if err != nil {
		return err
	}
	if obj.GetResourceVersion() == "" {
		obj.SetResourceVersion(rv)
	}
	return s.SubResourceClient.Update(ctx, obj, opts...)
}

// Patch patches the subresource of obj when obj is the owner's child.
func (s *ownedSubResource) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	if _, err := s.j.ownedVersion(ctx, obj); err != nil {
		return err
	}
	return s.SubResourceClient.Patch(ctx, obj, patch, opts...)
}

// Apply applies the subresource of the object ac names when it is the
// owner's child, with its UID as a precondition.
func (s *ownedSubResource) Apply(ctx context.Context, ac runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	u, err := scoped.ToUnstructured(ac)
	if err != nil {
		return err
	}
	cur := s.j.objectOf(u)
	if err := s.j.readOwned(ctx, s.j.Client.Client, client.ObjectKeyFromObject(u), cur); err != nil {
		return err
	}
	u.SetUID(cur.GetUID())
	return s.SubResourceClient.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), opts...)
}

// Unreachable returns the kinds of the children this reconcile wrote or
// kept that no owner reference reaches (in another namespace than a
// namespaced owner's, or cluster-scoped) and that types do not list. Only
// a Withdraw of their type (the Controller withdraws the handler's
// OwnedTypes) removes them with the owner: garbage collection cannot follow
// owner labels, so they would outlive it.
func (j *Client) Unreachable(types []ChildType) []schema.GroupVersionKind {
	if j.owner.GetNamespace() == "" {
		return nil
	}
	j.mu.Lock()
	elsewhere := map[schema.GroupVersionKind]bool{}
	for k := range j.touched {
		if k.namespace != j.owner.GetNamespace() {
			elsewhere[k.gvk] = true
		}
	}
	j.mu.Unlock()
	if len(elsewhere) == 0 {
		return nil
	}
	for _, t := range types {
		if gvk, err := j.childKind(t); err == nil {
			delete(elsewhere, gvk)
		}
	}
	return slices.Collect(maps.Keys(elsewhere))
}
