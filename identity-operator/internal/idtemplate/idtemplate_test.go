package idtemplate

import (
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

func TestRenderTemplateRules(t *testing.T) {
	td := spiffeid.RequireTrustDomainFromString("example.org")
	vars := Vars{Namespace: "team-a", ServiceAccount: "serving", Pool: "llm", Variant: "canary"}
	ok := map[string]string{
		"": "spiffe://example.org/ns/team-a/sa/serving/pool/llm/variant/canary",
		"/ns/{namespace}/sa/{serviceAccount}/{pool}-{variant}": "spiffe://example.org/ns/team-a/sa/serving/llm-canary",
		"ns/{namespace}/sa/{serviceAccount}/x":                 "spiffe://example.org/ns/team-a/sa/serving/x",
		"ns/team-a/sa/serving/fixed":                           "spiffe://example.org/ns/team-a/sa/serving/fixed",
	}
	for tmpl, want := range ok {
		got, err := Render(td, tmpl, vars)
		if err != nil || got != want {
			t.Errorf("Render(%q) = %q, %v; want %q", tmpl, got, err, want)
		}
	}
	bad := []string{
		"ns/{nope}",
		"ns/{namespace",
		"ns//{pool}",
		"ns/{pool}/",
		"ns/../{pool}",
		"ns/Upper Case",
		"spiffe://evil.org/{pool}",
	}
	for _, tmpl := range bad {
		if got, err := Render(td, tmpl, vars); err == nil {
			t.Errorf("Render(%q) = %q, want an error", tmpl, got)
		}
	}
	if _, err := Render(spiffeid.TrustDomain{}, "", vars); err == nil {
		t.Error("Render without a trust domain must fail")
	}
}
