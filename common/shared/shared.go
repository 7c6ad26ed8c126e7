// Package shared writes children that several writers may share, with
// server-side apply under one field manager (a ConfigMap that holds one
// key of ours beside others' keys, say). An object is written over only
// where it is ours, released by dropping exactly the fields our manager
// owns, and deleted only when no other writer manages a field of it, so an
// object the operator did not create is never taken over or deleted. Which
// owner holds an object is for the caller to tell, by its owner labels:
// every owner writes with the same field manager, so server-side apply
// itself sees no conflict between two of them.
package shared

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CreateOnly is the resourceVersion that makes a server-side apply create
// its object and fail with a conflict where one exists: no object holds it,
// since the first write to etcd is its revision 2.
const CreateOnly = "1"

// ErrLeftInPlace marks a release that could not take our fields out of a
// shared object, or delete it, for what another writer put in it: the API
// server's validation refuses the object without our fields (it is
// immutable, a ConfigMap or Secret whose other writer set immutable, or a
// field only we own is required), or one of the writer's own admission
// policies (Writer.Policies) refuses the release for the object's state
// (a key another writer listed as ours, say). A refusal by any other
// admission policy or webhook, which may be lifted, is a plain error. The
// object is left as it is. Callers report it and go on: whoever may edit
// one object must not be able to hold up the release of all the others, or
// the deletion of their owner.
var ErrLeftInPlace = errors.New("left in place")

// Writer writes shared children as one field manager.
type Writer struct {
	// Client applies and deletes.
	Client client.Client
	// FieldManager is the operator's server-side apply field manager.
	FieldManager string
	// Policies names the ValidatingAdmissionPolicies that hold the
	// writer's account to its own fields of the objects it writes (such
	// as bundle-operator's target policy). Such a policy refuses a release
	// only for what the object holds, which someone else wrote and which
	// no retry changes, so its refusal of a release is ErrLeftInPlace.
	// Each of its validations must give reason Forbidden: that tells a
	// judgement of the object from the policy failing to judge (see
	// RefusedByOwnPolicy).
	Policies []string
}

// Apply server-side applies obj. With force it takes over fields other
// writers own: use it only for an object that is ours, to repair a hand
// edit. Without, an object whose writers own one of obj's fields is left
// untouched and the API server's conflict is returned
// (apierrors.IsConflict); so it is for a CreateOnly write that meets an
// existing object. More options (client.DryRunAll, say) are passed on.
func (w Writer) Apply(ctx context.Context, obj *unstructured.Unstructured, force bool, more ...client.ApplyOption) error {
	opts := []client.ApplyOption{client.FieldOwner(w.FieldManager)}
	if force {
		opts = append(opts, client.ForceOwnership)
	}
	return w.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), append(opts, more...)...)
}

// Shared reports whether a writer other than ours manages a field of the
// object whose managed fields are entries. We write only by server-side
// apply, so an entry of our manager's name from another operation (an
// update by a client that gave our name, kubectl patch --field-manager)
// is another writer's.
func (w Writer) Shared(entries []metav1.ManagedFieldsEntry) bool {
	for _, e := range entries {
		if e.Manager != w.FieldManager || e.Operation != metav1.ManagedFieldsOperationApply {
			return true
		}
	}
	return false
}

// Wrote reports whether our field manager manages a field of the object
// whose managed fields are entries.
func (w Writer) Wrote(entries []metav1.ManagedFieldsEntry) bool {
	for _, e := range entries {
		if e.Manager == w.FieldManager {
			return true
		}
	}
	return false
}

