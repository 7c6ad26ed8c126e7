package selector

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
)

func mustJSON(t testing.TB, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("bad test JSON %s: %v", s, err)
	}
	return v
}

// TestDecodePoolSelectorRejectionRules proves every pool-selector rejection
// rule of the selector-safety design, and that both accepted shapes decode
// to the same map.
func TestDecodePoolSelectorRejectionRules(t *testing.T) {
	long := strings.Repeat("a", 64)
	cases := []struct {
		name string
		raw  string // JSON of spec.selector; "" means missing
		want map[string]string
	}{
		{name: "matchLabels accepted", raw: `{"matchLabels":{"app":"llm","tier":"serve"}}`, want: map[string]string{"app": "llm", "tier": "serve"}},
		{name: "flat map normalised to matchLabels", raw: `{"app":"llm","tier":"serve"}`, want: map[string]string{"app": "llm", "tier": "serve"}},
		{name: "prefixed key accepted", raw: `{"matchLabels":{"example.com/app":"llm"}}`, want: map[string]string{"example.com/app": "llm"}},
		{name: "missing selector rejected", raw: ``},
		{name: "null selector rejected", raw: `null`},
		{name: "empty flat selector rejected", raw: `{}`},
		{name: "empty matchLabels rejected", raw: `{"matchLabels":{}}`},
		{name: "null matchLabels rejected", raw: `{"matchLabels":null}`},
		{name: "empty key rejected", raw: `{"":"llm"}`},
		{name: "empty value rejected", raw: `{"app":""}`},
		{name: "numeric value rejected", raw: `{"app":1}`},
		{name: "boolean value rejected", raw: `{"matchLabels":{"app":true}}`},
		{name: "nested map value rejected", raw: `{"app":{"x":"y"}}`},
		{name: "null value rejected", raw: `{"app":null}`},
		{name: "invalid key syntax rejected", raw: `{"bad key":"llm"}`},
		{name: "invalid key prefix rejected", raw: `{"-x.com/app":"llm"}`},
		{name: "invalid value syntax rejected", raw: `{"app":"a/b"}`},
		{name: "too long value rejected", raw: `{"app":"` + long + `"}`},
		{name: "leading whitespace in value rejected", raw: `{"app":" llm"}`},
		{name: "trailing whitespace in value rejected", raw: `{"app":"llm "}`},
		{name: "whitespace around key rejected", raw: `{" app":"llm"}`},
		{name: "matchExpressions rejected", raw: `{"matchExpressions":[{"key":"app","operator":"In","values":["llm"]}]}`},
		{name: "empty matchExpressions rejected", raw: `{"matchLabels":{"app":"llm"},"matchExpressions":[]}`},
		{name: "matchLabels beside extra fields rejected", raw: `{"matchLabels":{"app":"llm"},"tier":"serve"}`},
		{name: "matchLabels as string rejected", raw: `{"matchLabels":"app=llm"}`},
		{name: "list selector rejected", raw: `["app","llm"]`},
		{name: "string selector rejected", raw: `"app=llm"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var raw any
			if tc.raw != "" {
				raw = mustJSON(t, tc.raw)
			}
			got, err := DecodePoolSelector(raw)
			if tc.want == nil {
				var se *Error
				if !errors.As(err, &se) || se.Reason != v1alpha1.ReasonInvalidPoolSelector {
					t.Fatalf("want InvalidPoolSelector, got %v (labels %v)", err, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			}
		})
	}
}

// TestRenderRules proves the rendering contract: namespace, service account,
// pool labels and exactly one boundary selector, deduplicated and sorted;
// and the variant and service account rejection rules.
func TestRenderRules(t *testing.T) {
	base := func() Input {
		return Input{Namespace: "team-a", ServiceAccount: "serving", PoolLabels: map[string]string{"app": "llm"}, Variant: "canary"}
	}
	t.Run("renders sorted full set", func(t *testing.T) {
		got, err := Render(base())
		if err != nil {
			t.Fatal(err)
		}
		want := []string{
			"k8s:ns:team-a",
			"k8s:pod-label:app:llm",
			"k8s:pod-label:identity.trustplane.dev/variant:canary",
			"k8s:sa:serving",
		}
		if !slices.Equal(got, want) {
			t.Fatalf("got %v, want %v", got, want)
		}
	})
	t.Run("pool selecting the same variant is deduplicated", func(t *testing.T) {
		in := base()
		in.PoolLabels[v1alpha1.BoundaryLabel] = "canary"
		got, err := Render(in)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 4 {
			t.Fatalf("want 4 deduplicated selectors, got %v", got)
		}
	})
	reject := []struct {
		name   string
		mutate func(*Input)
		reason string
	}{
		{"missing variant", func(in *Input) { in.Variant = "" }, v1alpha1.ReasonInvalidIdentityBoundary},
		{"variant with whitespace", func(in *Input) { in.Variant = "canary " }, v1alpha1.ReasonInvalidIdentityBoundary},
		{"variant not a label value", func(in *Input) { in.Variant = "can/ary" }, v1alpha1.ReasonInvalidIdentityBoundary},
		{"pool selecting another variant", func(in *Input) { in.PoolLabels[v1alpha1.BoundaryLabel] = "stable" }, v1alpha1.ReasonInvalidIdentityBoundary},
		{"missing service account", func(in *Input) { in.ServiceAccount = "" }, v1alpha1.ReasonInvalidServiceAccount},
		{"invalid service account", func(in *Input) { in.ServiceAccount = "Serving:x" }, v1alpha1.ReasonInvalidServiceAccount},
		{"empty pool labels", func(in *Input) { in.PoolLabels = nil }, v1alpha1.ReasonInvalidPoolSelector},
		{"invalid pool label", func(in *Input) { in.PoolLabels["app"] = " llm" }, v1alpha1.ReasonInvalidPoolSelector},
		{"invalid namespace", func(in *Input) { in.Namespace = "Team_A" }, v1alpha1.ReasonSelectorInvariantViolated},
	}
	for _, tc := range reject {
		t.Run(tc.name, func(t *testing.T) {
			in := base()
			tc.mutate(&in)
			got, err := Render(in)
			var se *Error
			if !errors.As(err, &se) || se.Reason != tc.reason {
				t.Fatalf("want reason %s, got %v (selectors %v)", tc.reason, err, got)
			}
			if got != nil {
				t.Fatalf("a rejected input must render nothing, got %v", got)
			}
		})
	}
}

// TestVerifyRejectsIncompleteSets proves the post-render check on sets that
// Render itself never produces.
func TestVerifyRejectsIncompleteSets(t *testing.T) {
	cases := map[string][]string{
		"no namespace":        {"k8s:sa:s", PrefixBoundary + "v"},
		"other namespace":     {"k8s:ns:other", "k8s:sa:s", PrefixBoundary + "v"},
		"two namespaces":      {"k8s:ns:n", "k8s:ns:other", "k8s:sa:s", PrefixBoundary + "v"},
		"no service account":  {"k8s:ns:n", PrefixBoundary + "v"},
		"no boundary":         {"k8s:ns:n", "k8s:sa:s"},
		"two boundaries":      {"k8s:ns:n", "k8s:sa:s", PrefixBoundary + "v", PrefixBoundary + "w"},
		"other boundary only": {"k8s:ns:n", "k8s:sa:s", PrefixBoundary + "w"},
	}
	for name, set := range cases {
		t.Run(name, func(t *testing.T) {
			if err := Verify(set, "n", "s", "v"); err == nil {
				t.Fatalf("Verify accepted %v", set)
			}
		})
	}
	if err := Verify([]string{"k8s:ns:n", "k8s:sa:s", PrefixBoundary + "v"}, "n", "s", "v"); err != nil {
		t.Fatalf("Verify rejected a complete set: %v", err)
	}
}
