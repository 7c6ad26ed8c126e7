package selector

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// FuzzDecodeAndRender feeds arbitrary pool selectors (as JSON), namespaces,
// service accounts and variants through the decoder and renderer and asserts
// the safety invariant: whatever is rendered holds exactly the binding's
// namespace selector, its service account selector and one boundary
// selector, sorted and without duplicates.
func FuzzDecodeAndRender(f *testing.F) {
	f.Add(`{"matchLabels":{"app":"llm"}}`, "team-a", "serving", "canary")
	f.Add(`{"app":"llm","identity.trustplane.dev/variant":"canary"}`, "team-a", "serving", "canary")
	f.Add(`{"app":"llm","identity.trustplane.dev/variant":"stable"}`, "ns", "sa", "canary")
	f.Add(`{"matchExpressions":[]}`, "ns", "sa", "v")
	f.Add(`{"a":"k8s:ns:other"}`, "ns", "sa", "v")
	f.Add(`{}`, "", "", "")
	f.Fuzz(func(t *testing.T, rawJSON, ns, sa, variant string) {
		var raw any
		if err := json.Unmarshal([]byte(rawJSON), &raw); err != nil {
			return
		}
		labels, err := DecodePoolSelector(raw)
		if err != nil {
			if labels != nil {
				t.Fatalf("decoder returned labels %v with error %v", labels, err)
			}
			return
		}
		if len(labels) == 0 {
			t.Fatalf("decoder accepted an empty selector from %s", rawJSON)
		}
		got, err := Render(Input{Namespace: ns, ServiceAccount: sa, PoolLabels: labels, Variant: variant})
		if err != nil {
			if got != nil {
				t.Fatalf("renderer returned %v with error %v", got, err)
			}
			return
		}
		if !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != len(got) {
			t.Fatalf("rendered set not sorted and deduplicated: %v", got)
		}
		count := func(prefix, want string) int {
			n := 0
			for _, s := range got {
				if strings.HasPrefix(s, prefix) {
					if strings.TrimPrefix(s, prefix) != want {
						t.Fatalf("selector %s differs from %s%s in %v", s, prefix, want, got)
					}
					n++
				}
			}
			return n
		}
		if count(PrefixNamespace, ns) != 1 || count(PrefixServiceAccount, sa) != 1 || count(PrefixBoundary, variant) != 1 {
			t.Fatalf("rendered set %v lacks the namespace, service account or boundary selector", got)
		}
		for k, v := range labels {
			if !slices.Contains(got, PrefixPodLabel+k+":"+v) {
				t.Fatalf("rendered set %v lacks pool label %s=%s", got, k, v)
			}
		}
	})
}
