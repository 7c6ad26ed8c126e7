// Package janitor provides a client that remembers which children a
// reconcile created or updated and, on Cleanup, deletes the owned children of
// the declared types that it did not touch: outputs that were withdrawn or
// renamed since the last pass.
//
// Two rules keep it safe. Only types declared in this reconcile are cleaned,
// so a handler that returns early never loses children of types it did not
// get to. And only objects that carry the owner's controller reference or
// owner-uid label are ever deleted, so foreign objects survive.
//
// The Controller runs Cleanup after a successful CreateOrUpdate, and
// Withdraw with the handler's OwnedTypes on deletion: a handler only writes
// and declares.
package janitor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/common/scoped"
)

// ChildType is a type of children an owner has.
type ChildType struct {
	// List is an empty list of the type, e.g. &corev1.ConfigMapList{}.
	List client.ObjectList
	// Live children (like every child, found in every environment by the
	// owner's UID and kind, which alone identify its children) are read
	// uncached by Withdraw (WithLiveReader), so one the cache has not seen
	// yet is found as well, and Withdraw confirms their absence (or, WithConfirmedGone,
	// trusts an earlier such confirmation that no write of a child has
	// overtaken while the cache shows none either).
	Live bool
}

// Client is a scoped.Client that records the children it writes for one
// owner during one reconcile.
type Client struct {
	*scoped.Client
	owner    client.Object
	ownerGVK schema.GroupVersionKind
	// live reads Live children uncached; nil reads them through the client.
	live client.Reader
	// gone remembers the owners whose Live children were confirmed gone;
	// nil remembers none.
	gone *ConfirmedGone

	mu       sync.Mutex
	touched  map[childKey]struct{}
	declared map[schema.GroupVersionKind]ChildType
	// marked is set once this janitor marked or kept a child: what gone
	// remembers of the owner no longer holds.
	marked bool
}

// Option configures a Client.
type Option func(*Client)

// WithLiveReader reads the children of Live types through r (an uncached
// reader, such as the manager's APIReader).
func WithLiveReader(r client.Reader) Option { return func(j *Client) { j.live = r } }

// WithConfirmedGone remembers in m the owners whose Live children Withdraw
// confirmed gone, and trusts what m remembers (see ConfirmedGone).
func WithConfirmedGone(m *ConfirmedGone) Option { return func(j *Client) { j.gone = m } }

type childKey struct {
	gvk       schema.GroupVersionKind
	namespace string
	name      string
}

// New returns a Client writing children of owner through sc.
func New(sc *scoped.Client, owner client.Object, opts ...Option) (*Client, error) {
	gvk, err := apiutil.GVKForObject(owner, sc.Scheme())
	if err != nil {
		return nil, fmt.Errorf("kind of owner %s: %w", owner.GetName(), err)
	}
	j := &Client{
		Client:   sc,
		owner:    owner,
		ownerGVK: gvk,
		touched:  map[childKey]struct{}{},
		declared: map[schema.GroupVersionKind]ChildType{},
	}
	for _, o := range opts {
		o(j)
	}
	return j, nil
}

// Declare names the child types this reconcile owns in full: Cleanup deletes
// untouched owned children of these types only. Call it once the handler
// knows the complete desired set of a type, not before an early return.
func (j *Client) Declare(lists ...client.ObjectList) error {
	types := make([]ChildType, 0, len(lists))
	for _, l := range lists {
		types = append(types, ChildType{List: l})
	}
	return j.DeclareTypes(types...)
}

// DeclareTypes is Declare for child types with their options.
func (j *Client) DeclareTypes(types ...ChildType) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, t := range types {
		gvk, err := j.childKind(t)
		if err != nil {
			return fmt.Errorf("declare cleanup type: %w", err)
		}
		j.declared[gvk] = t
	}
	return nil
}

