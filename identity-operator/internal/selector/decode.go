package selector

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
)

// Error is a rejected input with the condition reason to report.
type Error struct {
	// Reason is InvalidPoolSelector, InvalidIdentityBoundary or
	// InvalidServiceAccount.
	Reason string
	// Message says what was wrong.
	Message string
}

// Error implements error.
func (e *Error) Error() string { return e.Message }

func poolErr(format string, args ...any) error {
	return &Error{Reason: v1alpha1.ReasonInvalidPoolSelector, Message: fmt.Sprintf(format, args...)}
}

// Field names of a metav1.LabelSelector.
const (
	fieldMatchLabels      = "matchLabels"
	fieldMatchExpressions = "matchExpressions"
)

// DecodePoolSelector decodes the selector of a pool, as read from an
// unstructured object, into its label map. It accepts {matchLabels: {...}}
// or a flat {key: value} map, and rejects everything else with reason
// InvalidPoolSelector: a missing or empty selector, matchExpressions (even
// empty), extra fields beside matchLabels, non-string values and labels that
// break Kubernetes label syntax or carry surrounding whitespace.
func DecodePoolSelector(raw any) (map[string]string, error) {
	if raw == nil {
		return nil, poolErr("pool selector is missing")
	}
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, poolErr("pool selector is a %T, not a map", raw)
	}
	if _, ok := m[fieldMatchExpressions]; ok {
		return nil, poolErr("pool selector uses matchExpressions, which cannot be rendered as workload selectors")
	}
	flat := m
	if ml, ok := m[fieldMatchLabels]; ok {
		if len(m) != 1 {
			return nil, poolErr("pool selector mixes matchLabels with other fields %v", otherKeys(m))
		}
		inner, ok := ml.(map[string]any)
		if !ok {
			if ml == nil {
				return nil, poolErr("pool selector matchLabels is empty")
			}
			return nil, poolErr("pool selector matchLabels is a %T, not a map", ml)
		}
		flat = inner
	}
	if len(flat) == 0 {
		return nil, poolErr("pool selector is empty and would select every pod")
	}
	out := make(map[string]string, len(flat))
	for k, v := range flat {
		s, ok := v.(string)
		if !ok {
			return nil, poolErr("pool selector label %q has a %T value, not a string", k, v)
		}
		if err := ValidateLabel(k, s); err != nil {
			return nil, err
		}
		out[k] = s
	}
	return out, nil
}

// ValidateLabel checks one pool label: non-empty key and value, Kubernetes
// label syntax, no surrounding whitespace.
func ValidateLabel(key, value string) error {
	switch {
	case key == "":
		return poolErr("pool selector has an empty label key")
	case value == "":
		return poolErr("pool selector label %q has an empty value", key)
	case strings.TrimSpace(key) != key:
		return poolErr("pool selector label key %q has surrounding whitespace", key)
	case strings.TrimSpace(value) != value:
		return poolErr("pool selector label %q value %q has surrounding whitespace", key, value)
	}
	if errs := validation.IsQualifiedName(key); len(errs) > 0 {
		return poolErr("pool selector label key %q is invalid: %s", key, strings.Join(errs, "; "))
	}
	if errs := validation.IsValidLabelValue(value); len(errs) > 0 {
		return poolErr("pool selector label %q value %q is invalid: %s", key, value, strings.Join(errs, "; "))
	}
	return nil
}

func otherKeys(m map[string]any) []string {
	var keys []string
	for k := range m {
		if k != fieldMatchLabels {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}
