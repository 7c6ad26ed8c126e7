package selector

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
)

// Selector prefixes of the SPIRE k8s workload attestor.
const (
	PrefixNamespace      = "k8s:ns:"
	PrefixServiceAccount = "k8s:sa:"
	PrefixPodLabel       = "k8s:pod-label:"
	// PrefixBoundary starts the one boundary selector of every rendered set.
	PrefixBoundary = PrefixPodLabel + v1alpha1.BoundaryLabel + ":"
)

// Input is what a selector set is rendered from.
type Input struct {
	// Namespace is the binding's namespace.
	Namespace string
	// ServiceAccount is the binding's serviceAccountName.
	ServiceAccount string
	// PoolLabels is the decoded pool selector.
	PoolLabels map[string]string
	// Variant is the binding's identity boundary.
	Variant string
}

// ValidateVariant checks the identity boundary: a non-empty label value
// without surrounding whitespace (reason InvalidIdentityBoundary).
func ValidateVariant(variant string) error {
	if variant == "" {
		return &Error{Reason: v1alpha1.ReasonInvalidIdentityBoundary, Message: "identityBoundary.variant is required"}
	}
	if strings.TrimSpace(variant) != variant {
		return &Error{Reason: v1alpha1.ReasonInvalidIdentityBoundary, Message: fmt.Sprintf("identityBoundary.variant %q has surrounding whitespace", variant)}
	}
	if errs := validation.IsValidLabelValue(variant); len(errs) > 0 {
		return &Error{Reason: v1alpha1.ReasonInvalidIdentityBoundary,
			Message: fmt.Sprintf("identityBoundary.variant %q is not a valid label value: %s", variant, strings.Join(errs, "; "))}
	}
	return nil
}

// ValidateServiceAccount checks serviceAccountName (reason
// InvalidServiceAccount).
func ValidateServiceAccount(sa string) error {
	if sa == "" {
		return &Error{Reason: v1alpha1.ReasonInvalidServiceAccount, Message: "serviceAccountName is required"}
	}
	if errs := validation.IsDNS1123Subdomain(sa); len(errs) > 0 {
		return &Error{Reason: v1alpha1.ReasonInvalidServiceAccount,
			Message: fmt.Sprintf("serviceAccountName %q is invalid: %s", sa, strings.Join(errs, "; "))}
	}
	return nil
}

// Render returns the deduplicated, sorted selector set of in, after checking
// every input and then the rendered set itself (Verify). It never returns a
// set without the namespace, service account and boundary selectors.
func Render(in Input) ([]string, error) {
	if errs := validation.IsDNS1123Label(in.Namespace); len(errs) > 0 {
		return nil, &Error{Reason: v1alpha1.ReasonSelectorInvariantViolated,
			Message: fmt.Sprintf("namespace %q is invalid: %s", in.Namespace, strings.Join(errs, "; "))}
	}
	if err := ValidateServiceAccount(in.ServiceAccount); err != nil {
		return nil, err
	}
	if err := ValidateVariant(in.Variant); err != nil {
		return nil, err
	}
	if len(in.PoolLabels) == 0 {
		return nil, poolErr("pool selector is empty and would select every pod")
	}
	out := make([]string, 0, len(in.PoolLabels)+3)
	out = append(out, PrefixNamespace+in.Namespace, PrefixServiceAccount+in.ServiceAccount)
	for k, v := range in.PoolLabels {
		if err := ValidateLabel(k, v); err != nil {
			return nil, err
		}
		out = append(out, PrefixPodLabel+k+":"+v)
	}
	out = append(out, PrefixBoundary+in.Variant)
	slices.Sort(out)
	out = slices.Compact(out)
	if err := Verify(out, in.Namespace, in.ServiceAccount, in.Variant); err != nil {
		return nil, err
	}
	return out, nil
}

// Fingerprint returns "sha256:" and the hex SHA-256 of the selectors joined
// by newlines (no selector holds a newline).
func Fingerprint(selectors []string) string {
	sum := sha256.Sum256([]byte(strings.Join(selectors, "\n")))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Verify checks a rendered set: exactly one namespace selector, equal to the
// binding's namespace; exactly one service account selector, equal to sa;
// exactly one boundary selector, equal to variant. A pool that selects a
// different variant therefore fails here with InvalidIdentityBoundary.
func Verify(selectors []string, namespace, sa, variant string) error {
	var ns, sas, boundary []string
	for _, s := range selectors {
		switch {
		case strings.HasPrefix(s, PrefixNamespace):
			ns = append(ns, strings.TrimPrefix(s, PrefixNamespace))
		case strings.HasPrefix(s, PrefixServiceAccount):
			sas = append(sas, strings.TrimPrefix(s, PrefixServiceAccount))
		case strings.HasPrefix(s, PrefixBoundary):
			boundary = append(boundary, strings.TrimPrefix(s, PrefixBoundary))
		}
	}
	if len(ns) != 1 || ns[0] != namespace {
		return &Error{Reason: v1alpha1.ReasonSelectorInvariantViolated,
			Message: fmt.Sprintf("rendered selectors %v must hold exactly the namespace selector %s%s", selectors, PrefixNamespace, namespace)}
	}
	if len(sas) != 1 || sas[0] != sa {
		return &Error{Reason: v1alpha1.ReasonInvalidServiceAccount,
			Message: fmt.Sprintf("rendered selectors %v must hold exactly the service account selector %s%s", selectors, PrefixServiceAccount, sa)}
	}
	if len(boundary) != 1 || boundary[0] != variant {
		return &Error{Reason: v1alpha1.ReasonInvalidIdentityBoundary,
			Message: fmt.Sprintf("rendered selectors %v must hold exactly one boundary selector %s%s (does the pool select another variant?)", selectors, PrefixBoundary, variant)}
	}
	return nil
}
