package boundary

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Policies returns the names of the ValidatingAdmissionPolicies the
// boundary rests on; config/policy binds each with a binding of the same
// name.
func Policies() []string {
	return []string{
		"identity-boundary.trustplane.dev",
		"identity-boundary-immutable.trustplane.dev",
		"identity-boundary-workloads.trustplane.dev",
	}
}

// Read reads each policy of Policies and its binding through r (uncached:
// the operator may get them by name only) and returns why the boundary is
// not in force, naming every policy or binding that is missing or does not
// deny, or "" when it is. An error is a read that failed for another
// reason than absence (RBAC, the API server), which says nothing either
// way.
func Read(ctx context.Context, r client.Reader) (string, error) {
	var problems []string
	for _, name := range Policies() {
		p := &admissionregistrationv1.ValidatingAdmissionPolicy{}
		if err := r.Get(ctx, client.ObjectKey{Name: name}, p); err != nil {
			if !apierrors.IsNotFound(err) {
				return "", fmt.Errorf("read ValidatingAdmissionPolicy %s: %w", name, err)
			}
			problems = append(problems, "policy "+name+" is not installed")
			continue
		}
		b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
		if err := r.Get(ctx, client.ObjectKey{Name: name}, b); err != nil {
			if !apierrors.IsNotFound(err) {
				return "", fmt.Errorf("read ValidatingAdmissionPolicyBinding %s: %w", name, err)
			}
			problems = append(problems, "binding "+name+" is not installed")
			continue
		}
		switch {
		case b.Spec.PolicyName != name:
			problems = append(problems, fmt.Sprintf("binding %s binds policy %q, not %s", name, b.Spec.PolicyName, name))
		case !slices.Contains(b.Spec.ValidationActions, admissionregistrationv1.Deny):
			problems = append(problems, fmt.Sprintf("binding %s does not deny (validationActions %v)", name, b.Spec.ValidationActions))
		}
	}
	return strings.Join(problems, "; "), nil
}

// State is what the operator last read of the policies, shared by the
// runnable that reads them and the handler that reports them.
type State struct {
	mu    sync.Mutex
	known bool
	why   string
}

// Set records a successful read (why as Read returns it) and reports
// whether it changed what was known.
func (s *State) Set(why string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := !s.known || s.why != why
	s.known, s.why = true, why
	return changed
}

// Get returns why the boundary is not in force ("" when it is) and whether
// any read has succeeded yet; a nil State knows nothing.
func (s *State) Get() (why string, known bool) {
	if s == nil {
		return "", false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.why, s.known
}
