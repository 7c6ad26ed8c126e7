package output

import (
	"reflect"
	"strings"
	"testing"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/selector"
)

// TestAdversarialClusterSPIFFEIDIsAsNarrowAsTheSpiffeEntry: the ClusterSPIFFEID
// output carries exactly the binding's namespace (namespaceSelector), the
// pool labels plus the boundary (podSelector), the SpiffeEntry's full
// selector list (workloadSelectorTemplates, which SCM renders as Go
// templates: none may hold a template action), a literal SPIFFE ID, and
// every widening field at its narrowest.
func TestAdversarialClusterSPIFFEIDIsAsNarrowAsTheSpiffeEntry(t *testing.T) {
	pool := map[string]string{"app": "llm", v1alpha1.BoundaryLabel: "canary", "example.com/tier": "a.b_c-d"}
	sels, err := selector.Render(selector.Input{Namespace: "team-a", ServiceAccount: "serving", PoolLabels: pool, Variant: "canary"})
	if err != nil {
		t.Fatal(err)
	}
	d := Desired{Namespace: "team-a", ServiceAccount: "serving", Variant: "canary",
		SPIFFEID: "spiffe://example.org/ns/team-a/sa/serving/x", ParentID: "spiffe://example.org/nodes",
		Selectors: sels, PoolLabels: pool, Hint: "{{ .PodMeta.Name }}"}
	spec := d.ClusterSPIFFEIDSpec()
	wantPods := map[string]any{"matchLabels": map[string]any{"app": "llm", v1alpha1.BoundaryLabel: "canary", "example.com/tier": "a.b_c-d"}}
	if !reflect.DeepEqual(spec["podSelector"], wantPods) {
		t.Fatalf("podSelector %v, want %v", spec["podSelector"], wantPods)
	}
	wantNS := map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": "team-a"}}
	if !reflect.DeepEqual(spec["namespaceSelector"], wantNS) {
		t.Fatalf("namespaceSelector %v", spec["namespaceSelector"])
	}
	tmpls, _ := spec["workloadSelectorTemplates"].([]any)
	if len(tmpls) != len(sels) {
		t.Fatalf("templates %v vs selectors %v", tmpls, sels)
	}
	for i, s := range sels {
		if tmpls[i] != s || strings.Contains(s, "{{") {
			t.Fatalf("template %d = %v, selector %q", i, tmpls[i], s)
		}
	}
	if spec["spiffeIDTemplate"] != d.SPIFFEID || strings.Contains(d.SPIFFEID, "{{") {
		t.Fatalf("spiffeIDTemplate %v", spec["spiffeIDTemplate"])
	}
	for _, k := range []string{"admin", "downstream", "fallback", "autoPopulateDNSNames"} {
		if spec[k] != false {
			t.Fatalf("%s = %v", k, spec[k])
		}
	}
	for _, k := range []string{"federatesWith", "dnsNameTemplates"} {
		if l, ok := spec[k].([]any); !ok || len(l) != 0 {
			t.Fatalf("%s = %v", k, spec[k])
		}
	}
	// The SpiffeEntry carries the same selectors, and labels naming its
	// own group and ID only.
	es := d.SpiffeEntrySpec()
	if !reflect.DeepEqual(es.Selectors, sels) || es.Admin || es.Downstream || len(es.DNSNames) != 0 || len(es.FederatesWith) != 0 {
		t.Fatalf("SpiffeEntry spec %+v", es)
	}
}

// TestAdversarialOutputNamesOfLookalikeBindingsDiffer: output names are the
// only key the janitor claims by; bindings whose namespace/name pairs
// concatenate, truncate or case-fold to the same prefix get different
// names, all valid DNS-1123 subdomains of at most 63 characters.
func TestAdversarialOutputNamesOfLookalikeBindingsDiffer(t *testing.T) {
	long := strings.Repeat("a", 63)
	pairs := [][2]string{{"a-b", "c"}, {"a", "b-c"}, {"a", "b.c"}, {"a.b", "c"}, {long, "x"}, {long, "y"}, {long, long + "." + long},
		{long, long + "." + long + "z"}, {"a", "b-" + strings.Repeat("0", 16)}, {"a-b", strings.Repeat("0", 16)}}
	seen := map[string][2]string{}
	for _, p := range pairs {
		n := Name(p[0], p[1])
		if len(n) > 63 || strings.HasPrefix(n, "-") || strings.Contains(n, "..") || strings.Contains(n, ".-") || strings.Contains(n, "-.") {
			t.Fatalf("Name(%q, %q) = %q is not a usable object name/label value", p[0], p[1], n)
		}
		if o, ok := seen[n]; ok {
			t.Fatalf("Name collides for %v and %v: %q", o, p, n)
		}
		seen[n] = p
	}
}
