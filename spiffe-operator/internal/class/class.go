// Package class decides which SpiffeRegistrations, SpiffeEntries and
// SpiffeFederations an operator instance takes when several share a
// cluster (--class-name, --watch-classless).
package class

import (
	"fmt"
	"regexp"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// Filter is one instance's class settings.
type Filter struct {
	// Name is the instance's class name; empty for the classless instance.
	Name string
	// Classless makes an instance with a class name also take objects
	// without one.
	Classless bool
}

// namePattern is the pattern of spec.className in the CRDs.
var namePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)

// ValidName returns an error unless name (not empty) is a class name an
// object can have: spec.className admits at most 63 lowercase letters,
// digits, '-' and '.', starting and ending with a letter or digit. An
// instance of another class would take no object at all.
func ValidName(name string) error {
	if len(name) > 63 || !namePattern.MatchString(name) {
		return fmt.Errorf("%q is no class name an object can have: want at most 63 lowercase letters, digits, '-' or '.', starting and ending with a letter or digit", name)
	}
	return nil
}

// Takes reports whether the instance takes an object of class className.
func (f Filter) Takes(className string) bool {
	if className == "" {
		return f.Name == "" || f.Classless
	}
	return className == f.Name
}

// Of returns the class name of a SpiffeRegistration, SpiffeEntry or
// SpiffeFederation; ok is false for other objects.
func Of(obj client.Object) (name string, ok bool) {
	switch o := obj.(type) {
	case *v1alpha1.SpiffeRegistration:
		return o.Spec.ClassName, true
	case *v1alpha1.SpiffeEntry:
		return o.Spec.ClassName, true
	case *v1alpha1.SpiffeFederation:
		return o.Spec.ClassName, true
	}
	return "", false
}

// TakesObject reports whether the instance takes obj; objects of other
// kinds pass.
func (f Filter) TakesObject(obj client.Object) bool {
	name, ok := Of(obj)
	return !ok || f.Takes(name)
}

// Predicate passes the events of the objects the instance takes. An update
// passes when either version is taken (the class cannot change, but an
// object stored before that rule might have).
func (f Filter) Predicate() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return f.TakesObject(e.Object) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return f.TakesObject(e.Object) },
		GenericFunc: func(e event.GenericEvent) bool { return f.TakesObject(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return f.TakesObject(e.ObjectOld) || f.TakesObject(e.ObjectNew)
		},
	}
}
