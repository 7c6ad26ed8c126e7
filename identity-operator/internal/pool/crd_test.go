package pool

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestCRDNotServingSaysWhyAVersionIsNotServed: only a CRD that is
// established, not being deleted, has accepted the kind and lists the
// version as served serves it; every other shape, malformed ones included,
// says why not and never panics.
func TestCRDNotServingSaysWhyAVersionIsNotServed(t *testing.T) {
	established := []any{map[string]any{"type": "Established", "status": "True"}}
	crd := func(versions any, conditions any) *unstructured.Unstructured {
		o := map[string]any{"spec": map[string]any{}}
		if versions != nil {
			o["spec"].(map[string]any)["versions"] = versions
		}
		status := map[string]any{"acceptedNames": map[string]any{"kind": "InferencePool"}}
		if conditions != nil {
			status["conditions"] = conditions
		}
		o["status"] = status
		return &unstructured.Unstructured{Object: o}
	}
	version := func(name string, served bool) map[string]any { return map[string]any{"name": name, "served": served} }
	deleting := crd([]any{version("v1", true)}, established)
	now := metav1.Now()
	deleting.SetDeletionTimestamp(&now)
	withAccepted := func(accepted any) *unstructured.Unstructured {
		c := crd([]any{version("v1", true)}, established)
		c.Object["status"].(map[string]any)["acceptedNames"] = accepted
		return c
	}

	cases := []struct {
		name string
		crd  *unstructured.Unstructured
		want string // "" serves v1; otherwise a part of the reason
	}{
		{"served and established", crd([]any{version("v1alpha2", true), version("v1", true)}, established), ""},
		{"v1 listed but not served", crd([]any{version("v1", false), version("v1alpha2", true)}, established), "does not serve v1, which the operator reads (it serves v1alpha2)"},
		{"only another version", crd([]any{version("v1alpha2", true)}, established), "it serves v1alpha2"},
		{"nothing served", crd([]any{version("v1", false)}, established), "serves no version"},
		{"no versions", crd(nil, established), "serves no version"},
		{"versions not a list", crd("v1", established), "serves no version"},
		{"a version not an object", crd([]any{"v1"}, established), "serves no version"},
		{"served as a string", crd([]any{map[string]any{"name": "v1", "served": "true"}}, established), "serves no version"},
		{"not established", crd([]any{version("v1", true)}, []any{map[string]any{"type": "Established", "status": "False"}}), "not established"},
		{"no conditions", crd([]any{version("v1", true)}, nil), "not established"},
		{"a condition not an object", crd([]any{version("v1", true)}, []any{"Established"}), "not established"},
		{"being deleted", deleting, "being deleted"},
		{"another kind under the same name", withAccepted(map[string]any{"kind": "InferencePoolX"}), "defines the kind InferencePoolX, not InferencePool"},
		{"kind in another case", withAccepted(map[string]any{"kind": "inferencepool"}), "defines the kind inferencepool"},
		{"no accepted names", withAccepted(nil), "has not accepted the kind InferencePool"},
		{"accepted names not an object", withAccepted("InferencePool"), "has not accepted the kind InferencePool"},
		{"accepted kind not a string", withAccepted(map[string]any{"kind": true}), "has not accepted the kind InferencePool"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := CRDNotServing(tc.crd, "InferencePool", "v1")
			switch {
			case tc.want == "" && got != "":
				t.Fatalf("want v1 served, got %q", got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Fatalf("want a reason containing %q, got %q", tc.want, got)
			}
		})
	}
}
