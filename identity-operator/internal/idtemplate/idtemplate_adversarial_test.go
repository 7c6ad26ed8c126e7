package idtemplate

import (
	"errors"
	"strings"
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

var attackTD = spiffeid.RequireTrustDomainFromString("example.org")

// TestAdversarialPrefixLookalikeNamespacesNeverShareAnID renders, for pairs of
// (namespace, service account) whose names are prefixes or dotted
// extensions of each other, every template that tries to repeat the other
// pair's path after its own prefix or to glue segments together, and
// asserts that (1) every accepted ID lies under ns/<ns>/sa/<sa>/ with at
// least one more segment, and (2) no two different pairs ever render the
// same ID (so DuplicateSPIFFEID can never cross a namespace or SA).
func TestAdversarialPrefixLookalikeNamespacesNeverShareAnID(t *testing.T) {
	pairs := [][2]string{
		{"a", "b"}, {"a-b", "c"}, {"a", "b-c"}, {"a", "b.c"}, {"a-b", "c.d"},
		{"ns", "sa"}, {"sa", "ns"}, {"a", "sa"}, {"ns", "a"}, {"b", "db"}, {"a", "db"},
	}
	templates := []string{
		"",
		"ns/{namespace}/sa/{serviceAccount}/x",
		"ns/{namespace}/sa/{serviceAccount}/ns/a/sa/b",
		"ns/{namespace}/sa/{serviceAccount}/{pool}",
		"ns/{namespace}/sa/{serviceAccount}/{variant}",
		"ns/{namespace}-b/sa/{serviceAccount}/x",
		"ns/{namespace}/sa/{serviceAccount}.c/x",
		"ns/{namespace}/sa/{serviceAccount}-c/x",
		"ns/{namespace}/sa/{serviceAccount}/../x",
		"ns/{namespace}/sa/{serviceAccount}",
		"ns/{namespace}/sa/{serviceAccount}/",
		"/ns/{namespace}/sa/{serviceAccount}/x",
		"//ns/{namespace}/sa/{serviceAccount}/x",
		"ns/{namespace}/sa/{serviceAccount}/x/",
		"ns/{namespace}/sa/{serviceAccount}/%2e%2e",
		"ns/{namespace}/sa/{serviceAccount}/X",
		"ns/{serviceAccount}/sa/{namespace}/x",
		"ns/{namespace}/sa/{namespace}/x",
		"ns/{namespace}{serviceAccount}/sa/{serviceAccount}/x",
		"ns/{namespace}/sa/{serviceAccount}/\u0430",
		"ns/{namespace}/sa/{serviceAccount}/\u200bx",
		"ns/{namespace}/sa/{serviceAccount}/x\x00",
		"ns/{namespace}/sa/{serviceAccount}/x\n",
		"ns/{namespace}/sa/{serviceAccount}/{NAMESPACE}",
		"ns/{namespace}/sa/{serviceAccount}/{ namespace }",
		"ns/{namespace}/sa/{serviceAccount}/{{pool}}",
	}
	owner := map[string][2]string{}
	for _, p := range pairs {
		for _, pool := range []string{"llm", "b", "x", "a.b"} {
			for _, variant := range []string{"v1", "b", "a..b", "X_y"} {
				for _, tmpl := range templates {
					v := Vars{Namespace: p[0], ServiceAccount: p[1], Pool: pool, Variant: variant}
					id, err := Render(attackTD, tmpl, v)
					if err != nil {
						if id != "" {
							t.Fatalf("Render(%q, %+v) returned %q beside error %v", tmpl, v, id, err)
						}
						continue
					}
					want := "spiffe://example.org/ns/" + p[0] + "/sa/" + p[1] + "/"
					if !strings.HasPrefix(id, want) || len(id) == len(want) {
						t.Fatalf("Render(%q, %+v) = %q, outside %q", tmpl, v, id, want)
					}
					if other, ok := owner[id]; ok && other != p {
						t.Fatalf("ID %q rendered for both %v and %v: a DuplicateSPIFFEID across namespaces/SAs", id, other, p)
					}
					owner[id] = p
				}
			}
		}
	}
}

// TestAdversarialRenderedIDTooLongIsRefused: the template is limited to 2048
// characters at admission, but the placeholders expand. A template that
// repeats {serviceAccount} (up to 253 characters each) renders a SPIFFE ID
// far longer than the 2048 bytes the SPIFFE spec says implementations
// SHOULD NOT exceed and the SpiffeEntry CRD refuses (spiffeID maxLength
// 2048). Bad input should get a clear InvalidSPIFFEIDTemplate error from
// Render, not an ID that only the output's admission (SpiffeEntry) or
// nothing at all (ClusterSPIFFEID, whose spiffeIDTemplate has no limit)
// refuses.
func TestAdversarialRenderedIDTooLongIsRefused(t *testing.T) {
	sa := strings.Repeat("s", 63) + "." + strings.Repeat("t", 63) + "." + strings.Repeat("u", 63) + "." + strings.Repeat("v", 61)
	if len(sa) != 253 {
		t.Fatalf("sa length %d", len(sa))
	}
	tmpl := "ns/{namespace}/sa/{serviceAccount}" + strings.Repeat("/{serviceAccount}", 100)
	if len(tmpl) > 2048 {
		t.Fatalf("template itself is %d characters, admission would refuse it", len(tmpl))
	}
	id, err := Render(attackTD, tmpl, Vars{Namespace: "a", ServiceAccount: sa, Pool: "p", Variant: "v"})
	if err == nil {
		t.Fatalf("Render accepted a %d-byte SPIFFE ID from a %d-character template; the SPIFFE spec's limit, and the SpiffeEntry CRD's spiffeID maxLength, is 2048", len(id), len(tmpl))
	}
	var outside *OutsideServiceAccountError
	if errors.As(err, &outside) {
		t.Fatalf("refused for the wrong reason: %v", err)
	}
}
