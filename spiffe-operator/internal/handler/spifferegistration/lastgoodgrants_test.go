package spifferegistration

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// TestALastGoodEntryKeepsNoGrantTheCurrentSpecWithdrew: one edit of a
// policy withdraws a grant (admin, downstream, a federated trust domain)
// and also makes a workload's render fail (its new template names a label
// the workload lacks). The workload keeps its last good entry, its
// identity, but not the withdrawn grant: on the old code the entry kept
// admin, downstream or the trust domain, which the policy no longer gave.
func TestALastGoodEntryKeepsNoGrantTheCurrentSpecWithdrew(t *testing.T) {
	for _, tc := range []struct {
		name          string
		grant, revoke func(*v1alpha1.SpiffeRegistrationSpec)
		before, after string
	}{
		{"admin", func(s *v1alpha1.SpiffeRegistrationSpec) { s.Admin = true }, func(s *v1alpha1.SpiffeRegistrationSpec) { s.Admin = false },
			"admin=true downstream=false federatesWith=[]", "admin=false downstream=false federatesWith=[]"},
		{"downstream", func(s *v1alpha1.SpiffeRegistrationSpec) { s.Downstream = true }, func(s *v1alpha1.SpiffeRegistrationSpec) { s.Downstream = false },
			"admin=false downstream=true federatesWith=[]", "admin=false downstream=false federatesWith=[]"},
		{"a federated trust domain", func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.FederatesWith = []v1alpha1.TrustDomainName{"one.example", "two.example"}
		},
			func(s *v1alpha1.SpiffeRegistrationSpec) { s.FederatesWith = []v1alpha1.TrustDomainName{"two.example"} },
			"admin=false downstream=false federatesWith=[one.example two.example]", "admin=false downstream=false federatesWith=[two.example]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			web := deploy("a", "web", "web", map[string]string{"app": "web"})
			web.Labels["team"] = "pay"
			e := newEnv(t, ns("a", map[string]string{"spiffe": "on", "kubernetes.io/metadata.name": "a"}), web)
			p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
				s.SpiffeIDTemplate = "{namespace}/{name}/{label:team}"
				s.NamespaceSelector.MatchLabels = map[string]string{"kubernetes.io/metadata.name": "a"}
				s.ServiceAccountName = "web"
				tc.grant(s)
			})
			p.Generation = 1
			if err := e.h.CreateOrUpdate(ctx, p); err != nil || !slices.Equal(grantsOf(e), []string{"/a/web/pay " + tc.before}) {
				t.Fatalf("setup: %v, entries %v", err, grantsOf(e))
			}
			tc.revoke(&p.Spec)
			p.Spec.SpiffeIDTemplate = "{namespace}/{name}/{label:tier}"
			p.Generation = 2
			if err := e.h.CreateOrUpdate(ctx, p); err == nil {
				t.Fatal("setup: the edit was to make web's render fail")
			}
			if got := grantsOf(e); !slices.Equal(got, []string{"/a/web/pay " + tc.after}) {
				t.Errorf("the edit withdrew the grant and web keeps its last good entry, yet SPIRE holds %v, want the entry with %s",
					got, tc.after)
			}
		})
	}
}

// grantsOf lists each entry in SPIRE as its SPIFFE ID path and grants.
func grantsOf(e *env) []string {
	var out []string
	for _, x := range e.api.All() {
		fed := make([]string, 0, len(x.FederatesWith))
		fed = append(fed, x.FederatesWith...)
		slices.Sort(fed)
		out = append(out, fmt.Sprintf("%s admin=%t downstream=%t federatesWith=%v", x.SpiffeId.Path, x.Admin, x.Downstream, fed))
	}
	slices.Sort(out)
	return out
}
