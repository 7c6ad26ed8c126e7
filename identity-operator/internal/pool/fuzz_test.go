package pool

import (
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/selector"
)

// FuzzRenderedSelectorsAreExactlyThePool feeds one pool selector through
// both read paths (the typed selector of a Deployment or StatefulSet, and
// the unstructured spec.selector of an InferencePool, as matchLabels or as a
// flat map) and the renderer. Whatever is rendered is checked against an
// independent oracle, metav1.LabelSelectorAsSelector and labels.Set: the
// set is exactly the namespace, the service account, and pod labels that
// are the pool's selector plus the boundary label, nothing more.
func FuzzRenderedSelectorsAreExactlyThePool(f *testing.F) {
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, exprKey string, flat bool, ns, sa, variant string) {
		matchLabels := map[string]string{}
		for k, v := range map[string]string{k1: v1, k2: v2} {
			if k != "" {
				matchLabels[k] = v
			}
		}
		sel := &metav1.LabelSelector{MatchLabels: matchLabels}
		if exprKey != "" {
			sel.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: exprKey, Operator: metav1.LabelSelectorOpExists}}
		}
		typed, typedErr := LabelSelectorLabels(sel)

		raw := map[string]any{}
		for k, v := range matchLabels {
			raw[k] = v
		}
		rawSelector := map[string]any{"matchLabels": raw}
		if flat {
			rawSelector = raw
		}
		if exprKey != "" {
			rawSelector = map[string]any{"matchLabels": raw, "matchExpressions": []any{map[string]any{"key": exprKey, "operator": "Exists"}}}
		}
		u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"selector": rawSelector}}}
		untyped, untypedErr := InferencePoolSelector(u)

		if (typedErr == nil) != (untypedErr == nil) || !reflect.DeepEqual(typed, untyped) {
			t.Fatalf("typed and unstructured paths differ: %v, %v vs %v, %v", typed, typedErr, untyped, untypedErr)
		}
		if typedErr != nil {
			return
		}
		rendered, err := selector.Render(selector.Input{Namespace: ns, ServiceAccount: sa, PoolLabels: typed, Variant: variant})
		if err != nil {
			return
		}
		oracle, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			t.Fatalf("rendered %v from a selector the oracle rejects: %v", rendered, err)
		}
		if len(sel.MatchExpressions) > 0 || oracle.Empty() {
			t.Fatalf("rendered %v from a selector with expressions or none at all: %+v", rendered, sel)
		}
		podLabels := labels.Set{}
		var nsSel, saSel int
		for _, s := range rendered {
			switch {
			case s == selector.PrefixNamespace+ns:
				nsSel++
			case s == selector.PrefixServiceAccount+sa:
				saSel++
			case strings.HasPrefix(s, selector.PrefixPodLabel):
				k, v, ok := strings.Cut(strings.TrimPrefix(s, selector.PrefixPodLabel), ":")
				if _, dup := podLabels[k]; !ok || dup {
					t.Fatalf("pod-label selector %q is malformed or repeats a key in %v", s, rendered)
				}
				podLabels[k] = v
			default:
				t.Fatalf("unexpected selector %q in %v", s, rendered)
			}
		}
		if nsSel != 1 || saSel != 1 {
			t.Fatalf("rendered %v lacks exactly one namespace and one service account selector", rendered)
		}
		if podLabels[v1alpha1.BoundaryLabel] != variant {
			t.Fatalf("rendered %v lacks the boundary label %s=%s", rendered, v1alpha1.BoundaryLabel, variant)
		}
		if !oracle.Matches(podLabels) {
			t.Fatalf("the pool selector %s does not match the rendered pod labels %v", oracle, podLabels)
		}
		withBoundary := &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.BoundaryLabel: variant}}
		for k, v := range sel.MatchLabels {
			withBoundary.MatchLabels[k] = v
		}
		want, err := metav1.LabelSelectorAsSelector(withBoundary)
		if err != nil {
			t.Fatalf("oracle: %v", err)
		}
		if got := labels.SelectorFromSet(podLabels); got.String() != want.String() {
			t.Fatalf("rendered pod labels %s are not exactly the pool selector plus the boundary %s", got, want)
		}
	})
}