// childKind returns the kind of the children of t (its list's kind without
// "List").
func (j *Client) childKind(t ChildType) (schema.GroupVersionKind, error) {
	gvk, err := apiutil.GVKForObject(t.List, j.Scheme())
	gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	return gvk, err
}

// SetOwnership marks obj as a child of the owner: a controller reference
// where Kubernetes allows one (same namespace, or a cluster-scoped owner) and
// the owner labels always, which Cleanup lists by (with the owner's name in
// an annotation when it is too long for a label, see
// labels.OwnerAnnotations).
func (j *Client) SetOwnership(obj client.Object) error {
	j.noteChild()
	l := obj.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	maps.Copy(l, labels.Owner(j.owner, j.ownerGVK.Kind))
	obj.SetLabels(l)
	if a := labels.OwnerAnnotations(j.owner); a != nil {
		have := obj.GetAnnotations()
		if have == nil {
			have = map[string]string{}
		}
		maps.Copy(have, a)
		obj.SetAnnotations(have)
	}
	if j.canReference(obj) {
		if err := controllerutil.SetControllerReference(j.owner, obj, j.Scheme()); err != nil {
			return fmt.Errorf("owner reference on %s: %w", obj.GetName(), err)
		}
	}
	return nil
}

// canReference reports whether Kubernetes accepts an owner reference from
// obj to the owner: a namespaced owner can only own children in its namespace.
func (j *Client) canReference(obj client.Object) bool {
	if j.owner.GetNamespace() == "" {
		return true
	}
	return obj.GetNamespace() == j.owner.GetNamespace()
}

// Owns reports whether obj is a child of the owner: its controller reference
// names the owner's UID where Kubernetes allows one (a cluster-scoped
// owner, or a child in the owner's namespace: a reference across
// namespaces means nothing to Kubernetes, and anyone may write one), or its
// owner labels parse exactly to the owner:
// its UID, kind, namespace and name (the name from the annotation where a
// label cannot hold it), all of which SetOwnership writes. A UID label
// alone, which anyone who may label the object can copy, does not make it
// a child, nor do labels that pair the owner's UID with another owner's
// namespace or name.
func (j *Client) Owns(obj client.Object) bool {
	uid := j.owner.GetUID()
	if ref := metav1.GetControllerOf(obj); ref != nil && ref.UID == uid && j.canReference(obj) {
		return true
	}
	key, named, ok := labels.OwnerOfObject(obj, j.ownerGVK.Kind)
	return ok && named == uid && key == types.NamespacedName{Namespace: j.owner.GetNamespace(), Name: j.owner.GetName()}
}

// Marked reports whether obj already carries what a write through j would
// put on it: the owner labels (and annotations), the owner's controller reference where
// Kubernetes allows one, and j's environment label. A child that is not
// marked needs a write even when the rest of it is as desired.
func (j *Client) Marked(obj client.Object) bool {
	have := obj.GetLabels()
	for k, v := range labels.Owner(j.owner, j.ownerGVK.Kind) {
		if have[k] != v {
			return false
		}
	}
	if have[labels.Environment] != j.Environment() {
		return false
	}
	for k, v := range labels.OwnerAnnotations(j.owner) {
		if obj.GetAnnotations()[k] != v {
			return false
		}
	}
	if j.canReference(obj) {
		ref := metav1.GetControllerOf(obj)
		return ref != nil && ref.UID == j.owner.GetUID()
	}
	return true
}

// NotOwnedError is an object in the way of a child: it has the child's name
// and is not the owner's (Owns), so it is never adopted, changed or deleted.
type NotOwnedError struct {
	// Kind and Key name the object in the way.
	Kind string
	Key  client.ObjectKey
	// Owner names the owner, as "Kind namespace/name".
	Owner string
}

// Error implements error.
func (e *NotOwnedError) Error() string {
	return fmt.Sprintf("%s %s exists and is not a child of %s; it is left untouched", e.Kind, keyString(e.Key), e.Owner)
}

func keyString(k client.ObjectKey) string {
	if k.Namespace == "" {
		return k.Name
	}
	return k.String()
}

