package selector

import (
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
)

// TestSelectorTricksAreRefusedOrExact feeds label tricks (unicode,
// case, whitespace, control characters, long values, look-alikes of the
// boundary label) through DecodePoolSelector and Render: each one is
// either refused with a selector error, or renders exactly the namespace,
// service account, boundary and the pool labels, nothing else.
func TestSelectorTricksAreRefusedOrExact(t *testing.T) {
	const ns, sa, variant = "tenant", "serving", "v1"
	labelsets := map[string]map[string]any{
		"unicode value":                {"app": "wéb"},
		"zero-width value":             {"app": "web\u200b"},
		"nbsp around value":            {"app": "\u00a0web"},
		"tab in value":                 {"app": "we\tb"},
		"newline in value":             {"app": "web\nk8s:ns:victim"},
		"colon in value":               {"app": "web:x"},
		"64-char value":                {"app": strings.Repeat("a", 64)},
		"63-char value":                {"app": strings.Repeat("a", 63)},
		"upper-case prefix":            {"Example.com/app": "web"},
		"two slashes":                  {"a/b/c": "web"},
		"empty name after prefix":      {"example.com/": "web"},
		"boundary look-alike name":     {"identity.trustplane.dev/Variant": "v2"},
		"boundary look-alike suffix":   {"identity.trustplane.dev/variantx": "v2"},
		"boundary, other variant":      {v1alpha1.BoundaryLabel: "v2"},
		"boundary, same variant":       {v1alpha1.BoundaryLabel: variant},
		"boundary, upper-case variant": {v1alpha1.BoundaryLabel: "V1"},
		"sa look-alike label":          {"k8s.sa": "other"},
		"colon key":                    {"k8s:sa": "other"},
		"value only spaces":            {"app": "   "},
		"non-string value":             {"app": 1},
		"bool value":                   {"app": true},
		"nested value":                 {"app": map[string]any{"x": "y"}},
	}
	for name, ls := range labelsets {
		for shape, raw := range map[string]any{"flat": ls, "matchLabels": map[string]any{"matchLabels": ls}} {
			t.Run(name+"/"+shape, func(t *testing.T) {
				labels, err := DecodePoolSelector(raw)
				if err != nil {
					var se *Error
					if !asSelErr(err, &se) {
						t.Fatalf("refusal is not a selector error: %v", err)
					}
					return
				}
				got, err := Render(Input{Namespace: ns, ServiceAccount: sa, PoolLabels: labels, Variant: variant})
				if err != nil {
					var se *Error
					if !asSelErr(err, &se) {
						t.Fatalf("render refusal is not a selector error: %v", err)
					}
					return
				}
				want := []string{PrefixNamespace + ns, PrefixServiceAccount + sa, PrefixBoundary + variant}
				for k, v := range ls {
					want = append(want, PrefixPodLabel+k+":"+v.(string))
				}
				sort.Strings(want)
				want = slices.Compact(want)
				if !slices.Equal(got, want) {
					t.Fatalf("rendered %q, want exactly %q", got, want)
				}
				for _, s := range got {
					if strings.ContainsAny(s, "\n\r\t ") {
						t.Fatalf("rendered selector %q holds whitespace", s)
					}
				}
			})
		}
	}
}

func asSelErr(err error, target **Error) bool {
	e, ok := err.(*Error)
	if ok {
		*target = e
	}
	return ok
}
