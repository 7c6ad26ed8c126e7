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

// TestEncodedPathsCannotLeaveTheServiceAccount tries the encodings that
// could make a path compare as under ns/<namespace>/sa/<service account>/
// and still name something else once a consumer normalises it: dot
// segments, empty segments, percent-escapes, unicode look-alikes, a
// trailing slash, upper case, and a namespace that only starts with the
// binding's. Every one is refused, either as an invalid SPIFFE ID path or
// as outside the service account; none renders.
func TestEncodedPathsCannotLeaveTheServiceAccount(t *testing.T) {
	td := spiffeid.RequireTrustDomainFromString("example.org")
	vars := Vars{Namespace: "a", ServiceAccount: "db", Pool: "llm", Variant: "canary"}
	attacks := map[string]string{
		"dot-dot segment after the prefix":               "ns/{namespace}/sa/{serviceAccount}/../../../b/sa/db/x",
		"dot segment inside the prefix":                  "ns/./{namespace}/sa/{serviceAccount}/x",
		"double slash":                                   "ns/{namespace}/sa/{serviceAccount}//x",
		"empty namespace segment":                        "ns//sa/{serviceAccount}/x",
		"percent-encoded slash":                          "ns/{namespace}%2Fb/sa/{serviceAccount}/x",
		"percent-encoded dot-dot":                        "ns/{namespace}/sa/{serviceAccount}/%2e%2e/x",
		"unicode look-alike of ns":                       "ո\u0455/{namespace}/sa/{serviceAccount}/x",
		"trailing slash":                                 "ns/{namespace}/sa/{serviceAccount}/",
		"upper-case NS":                                  "NS/{namespace}/sa/{serviceAccount}/x",
		"upper-case SA":                                  "ns/{namespace}/SA/{serviceAccount}/x",
		"namespace that starts with the binding's":       "ns/{namespace}b/sa/{serviceAccount}/x",
		"service account that starts with the binding's": "ns/{namespace}/sa/{serviceAccount}x/y",
		"backslash":                                      "ns/{namespace}/sa/{serviceAccount}\\..\\x",
		"query":                                          "ns/{namespace}/sa/{serviceAccount}/x?ns=b",
		"fragment":                                       "ns/{namespace}/sa/{serviceAccount}/x#y",
	}
	for name, tmpl := range attacks {
		t.Run(name, func(t *testing.T) {
			got, err := Render(td, tmpl, vars)
			if err == nil {
				t.Fatalf("Render(%q) = %q; want a refusal", tmpl, got)
			}
			if got != "" {
				t.Fatalf("Render(%q) returned %q beside the error %v", tmpl, got, err)
			}
		})
	}
}
