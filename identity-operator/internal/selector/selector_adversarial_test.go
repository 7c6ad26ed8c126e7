package selector

import (
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
)

// TestAdversarialSelectorShapesNeverBroaden feeds pool selectors as a pool
// writer (a tenant editing its own InferencePool, schemaless in some
// served versions) could store them: duplicate JSON keys, casing tricks
// on matchLabels/matchExpressions, nulls, nested shapes, boundary label
// look-alikes, maximum-length keys. Each is refused with a *Error, or
// renders exactly ns + sa + boundary + the labels the JSON decodes to,
// with no selector beyond them and every selector holding the namespace,
// the service account and exactly one boundary.
func TestAdversarialSelectorShapesNeverBroaden(t *testing.T) {
	const ns, sa, variant = "tenant", "serving", "canary"
	longKey := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61) + "/" + strings.Repeat("n", 63)
	cases := []string{
		`{"matchLabels":{"app":"a","app":"b"}}`,
		`{"matchLabels":{"app":"a"},"matchLabels":{"x":"y"}}`,
		`{"matchLabels":{"app":"a"},"matchExpressions":null}`,
		`{"matchLabels":{"app":"a"},"matchExpressions":[]}`,
		`{"MatchLabels":{"app":"a"}}`,
		`{"matchlabels":{"app":"a"}}`,
		`{"matchExpressions":[{"key":"app","operator":"Exists"}]}`,
		`{"MatchExpressions":[{"key":"app","operator":"Exists"}]}`,
		`{"matchLabels":null}`,
		`{"matchLabels":{}}`,
		`{"matchLabels":"app=a"}`,
		`{"matchLabels":[["app","a"]]}`,
		`{"matchLabels":{"matchLabels":{"app":"a"}}}`,
		`{"matchLabels":{"matchExpressions":"x"}}`,
		`{"app":"a","matchLabels":{"x":"y"}}`,
		`{"identity.trustplane.dev/variant":"Canary"}`,
		`{"identity.trustplane.dev/variant":"canary"}`,
		`{"identity.trustplane.dev/variant":"canary","app":"a"}`,
		`{"Identity.trustplane.dev/variant":"stable"}`,
		`{"identity.trustplane.dev/VARIANT":"stable","app":"a"}`,
		`{"identity.trustplane.dev/variant ":"stable"}`,
		`{"identity.trustplane.dev//variant":"stable"}`,
		`{"app":"*"}`,
		`{"app":".*"}`,
		`{"app":"a*"}`,
		`{"*":"a"}`,
		`{"app":"a:b"}`,
		`{"app:x":"a"}`,
		`{"app":"a\u0000"}`,
		`{"app":"ａ"}`,
		`{"app":"` + strings.Repeat("a", 63) + `"}`,
		`{"app":"` + strings.Repeat("a", 64) + `"}`,
		`{"` + longKey + `":"v"}`,
		`{"` + longKey + `x":"v"}`,
		`{"app":"a","k8s:ns":"victim"}`,
		`{"app":"a","k8s/ns":"victim"}`,
		`{"kubernetes.io/metadata.name":"victim"}`,
		`"app=a"`,
		`null`,
		`[]`,
		`{"":"a"}`,
		`{"app":""}`,
	}
	for _, raw := range cases {
		t.Run(raw[:min(len(raw), 60)], func(t *testing.T) {
			var v any
			if err := json.Unmarshal([]byte(raw), &v); err != nil {
				t.Fatalf("bad case: %v", err)
			}
			labels, err := DecodePoolSelector(v)
			if err != nil {
				if _, ok := err.(*Error); !ok || labels != nil {
					t.Fatalf("refusal %v (labels %v) is not a clean *Error", err, labels)
				}
				return
			}
			got, err := Render(Input{Namespace: ns, ServiceAccount: sa, PoolLabels: labels, Variant: variant})
			if err != nil {
				if _, ok := err.(*Error); !ok || got != nil {
					t.Fatalf("render refusal %v (got %v) is not a clean *Error", err, got)
				}
				return
			}
			want := []string{PrefixNamespace + ns, PrefixServiceAccount + sa, PrefixBoundary + variant}
			for k, val := range labels {
				want = append(want, PrefixPodLabel+k+":"+val)
			}
			sort.Strings(want)
			want = slices.Compact(want)
			if !slices.Equal(got, want) {
				t.Fatalf("rendered %q, want %q", got, want)
			}
			// No selector may be parsed by SPIRE as anything but what it
			// is: "k8s:pod-label:<k>:<v>" with exactly one ':' in <k>:<v>
			// split at the key, no wildcard semantics.
			nb := 0
			for _, s := range got {
				if strings.HasPrefix(s, PrefixBoundary) {
					nb++
				}
				if strings.HasPrefix(s, PrefixPodLabel) {
					rest := strings.TrimPrefix(s, PrefixPodLabel)
					if strings.Count(rest, ":") != 1 {
						t.Fatalf("selector %q is ambiguous: its key or value holds ':'", s)
					}
				}
			}
			if nb != 1 {
				t.Fatalf("rendered %q holds %d boundary selectors", got, nb)
			}
			// The pool may select the boundary only with the binding's own
			// variant, exactly (no case folding).
			if pv, ok := labels[v1alpha1.BoundaryLabel]; ok && pv != variant {
				t.Fatalf("pool selecting variant %q rendered for variant %q: %q", pv, variant, got)
			}
		})
	}
}

// TestAdversarialVariantAndServiceAccountTricks: variants and service accounts
// a binding author writes directly. Each is refused, or used verbatim.
func TestAdversarialVariantAndServiceAccountTricks(t *testing.T) {
	variants := []string{"Canary", "canary\n", "\tcanary", "can ary", "canary*", "*", ".", "..", "a..b", "-a", "a-",
		"ｃanary", "canary\u200b", strings.Repeat("v", 63), strings.Repeat("v", 64), "v:w", "v/w", "v,w", "v=w", "v!"}
	for _, v := range variants {
		got, err := Render(Input{Namespace: "tenant", ServiceAccount: "serving", PoolLabels: map[string]string{"app": "a"}, Variant: v})
		if err != nil {
			if se, ok := err.(*Error); !ok || se.Reason != v1alpha1.ReasonInvalidIdentityBoundary {
				t.Fatalf("variant %q refused with %v, want InvalidIdentityBoundary", v, err)
			}
			continue
		}
		if !slices.Contains(got, PrefixBoundary+v) || strings.ContainsAny(v, " \t\n:*/,=!") {
			t.Fatalf("variant %q rendered %q", v, got)
		}
	}
	sas := []string{"Serving", "serving ", "serving/x", "serving:x", "..", "a..b", "a.", ".a", "*", "serving\n", strings.Repeat("s", 254)}
	for _, sa := range sas {
		got, err := Render(Input{Namespace: "tenant", ServiceAccount: sa, PoolLabels: map[string]string{"app": "a"}, Variant: "v"})
		if err == nil {
			t.Fatalf("service account %q rendered %q", sa, got)
		}
	}
}
