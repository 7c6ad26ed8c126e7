package spifferegistration

import (
	"fmt"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/template"
	"github.com/trustplane/trustplane/spiffe-operator/internal/workload"
)

// claimTemplates are SPIFFE ID templates of every shape: the workload's
// name whole or in a segment, its kind, both, neither, its account.
var claimTemplates = []string{"{namespace}/{name}/{label:team}", "{namespace}/{kind}-{name}/{label:team}", "{namespace}/{kind}{name}",
	"{namespace}/{kind}/{label:team}", "{namespace}/{label:team}", "x/{serviceAccount}/{name}.{label:team}", "{name}{label:team}"}

// Every SPIFFE ID the template gives another workload of the namespace
// (by its render now, or, for one whose render fails, by any labels) is
// claimed by that workload, whatever the template's shape, and none the
// template gives only the workload itself (the oracle: Render with the
// other's own values, independent of claimant's match).
func TestClaimantFindsTheWorkloadTheTemplateGivesAnID(t *testing.T) {
	w := workload.Workload{Kind: v1alpha1.WorkloadKindDeployment, Namespace: "a", Name: "web", ServiceAccount: "web"}
	others := []workload.Workload{
		{Kind: v1alpha1.WorkloadKindDeployment, Namespace: "a", Name: "web-canary", ServiceAccount: "web"},
		{Kind: v1alpha1.WorkloadKindStatefulSet, Namespace: "a", Name: "web", ServiceAccount: "web"},
		{Kind: v1alpha1.WorkloadKindDaemonSet, Namespace: "a", Name: "we", ServiceAccount: "api"},
	}
	for _, tmpl := range claimTemplates {
		p, serr := compile(&v1alpha1.SpiffeRegistrationSpec{TrustDomain: "example.org", ParentID: "spiffe://example.org/agent", SpiffeIDTemplate: tmpl}, "example.org", "")
		if serr != nil {
			t.Fatal(tmpl, serr)
		}
		idOf := func(o workload.Workload, team string) spiffeid.ID {
			s, err := p.idTemplate.Render(template.Values{Namespace: o.Namespace, ServiceAccount: o.ServiceAccount, Kind: string(o.Kind), Name: o.Name,
				Labels: map[string]string{"team": team}})
			if err != nil {
				t.Fatal(err)
			}
			return spiffeid.RequireFromPath(p.trustDomain, "/"+s)
		}
		for _, o := range others {
			rendering := &currentIDs{owner: map[spiffeid.ID]workloadKey{idOf(o, "pay"): {kind: o.Kind, namespace: o.Namespace, name: o.Name}}}
			failing := &currentIDs{failing: map[string][]workload.Workload{"a": {o}}}
			for name, c := range map[string]*currentIDs{"renders": rendering, "fails": failing} {
				if _, ok := p.claimant(idOf(o, "pay"), w, c); !ok {
					t.Errorf("%s: %s %s (%s) is given %s, claimant misses it", tmpl, o, name, o.ServiceAccount, idOf(o, "pay"))
				}
			}
		}
		// The workload's own ID, when no other could have it.
		own := idOf(w, "pay")
		self := &currentIDs{owner: map[spiffeid.ID]workloadKey{own: {kind: w.Kind, namespace: w.Namespace, name: w.Name}},
			failing: map[string][]workload.Workload{"a": {w}}}
		if who, ok := p.claimant(own, w, self); ok {
			t.Errorf("%s: the workload's own %s is claimed by %s", tmpl, own, who)
		}
	}
}

// A namespace of many workloads whose render fails costs a record a
// bounded number of template matches (maxFailingChecks), whatever the
// template: the first pass after a start judges up to 100 records.
func TestClaimantCostIsBounded(t *testing.T) {
	w := workload.Workload{Kind: v1alpha1.WorkloadKindDeployment, Namespace: "a", Name: "web", ServiceAccount: "web"}
	var failing []workload.Workload
	for i := range 10000 {
		failing = append(failing, workload.Workload{Kind: v1alpha1.WorkloadKindStatefulSet, Namespace: "a", Name: fmt.Sprintf("w%d", i),
			ServiceAccount: fmt.Sprintf("sa%d", i)})
	}
	c := &currentIDs{failing: map[string][]workload.Workload{"a": failing}}
	for _, tmpl := range claimTemplates {
		p, serr := compile(&v1alpha1.SpiffeRegistrationSpec{TrustDomain: "example.org", ParentID: "spiffe://example.org/agent", SpiffeIDTemplate: tmpl}, "example.org", "")
		if serr != nil {
			t.Fatal(tmpl, serr)
		}
		id := spiffeid.RequireFromString("spiffe://example.org/a/w1w2w3w4w5w6w7w8w9w10w11w12w13w14w15w16w17w18w19w20/pay")
		start := time.Now()
		for range 100 {
			p.claimant(id, w, c)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: 100 records against 10,000 failing workloads took %v", tmpl, d)
		}
	}
}
