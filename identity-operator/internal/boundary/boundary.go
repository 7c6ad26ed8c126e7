package boundary

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
)

// Policies returns the names of the ValidatingAdmissionPolicies the
// boundary rests on; config/policy binds each with a binding of the same
// name.
func Policies() []string {
	return []string{podsPolicy, immutablePolicy, workloadsPolicy}
}

const (
	podsPolicy      = "identity-boundary.trustplane.dev"
	immutablePolicy = "identity-boundary-immutable.trustplane.dev"
	workloadsPolicy = "identity-boundary-workloads.trustplane.dev"
	// ParamsName is the parameter ConfigMap of the pods and workloads
	// policies.
	ParamsName = "identity-boundary-admission"
)

// Read reads each policy of Policies and its binding through r (uncached:
// the operator may get them by name only) and returns why the boundary is
// not in force, or "" when nothing it checks says so. It names every
// policy or binding that is missing, fails open (failurePolicy Ignore),
// binds another policy, does not deny, leaves out namespaces or resources,
// or reads its parameters from anywhere but one ConfigMap
// identity-boundary-admission of a fixed namespace, refusing when it is
// missing. It does not compare the policies' rules with the shipped ones:
// whoever may edit a policy decides what it checks. An error is a read
// that failed for another reason than absence (RBAC, the API server),
// which says nothing either way.
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
		if fp := p.Spec.FailurePolicy; fp != nil && *fp != admissionregistrationv1.Fail {
			problems = append(problems, fmt.Sprintf("policy %s fails open (failurePolicy %s)", name, *fp))
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
		problems = append(problems, scopeProblems(name, b.Spec.MatchResources)...)
		if name != immutablePolicy {
			problems = append(problems, paramProblems(name, b.Spec.ParamRef)...)
		}
	}
	return strings.Join(problems, "; "), nil
}

// State is what the operator last read of the policies, shared by the
// runnable that reads them and the handler that reports them.
type State struct {
	mu sync.Mutex
	r  Reading
}

// Reading is what State knows.
type Reading struct {
	// Known is set once a read succeeded or the reads have failed for a
	// while.
	Known bool
	// Why the boundary is not in force; "" when it is (see Read).
	Why string
	// Unreadable, when set, is why the policies could not be read for
	// several intervals in a row: nothing is known either way.
	Unreadable string
}

// Set records a successful read (why as Read returns it) and reports
// whether it changed what was known.
func (s *State) Set(why string) bool {
	return s.set(Reading{Known: true, Why: why})
}

// SetUnreadable records that the policies could not be read for a while
// (why) and reports whether that changed what was known. While they stay
// unreadable the first reason stands, so errors worded differently from
// one read to the next change nothing.
func (s *State) SetUnreadable(why string) bool {
	if why == "" {
		// An empty reason would read as "in force".
		why = "the read failed"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.r.Unreadable != "" {
		return false
	}
	s.r = Reading{Known: true, Unreadable: why}
	return true
}

func (s *State) set(r Reading) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := s.r != r
	s.r = r
	return changed
}

// Get returns what is known; a nil State knows nothing.
func (s *State) Get() Reading {
	if s == nil {
		return Reading{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.r
}

// scopeProblems names what the binding of policy name leaves out: a
// namespace selector (tenants may be able to set the labels it reads),
// resource rules, and an object selector but the one config/policy gives
// the pods policy (labelled pods only).
func scopeProblems(name string, m *admissionregistrationv1.MatchResources) []string {
	if m == nil {
		return nil
	}
	var out []string
	if !emptySelector(m.NamespaceSelector) {
		out = append(out, fmt.Sprintf("binding %s leaves out namespaces (namespaceSelector)", name))
	}
	if len(m.ResourceRules) > 0 || len(m.ExcludeResourceRules) > 0 {
		out = append(out, fmt.Sprintf("binding %s narrows or excludes resources", name))
	}
	if !emptySelector(m.ObjectSelector) && (name != podsPolicy || !labelledOnly(m.ObjectSelector)) {
		out = append(out, fmt.Sprintf("binding %s leaves out objects (objectSelector)", name))
	}
	return out
}

// paramProblems names how the binding of policy name could read other
// allowed principals than the platform's: a parameter reference missing,
// by selector, to another name or to the request's namespace (where a
// tenant may create a ConfigMap of that name), or one that allows requests
// when the parameter is missing.
func paramProblems(name string, p *admissionregistrationv1.ParamRef) []string {
	switch {
	case p == nil:
		return []string{fmt.Sprintf("binding %s has no paramRef", name)}
	case p.Name != ParamsName || p.Selector != nil || p.Namespace == "":
		return []string{fmt.Sprintf("binding %s does not read its parameters from the ConfigMap %s of a fixed namespace", name, ParamsName)}
	case p.ParameterNotFoundAction == nil || *p.ParameterNotFoundAction != admissionregistrationv1.DenyAction:
		return []string{fmt.Sprintf("binding %s allows requests while its parameters are missing", name)}
	}
	return nil
}

// emptySelector reports whether s selects everything.
func emptySelector(s *metav1.LabelSelector) bool {
	return s == nil || (len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0)
}

// labelledOnly reports whether s is the pods policy's object selector of
// config/policy: the boundary label exists.
func labelledOnly(s *metav1.LabelSelector) bool {
	return len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 1 &&
		s.MatchExpressions[0].Key == v1alpha1.BoundaryLabel && s.MatchExpressions[0].Operator == metav1.LabelSelectorOpExists
}
