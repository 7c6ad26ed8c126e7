package idtemplate

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// FuzzRenderStaysUnderServiceAccount renders arbitrary templates with
// arbitrary values and checks the rendered ID against an independent
// oracle: parsed as a URL and split on "/", its path must start with the
// whole segments ns, <namespace>, sa, <service account> and go on with at
// least one more segment. A refusal for that reason must be exactly when the
// template rendered a valid path that breaks the rule.
func FuzzRenderStaysUnderServiceAccount(f *testing.F) {
	f.Fuzz(func(t *testing.T, template, namespace, serviceAccount, pool, variant string) {
		td := spiffeid.RequireTrustDomainFromString("example.org")
		got, err := Render(td, template, Vars{Namespace: namespace, ServiceAccount: serviceAccount, Pool: pool, Variant: variant})
		var oe *OutsideServiceAccountError
		if err != nil {
			if got != "" {
				t.Fatalf("Render returned %q with error %v", got, err)
			}
			if errors.As(err, &oe) && oracleUnderServiceAccount(t, "spiffe://example.org/"+strings.TrimPrefix(oe.Path, "/"), namespace, serviceAccount) {
				t.Fatalf("refused %q as outside the service account, but the oracle accepts it", oe.Path)
			}
			return
		}
		if !oracleUnderServiceAccount(t, got, namespace, serviceAccount) {
			t.Fatalf("Render(%q, ns=%q, sa=%q) = %q: not under ns/%s/sa/%s/", template, namespace, serviceAccount, got, namespace, serviceAccount)
		}
	})
}

// oracleUnderServiceAccount is the oracle: it does not use the renderer's own
// parsing, only net/url and string splitting.
func oracleUnderServiceAccount(t *testing.T, id, namespace, serviceAccount string) bool {
	u, err := url.Parse(id)
	if err != nil {
		t.Fatalf("rendered ID %q does not parse as a URL: %v", id, err)
	}
	if u.Scheme != "spiffe" || u.Host != "example.org" {
		t.Fatalf("rendered ID %q left the trust domain", id)
	}
	segs := strings.Split(strings.TrimPrefix(u.EscapedPath(), "/"), "/")
	return len(segs) > 4 && segs[0] == "ns" && segs[1] == namespace && segs[2] == "sa" && segs[3] == serviceAccount
}
