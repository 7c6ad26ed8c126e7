// Package labels holds the label, annotation and finalizer names that every
// Trustplane operator agrees on (see docs/architecture.md).
package labels

import (
	"maps"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

const (
	// Environment is the label that scopes an object to one environment.
	// The Controller refuses to reconcile an object without it unless a
	// default environment is configured.
	Environment = "trustplane.dev/environment"

	// OwnerUID, OwnerKind, OwnerName and OwnerNamespace mark a child that
	// cannot carry an owner reference (a cross-namespace or cluster-scoped
	// child of a namespaced owner). JanitorClient recognises children by them.
	OwnerUID = "trustplane.dev/owner-uid"
	// OwnerKind is the kind of the owner of a cross-scope child.
	OwnerKind = "trustplane.dev/owner-kind"
	// OwnerName is the name of the owner of a cross-scope child.
	OwnerName = "trustplane.dev/owner-name"
	// OwnerNamespace is the namespace of the owner of a cross-scope child
	// (empty for cluster-scoped owners).
	OwnerNamespace = "trustplane.dev/owner-namespace"
	// OwnerNameAnnotation is the annotation that holds the name of the
	// owner of a cross-scope child when that name is no valid label value
	// (a namespaced object's name may be 253 characters long, a label value
	// 63), so the OwnerName label cannot.
	OwnerNameAnnotation = "trustplane.dev/owner-name"

	// Finalizer is the finalizer the Controller puts on every object it
	// reconciles, so that Handler.Delete runs before the object goes.
	Finalizer = "trustplane.dev/finalizer"
)

// Owner returns the owner labels of a child of owner, a kind object: its
// UID, kind, name (left out when the name is no valid label value) and, for
// a namespaced owner, namespace. A child that cannot carry an owner
// reference, or must not (a shared object, which garbage collection would
// delete with others' fields), is known by them.
func Owner(owner metav1.Object, kind string) map[string]string {
	l := map[string]string{OwnerUID: string(owner.GetUID()), OwnerKind: kind}
	if len(validation.IsValidLabelValue(owner.GetName())) == 0 {
		l[OwnerName] = owner.GetName()
	}
	if ns := owner.GetNamespace(); ns != "" {
		l[OwnerNamespace] = ns
	}
	return l
}

// OwnerAnnotations returns the annotations a child of owner carries beside
// its Owner labels: the owner's name under OwnerNameAnnotation when Owner
// leaves it out, nil otherwise.
func OwnerAnnotations(owner metav1.Object) map[string]string {
	if len(validation.IsValidLabelValue(owner.GetName())) == 0 {
		return nil
	}
	return map[string]string{OwnerNameAnnotation: owner.GetName()}
}

// OwnerOfObject is OwnerOf for a child object: where its labels leave the
// owner's name out, the name comes from OwnerNameAnnotation (see
// OwnerAnnotations), so the owner of a long name is named all the same.
func OwnerOfObject(o metav1.Object, kind string) (key types.NamespacedName, uid types.UID, ok bool) {
	l := o.GetLabels()
	if _, named := l[OwnerName]; !named {
		if name := o.GetAnnotations()[OwnerNameAnnotation]; name != "" {
			named := make(map[string]string, len(l)+1)
			maps.Copy(named, l)
			named[OwnerName] = name
			l = named
		}
	}
	return OwnerOf(l, kind)
}

// OwnerOf reads back the owner that Owner labelled l with, when l names an
// owner of kind by UID and name (and namespace, where the owner has one):
// key is the owner's namespace and name. Labels that name another kind, or
// leave out the UID or the name, name no owner, so ok is false.
func OwnerOf(l map[string]string, kind string) (key types.NamespacedName, uid types.UID, ok bool) {
	key = types.NamespacedName{Namespace: l[OwnerNamespace], Name: l[OwnerName]}
	uid = types.UID(l[OwnerUID])
	return key, uid, l[OwnerKind] == kind && uid != "" && key.Name != ""
}