// Release takes our fields out of the object m describes (its kind set in
// m's TypeMeta). An object no other writer manages a field of is deleted,
// preconditioned on its UID and resourceVersion, so a concurrent edit wins;
// a shared one gets an empty apply, which drops exactly the fields our
// manager owned and leaves the rest. A shared object that would not be
// valid without our fields (immutable, or a required field only we own),
// or whose release one of w.Policies refuses, is left as it is, and the API
// server's error returned wrapped in ErrLeftInPlace. An object our manager
// manages no field of holds nothing of ours, whatever its labels say: it is
// left as it is, without a write and without an error, so that whoever
// labels their own object as ours can neither have it deleted nor make a
// release fail. (Whoever may patch an object can also forge an Apply
// entry of our manager; that is not told apart.) It returns the
// resourceVersion the cache will reach with this write, for expectations.
func (w Writer) Release(ctx context.Context, m *metav1.PartialObjectMetadata) (string, error) {
	gvk := m.GroupVersionKind()
	if gvk.Kind == "" {
		return "", fmt.Errorf("release %s/%s: the object's kind is not set", m.Namespace, m.Name)
	}
	if !w.Wrote(m.ManagedFields) {
		// Nothing of ours to take out: someone else put our label on it,
		// or wiped its managed fields.
		return m.ResourceVersion, nil
	}
	if w.Shared(m.ManagedFields) {
		empty := &unstructured.Unstructured{}
		empty.SetGroupVersionKind(gvk)
		empty.SetNamespace(m.Namespace)
		empty.SetName(m.Name)
		// The UID read makes the apply a precondition: an apply of a name
		// that no longer exists would create it (empty, holding nothing of
		// ours, so never released again), and one of an object replaced
		// since would take fields of an object we never wrote to.
		empty.SetUID(m.UID)
		err := w.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(empty), client.FieldOwner(w.FieldManager), client.ForceOwnership)
		switch {
		case apierrors.IsConflict(err):
			return "", fmt.Errorf("%w: %s/%s was deleted or replaced since it was read: %w", ErrChangedSinceRead, m.Namespace, m.Name, err)
		case RefusedByFieldValidation(err):
			return "", fmt.Errorf("%w: the API server refuses it without our fields (it is immutable, or needs a field only we own) and another writer manages a field of it: %w", ErrLeftInPlace, err)
		case w.RefusedByOwnPolicy(err):
			return "", fmt.Errorf("%w: our admission policy refuses to drop our fields for what another writer put in it: %w", ErrLeftInPlace, err)
		case err != nil:
			return "", fmt.Errorf("drop our fields: %w", err)
		}
		return empty.GetResourceVersion(), nil
	}
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(gvk)
	obj.SetNamespace(m.Namespace)
	obj.SetName(m.Name)
	uid, rv := m.UID, m.ResourceVersion
	err := client.IgnoreNotFound(w.Client.Delete(ctx, obj, client.Preconditions{UID: &uid, ResourceVersion: &rv}))
	switch {
	case w.RefusedByOwnPolicy(err):
		return "", fmt.Errorf("%w: our admission policy refuses to delete it for what another writer put in it: %w", ErrLeftInPlace, err)
	case err != nil:
		return "", fmt.Errorf("delete: %w", err)
	}
	// The delete event carries a newer resourceVersion than rv.
	return nextRV(rv), nil
}

// ErrChangedSinceRead reports a release of an object deleted or replaced
// (another UID) since the read it was given: nothing of it is written;
// the next read shows what there is to release.
var ErrChangedSinceRead = errors.New("the object changed since it was read")

// RefusedByFieldValidation reports whether err is the API server's
// validation of the object's fields refusing a write: a field that is
// immutable (a ConfigMap or Secret with immutable set), one that is
// required, one whose value is not valid without ours. A refusal by an
// admission policy or webhook, which names no field and may be lifted,
// is not one: it stays a failure to retry.
func RefusedByFieldValidation(err error) bool {
	var se apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &se) || se.Status().Details == nil {
		return false
	}
	for _, c := range se.Status().Details.Causes {
		if c.Field != "" && strings.HasPrefix(string(c.Type), "FieldValue") {
			return true
		}
	}
	return false
}

// RefusedByOwnPolicy reports whether err is one of w.Policies judging the
// object: a validation of the policy failing, with reason Forbidden. The
// API server names the denying policy at the start of the cause it adds to
// the status ("ValidatingAdmissionPolicy '<name>' ... denied request:
// <message>"), so a name the object's content puts later in the message
// (a quoted annotation, say) is not taken for it. A policy that cannot
// judge (its binding's parameters missing, an expression that fails) gives
// no reason, which the API server turns into Invalid: that is lifted once
// it is fixed, and stays a failure to retry. So every validation of a
// policy in Policies must give reason Forbidden.
func (w Writer) RefusedByOwnPolicy(err error) bool {
	var se apierrors.APIStatus
	if len(w.Policies) == 0 || !errors.As(err, &se) {
		return false
	}
	status := se.Status()
	if status.Reason != metav1.StatusReasonForbidden || status.Details == nil {
		return false
	}
	for _, c := range status.Details.Causes {
		for _, p := range w.Policies {
			if strings.HasPrefix(c.Message, "ValidatingAdmissionPolicy '"+p+"' ") {
				return true
			}
		}
	}
	return false
}

// nextRV returns the resourceVersion after rv, or rv when it is not numeric.
func nextRV(rv string) string {
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return rv
	}
	return strconv.FormatUint(n+1, 10)
}
