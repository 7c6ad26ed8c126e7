package pool

// Attacks of a tenant who writes the pool objects of their own namespace
// (InferencePools, Deployments, StatefulSets). Unit level, no API server:
// go test ./identity-operator/internal/pool/ -run Adversarial

import (
	"context"
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/selector"
)

// stubPools answers every Get of an unstructured object with content.
type stubPools struct {
	client.Reader
	content map[string]any
}

func (s stubPools) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	u := obj.(*unstructured.Unstructured)
	gvk := u.GroupVersionKind()
	u.Object = map[string]any{}
	for k, v := range s.content {
		u.Object[k] = v
	}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(key.Namespace)
	u.SetName(key.Name)
	return nil
}

// TestAdversarialInferencePoolWithUndecodableSpecIsAnUnsafeSelector: the doc
// says a selector that "cannot be decoded to a stable map (for example it
// is a list or a string)" is UnsafeSelector/InvalidPoolSelector, and any
// failure withdraws the binding's outputs; only a transient error (an API
// read that failed) keeps them. A tenant whose InferencePool is stored
// in a shape the v1 schema would refuse (another served version, a
// schemaless CRD: the shapes the operator reads unstructured for) makes
// spec itself a string or a list. Safe behaviour: a *selector.Error with
// InvalidPoolSelector, as for spec.selector being a string; not an
// untyped error, which the handler retries as transient while the output
// rendered from the pool's previous selector stays in place for ever.
func TestAdversarialInferencePoolWithUndecodableSpecIsAnUnsafeSelector(t *testing.T) {
	cases := map[string]map[string]any{
		"spec is a string":            {"spec": "app=llm"},
		"spec is a list":              {"spec": []any{map[string]any{"selector": map[string]any{"app": "llm"}}}},
		"spec is a number":            {"spec": int64(3)},
		"selector is a string (ref.)": {"spec": map[string]any{"selector": "app=llm"}},
	}
	for name, content := range cases {
		t.Run(name, func(t *testing.T) {
			r := Resolver{Reader: stubPools{content: content}}
			_, err := r.Selector(context.Background(), "team", v1alpha1.PoolReference{Name: "llm"})
			var se *selector.Error
			if !errors.As(err, &se) || se.Reason != v1alpha1.ReasonInvalidPoolSelector {
				t.Fatalf("Selector = %v (%T); want a *selector.Error with reason %s (an untyped error is retried as transient and keeps the old output)",
					err, err, v1alpha1.ReasonInvalidPoolSelector)
			}
		})
	}
}

// TestAdversarialFlatSelectorCannotSmuggleMatchLabelsOrExpressions: an older
// InferencePool version's flat selector (map[LabelKey]LabelValue) may carry
// "matchLabels" or "matchExpressions" as label keys (valid label names).
// Safe behaviour: none of them is read as a LabelSelector field that would
// widen or narrow the set differently from the pool: each is refused.
func TestAdversarialFlatSelectorCannotSmuggleMatchLabelsOrExpressions(t *testing.T) {
	cases := map[string]map[string]any{
		"matchLabels as a string label":               {"matchLabels": "llm"},
		"matchLabels beside a real label":             {"matchLabels": "llm", "app": "llm"},
		"matchExpressions as a string label":          {"matchExpressions": "llm"},
		"matchLabels map beside matchExpressions nil": {"matchLabels": map[string]any{"app": "llm"}, "matchExpressions": nil},
		"matchLabels map beside an extra field":       {"matchLabels": map[string]any{"app": "llm"}, "app": "llm"},
		"matchLabels map with a nil value":            {"matchLabels": map[string]any{"app": nil}},
		"matchLabels map with a nested map":           {"matchLabels": map[string]any{"app": map[string]any{"x": "y"}}},
	}
	for name, sel := range cases {
		t.Run(name, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"selector": sel}}}
			got, err := InferencePoolSelector(u)
			if err == nil {
				t.Fatalf("selector %v accepted as %v", sel, got)
			}
		})
	}
}

// TestAdversarialTypedSelectorWithEmptyExpressionsIsExactlyMatchLabels: a
// Deployment's selector with an empty, non-nil matchExpressions list, or an
// expression list the converter might drop, must render exactly its
// matchLabels or be refused: never fewer labels than the pool selects.
func TestAdversarialTypedSelectorWithEmptyExpressionsIsExactlyMatchLabels(t *testing.T) {
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "llm"}, MatchExpressions: []metav1.LabelSelectorRequirement{}}
	got, err := LabelSelectorLabels(sel)
	if err == nil && (len(got) != 1 || got["app"] != "llm") {
		t.Fatalf("rendered %v for %v", got, sel)
	}
	withExpr := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "llm"},
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"x"}}}}
	if got, err := LabelSelectorLabels(withExpr); err == nil {
		t.Fatalf("a selector with a NotIn expression rendered as %v", got)
	}
}