// kindOf returns obj's kind, from the scheme or, for an unstructured
// object, its own.
func (j *Client) kindOf(obj client.Object) string {
	if gvk, err := apiutil.GVKForObject(obj, j.Scheme()); err == nil {
		return gvk.Kind
	}
	return obj.GetObjectKind().GroupVersionKind().Kind
}

// notOwned returns the NotOwnedError of obj.
func (j *Client) notOwned(obj client.Object) error {
	return &NotOwnedError{Kind: j.kindOf(obj), Key: client.ObjectKeyFromObject(obj),
		Owner: j.ownerGVK.Kind + " " + keyString(client.ObjectKeyFromObject(j.owner))}
}

// Claim reads the object key names into obj and tells whether the owner
// may write it: found is false when no object of that name exists, and an
// object the owner does not own returns a *NotOwnedError. Call it before
// writing a child under a name fixed in advance, so that an object someone
// else created under that name is never taken over. It reads through the
// client j was built on, in every environment, so a child written while
// the owner carried another environment label is found (and an Update
// moves it into j's environment) and another environment's object of that
// name is in the way.
func (j *Client) Claim(ctx context.Context, key client.ObjectKey, obj client.Object) (found bool, err error) {
	err = j.readOwned(ctx, j.Client.Client, key, obj)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	var notOwned *NotOwnedError
	return err == nil || errors.As(err, &notOwned), err
}

// CreateOrUpdate creates or updates obj as an owned child and records it.
// An object of obj's name that the owner does not own, in any environment,
// is left as it is, and a *NotOwnedError returned. The owner's own child
// written while the owner carried another environment label (which j's
// environment does not see) is updated into j's environment, as Update
// moves it.
func (j *Client) CreateOrUpdate(ctx context.Context, obj client.Object, mutate controllerutil.MutateFn) (controllerutil.OperationResult, error) {
	res, err := j.createOrUpdate(ctx, obj, mutate)
	if err == nil {
		j.record(obj)
	} else {
		j.noteChild()
	}
	return res, err
}

// createOrUpdate reads the object of obj's name once, in every environment
// (Claim), and creates obj or updates the owner's child over the version
// read, with the environment label; an update moves a child written under
// another environment into j's.
func (j *Client) createOrUpdate(ctx context.Context, obj client.Object, mutate controllerutil.MutateFn) (controllerutil.OperationResult, error) {
	key := client.ObjectKeyFromObject(obj)
	cur, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return controllerutil.OperationResultNone, fmt.Errorf("%s %s is no client.Object", j.kindOf(obj), keyString(key))
	}
	found, err := j.Claim(ctx, key, cur)
	if err != nil {
		return controllerutil.OperationResultNone, err
	}
	if found {
		// The owner's child, as read: mutate it (a read that found nothing
		// leaves obj as the caller built it).
		reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(cur).Elem())
	}
	before := obj.DeepCopyObject()
	if err := mutate(); err != nil {
		return controllerutil.OperationResultNone, err
	}
	if client.ObjectKeyFromObject(obj) != key {
		return controllerutil.OperationResultNone, fmt.Errorf("the mutate function changed the name of %s %s", j.kindOf(obj), keyString(key))
	}
	if err := j.SetOwnership(obj); err != nil {
		return controllerutil.OperationResultNone, err
	}
	if !found {
		return controllerutil.OperationResultCreated, j.Client.Create(ctx, obj)
	}
	j.Label(obj)
	if equality.Semantic.DeepEqual(before, obj) {
		return controllerutil.OperationResultNone, nil
	}
	return controllerutil.OperationResultUpdated, j.Client.Update(ctx, obj)
}

// Create creates obj as an owned child and records it.
func (j *Client) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if err := j.SetOwnership(obj); err != nil {
		return err
	}
	if err := j.Client.Create(ctx, obj, opts...); err != nil {
		j.noteChild()
		return err
	}
	j.record(obj)
	return nil
}

