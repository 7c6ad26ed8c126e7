package idtemplate

import (
	"strings"
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// TestTemplateCannotClaimAnotherNamespacesIdentity is the attack of a
// binding author who writes a template that renders an ID outside
// ns/<own namespace>/sa/<own service account>/: a literal path, a
// placeholder glued to text, or no namespace at all. Every one is refused
// with an error that names the rule.
func TestTemplateCannotClaimAnotherNamespacesIdentity(t *testing.T) {
	td := spiffeid.RequireTrustDomainFromString("example.org")
	vars := Vars{Namespace: "vic", ServiceAccount: "db", Pool: "llm", Variant: "canary"}
	attacks := map[string]string{
		"literal path of another namespace":   "ns/prod/sa/db/pool/llm/variant/canary",
		"placeholder glued to text":           "ns/{namespace}tim/sa/{serviceAccount}/x",
		"text glued before the placeholder":   "ns/x{namespace}/sa/{serviceAccount}/x",
		"service account glued to text":       "ns/{namespace}/sa/{serviceAccount}-admin/x",
		"no namespace at all":                 "shared/{serviceAccount}",
		"namespace and service account alone": "ns/{namespace}/sa/{serviceAccount}",
		"segments swapped":                    "sa/{serviceAccount}/ns/{namespace}/x",
		"leading extra segment":               "x/ns/{namespace}/sa/{serviceAccount}/y",
		"pool as namespace":                   "ns/{pool}/sa/{serviceAccount}/x",
		"variant as service account":          "ns/{namespace}/sa/{variant}/x",
	}
	for name, tmpl := range attacks {
		t.Run(name, func(t *testing.T) {
			got, err := Render(td, tmpl, vars)
			if err == nil || !strings.Contains(err.Error(), "ns/vic/sa/db/") {
				t.Fatalf("Render(%q) = %q, %v; want a refusal naming ns/vic/sa/db/", tmpl, got, err)
			}
		})
	}
}