// Update updates obj as an owned child and records it. An object of obj's
// name that the owner does not own is left as it is and a *NotOwnedError
// returned, as by CreateOrUpdate; when obj carries no resourceVersion, the
// update is made over the version found owned, so an object put in the
// child's place meanwhile makes it conflict rather than be taken over.
func (j *Client) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	rv, err := j.ownedVersion(ctx, obj)
	if err != nil {
		return err
	}
	if obj.GetResourceVersion() == "" {
		obj.SetResourceVersion(rv)
	}
	if err := j.SetOwnership(obj); err != nil {
		return err
	}
	if err := j.Client.Update(ctx, obj, opts...); err != nil {
		j.noteChild()
		return err
	}
	j.record(obj)
	return nil
}

// Patch patches obj as an owned child and records it. An object of obj's
// name that the owner does not own is left as it is and a
// *NotOwnedError returned, as by Update. Limit: a patch carries no
// precondition of its own, so an object put in the child's place between
// that read and the patch is patched; use Update, or a patch with an
// optimistic lock (client.MergeFromWithOptimisticLock), to rule that out.
func (j *Client) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if _, err := j.ownedVersion(ctx, obj); err != nil {
		return err
	}
	if err := j.SetOwnership(obj); err != nil {
		return err
	}
	if err := j.Client.Patch(ctx, obj, patch, opts...); err != nil {
		j.noteChild()
		return err
	}
	j.record(obj)
	return nil
}

// ownedVersion reads the object of obj's name, in every environment as
// Claim does, and returns its resourceVersion when the owner owns it; an
// object the owner does not own is a *NotOwnedError (and a noted child
// write). None of that name returns "", nil: the write then fails as it
// would.
func (j *Client) ownedVersion(ctx context.Context, obj client.Object) (string, error) {
	cur, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return "", fmt.Errorf("%s %s is no client.Object", j.kindOf(obj), keyString(client.ObjectKeyFromObject(obj)))
	}
	found, err := j.Claim(ctx, client.ObjectKeyFromObject(obj), cur)
	if err != nil {
		j.noteChild()
		return "", err
	}
	if !found {
		return "", nil
	}
	return cur.GetResourceVersion(), nil
}

// Keep records obj as touched without writing it: use it for children that
// are already in their desired state.
func (j *Client) Keep(obj client.Object) { j.record(obj) }

func (j *Client) record(obj client.Object) {
	j.noteChild()
	gvk, err := apiutil.GVKForObject(obj, j.Scheme())
	if err != nil {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.touched[childKey{gvk: gvk, namespace: obj.GetNamespace(), name: obj.GetName()}] = struct{}{}
}

// noteChild records that the owner has a child this reconcile marked or
// kept, so that no Withdraw trusts an earlier confirmation of its absence:
// before a write and again when it returns, failed or not (a write that
// failed on the client's side may have landed, after a confirming read
// that began before it returned).
func (j *Client) noteChild() {
	j.mu.Lock()
	j.marked = true
	j.mu.Unlock()
	if j.gone != nil {
		j.gone.wrote(client.ObjectKeyFromObject(j.owner))
	}
}

// Cleanup deletes the owned children of the declared types that this
// reconcile did not touch, and returns how many it deleted.
func (j *Client) Cleanup(ctx context.Context) (int, error) {
	deleted, _, err := j.cleanup(ctx, false)
	return deleted, err
}

// Withdraw declares types, so that every owned child of them that this
// reconcile did not touch goes, and reports whether the children of the Live
// types are confirmed gone: after deleting what it saw, a second uncached
// read saw none. A Live child still being deleted (a finalizer holds it) is
// confirmed gone by a later call. Children of other types are deleted
// without confirmation.
//
// With WithConfirmedGone, a Withdraw that confirms the Live children gone
// remembers it, and a later one for the same owner and Live types trusts
// that while the cache shows none of them either: it reads no more
// uncached. Marking or keeping a child ends that trust.
func (j *Client) Withdraw(ctx context.Context, types ...ChildType) (gone bool, err error) {
	if err := j.DeclareTypes(types...); err != nil {
		return false, err
	}
	key, uid, kinds := client.ObjectKeyFromObject(j.owner), j.owner.GetUID(), j.liveKinds()
	if j.trustsConfirmation(key, uid, kinds) {
		_, seen, err := j.cleanup(ctx, false)
		if err != nil || seen == 0 {
			return err == nil, err
		}
		// The cache shows a child after all: read uncached again.
		j.gone.doubt(key)
	}
	var writes uint64
	if j.gone != nil {
		writes = j.gone.writesOf(key)
	}
	_, seen, err := j.cleanup(ctx, true)
	if err == nil && seen > 0 {
		// Children were seen and deleted: a fresh uncached read confirms
		// whether they are gone already (no finalizer held them).
		_, seen, err = j.cleanup(ctx, true)
	}
	if err != nil {
		return false, err
	}
	if seen == 0 {
		j.rememberConfirmation(key, uid, kinds, writes)
	}
	return seen == 0, nil
}

// WithdrawAll is Withdraw of the children of types this reconcile wrote
// or kept as well: for a pass that fails after writing some children and
// must keep none. A reconcile that calls it remembers no confirmation (it
// wrote a child).
func (j *Client) WithdrawAll(ctx context.Context, types ...ChildType) (gone bool, err error) {
	given := make(map[schema.GroupVersionKind]bool, len(types))
	for _, t := range types {
		gvk, err := j.childKind(t)
		if err != nil {
			return false, fmt.Errorf("withdraw type: %w", err)
		}
		given[gvk] = true
	}
	j.mu.Lock()
	for k := range j.touched {
		if given[k.gvk] {
			delete(j.touched, k)
		}
	}
	j.mu.Unlock()
	return j.Withdraw(ctx, types...)
}

// liveKinds names the Live types declared so far (see liveKinds).
func (j *Client) liveKinds() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return liveKinds(j.declared)
}

// trustsConfirmation reports whether an earlier Withdraw confirmed the
// owner's Live children of kinds gone and this reconcile has marked or
// kept no child since.
func (j *Client) trustsConfirmation(key client.ObjectKey, uid types.UID, kinds string) bool {
	j.mu.Lock()
	marked := j.marked
	j.mu.Unlock()
	return j.gone != nil && j.live != nil && !marked && j.gone.confirmed(key, uid, kinds)
}

// rememberConfirmation records the confirmation of a read that began after
// writes writes of the owner's children, unless this reconcile marked or
// kept a child (a touched child is not counted by cleanup, so the owner
// still has it) or another janitor of the owner wrote one since.
func (j *Client) rememberConfirmation(key client.ObjectKey, uid types.UID, kinds string, writes uint64) {
	j.mu.Lock()
	marked := j.marked
	j.mu.Unlock()
	if j.gone != nil && j.live != nil && !marked && kinds != "" {
		j.gone.remember(key, uid, kinds, writes)
	}
}

// cleanup deletes the untouched owned children of the declared types. It
// returns how many it deleted and how many untouched owned children of Live
// types it saw, those already being deleted included. Live types are read
// in every environment; with confirm, uncached (the live reader).
func (j *Client) cleanup(ctx context.Context, confirm bool) (deleted, seen int, err error) {
	j.mu.Lock()
	declared := make(map[schema.GroupVersionKind]ChildType, len(j.declared))
	for k, v := range j.declared {
		declared[k] = v
	}
	j.mu.Unlock()

	owned := client.MatchingLabels{labels.OwnerUID: string(j.owner.GetUID())}
	for gvk, t := range declared {
		list := t.List.DeepCopyObject().(client.ObjectList)
		// Children are read in every environment (a child written while
		// the owner carried another environment label is stale once this
		// pass did not write it) and deleted through the unscoped client;
		// the owner's UID and kind (Owns) and the preconditions keep the
		// delete to this owner's children (below). A Live type is read
		// uncached when its absence is to be confirmed.
		var reader client.Reader = j.Client.Client
		writer := j.Client.Client
		if t.Live && confirm && j.live != nil {
			reader = j.live
		}
		if err := reader.List(ctx, list, owned); err != nil {
			return deleted, seen, fmt.Errorf("list %s owned by %s: %w", gvk.Kind, j.owner.GetName(), err)
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return deleted, seen, fmt.Errorf("extract %s list: %w", gvk.Kind, err)
		}
		for _, item := range items {
			child, ok := item.(client.Object)
			if !ok || !j.Owns(child) || j.wasTouched(gvk, child) {
				continue
			}
			if child.GetDeletionTimestamp() != nil {
				// Its deletion was accepted. A child of a namespaced
				// owner in another namespace, where whoever may write
				// objects there can forge one and hold it with any
				// finalizer, ours by name included (a finalizer is a
				// string anyone may put on their own object), is not
				// waited for.
				if t.Live && (child.GetNamespace() == "" || j.canReference(child)) {
					seen++
				}
				continue
			}
			if t.Live {
				seen++
			}
			// Preconditioned on the version listed: a child changed since
			// (a tenant who stripped its owner labels and made it theirs,
			// say, while the cache still shows it owned) conflicts, and the
			// next pass judges it again.
			swept, err := j.sweep(ctx, gvk, writer, child)
			if err != nil {
				return deleted, seen, fmt.Errorf("delete stale %s %s: %w", gvk.Kind, client.ObjectKeyFromObject(child), err)
			}
			if swept {
				deleted++
			}
		}
	}
	return deleted, seen, nil
}

// sweep deletes child, a stale child as listed, preconditioned on the UID
// and resourceVersion listed. When it changed since (the list came from a
// cache that lags behind a write, the operator's own included), it is read
// again, uncached where the janitor has a live reader, judged again (still
// the owner's, still not written by this pass) and deleted over the version
// read. It reports whether a delete was sent.
func (j *Client) sweep(ctx context.Context, gvk schema.GroupVersionKind, writer client.Writer, child client.Object) (bool, error) {
	uid, rv := child.GetUID(), child.GetResourceVersion()
	err := writer.Delete(ctx, child, client.Preconditions{UID: &uid, ResourceVersion: &rv})
	if !apierrors.IsConflict(err) {
		return err == nil, client.IgnoreNotFound(err)
	}
	fresh, ok := child.DeepCopyObject().(client.Object)
	if !ok {
		return false, err
	}
	switch rerr := j.liveReader().Get(ctx, client.ObjectKeyFromObject(child), fresh); {
	case apierrors.IsNotFound(rerr):
		return false, nil
	case rerr != nil:
		return false, rerr
	}
	if fresh.GetUID() != uid || !j.Owns(fresh) || j.wasTouched(gvk, fresh) || fresh.GetDeletionTimestamp() != nil {
		return false, nil
	}
	rv = fresh.GetResourceVersion()
	err = writer.Delete(ctx, fresh, client.Preconditions{UID: &uid, ResourceVersion: &rv})
	return err == nil, client.IgnoreNotFound(err)
}

func (j *Client) wasTouched(gvk schema.GroupVersionKind, obj client.Object) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	_, ok := j.touched[childKey{gvk: gvk, namespace: obj.GetNamespace(), name: obj.GetName()}]
	return ok
}

type contextKey struct{}

// IntoContext returns a context carrying j; the Controller does this before
// it calls the Handler.
func IntoContext(ctx context.Context, j *Client) context.Context {
	return context.WithValue(ctx, contextKey{}, j)
}

// FromContext returns the Client the Controller put into ctx, or nil.
func FromContext(ctx context.Context) *Client {
	j, _ := ctx.Value(contextKey{}).(*Client)
	return j
}
