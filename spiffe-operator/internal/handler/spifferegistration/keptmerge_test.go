package spifferegistration

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
)

// Two Deployments with the same selector and service account render one
// entry. The policy then shortens the SVID lifetime, and at the same time
// one of the two stops rendering (its team label removed) and keeps its
// last good entry. The other still renders the entry under the current
// spec: SPIRE must hold it with the current lifetime, whichever of the two
// comes first in the listing (the informer's index has no order).
func TestAnEntryRenderedUnderTheCurrentSpecIsNotOverriddenByAFailingWorkloadsLastGood(t *testing.T) {
	for _, names := range [][2]string{{"a-failing", "b-rendering"}, {"b-failing", "a-rendering"}} {
		t.Run(names[0], func(t *testing.T) {
			ctx := context.Background()
			failing := deploy("a", names[0], "shop", map[string]string{"app": "web"})
			rendering := deploy("a", names[1], "shop", map[string]string{"app": "web"})
			failing.UID, rendering.UID = "uid-failing", "uid-rendering"
			failing.Labels["team"], rendering.Labels["team"] = "pay", "pay"
			e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), failing, rendering)
			p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) { s.SpiffeIDTemplate = "ns/{namespace}/team/{label:team}" })
			p.Generation = 1
			if err := e.h.CreateOrUpdate(ctx, p); err != nil {
				t.Fatal(err)
			}
			if all := e.api.All(); len(all) != 1 || all[0].X509SvidTtl != 3600 {
				t.Fatalf("setup: %v", all)
			}
			p.Spec.X509SVIDTTL = &metav1.Duration{Duration: 5 * time.Minute}
			p.Generation = 2
			delete(failing.Labels, "team")
			if err := e.c.Update(ctx, failing); err != nil {
				t.Fatal(err)
			}
			_ = e.h.CreateOrUpdate(ctx, p)
			_ = e.h.CreateOrUpdate(ctx, p)
			all := e.api.All()
			if len(all) != 1 {
				t.Fatalf("entries %v", all)
			}
			if all[0].X509SvidTtl != 300 {
				t.Errorf("the entry %s that %s renders under the current spec has the lifetime %ds of %s's last good entry, not the policy's 300s",
					all[0].SpiffeId.Path, names[1], all[0].X509SvidTtl, names[0])
			}
		})
	}
}

// What one entry shared by several workloads grants does not depend on
// their order: a failing workload's last good entry (its grants trimmed to
// the policy's, so never broader) merged with a fresh render grants what
// the fresh render grants, first or second.
func TestMergedGrantsDoNotDependOnTheOrder(t *testing.T) {
	fresh := entries.Entry{
		SpiffeID:      spiffeid.RequireFromString("spiffe://example.org/ns/a/sa/web"),
		ParentID:      spiffeid.RequireFromString("spiffe://example.org/agent"),
		Selectors:     []entries.Selector{{Type: "k8s", Value: "ns:a"}, {Type: "k8s", Value: "sa:web"}},
		Admin:         true,
		Downstream:    true,
		FederatesWith: []string{"other.org", "third.org"},
		DNSNames:      []string{"web.a.svc"},
	}
	fresh.Normalize()
	kept := fresh
	kept.Admin, kept.Downstream, kept.FederatesWith, kept.DNSNames = false, false, []string{"other.org"}, []string{"old.a.svc"}
	kept.Normalize()
	a, b := merge([]*entries.Entry{&fresh, &kept}), merge([]*entries.Entry{&kept, &fresh})
	if len(a) != 1 || len(b) != 1 {
		t.Fatalf("merged into %d and %d entries, want 1", len(a), len(b))
	}
	if !reflect.DeepEqual(a[0], b[0]) {
		t.Fatalf("the merged entry depends on the order:\n fresh first: %+v\n kept first:  %+v", *a[0], *b[0])
	}
	got := a[0].Grants()
	if !got.Admin || !got.Downstream || !slices.Equal(got.FederatesWith, fresh.FederatesWith) {
		t.Fatalf("merged grants %+v, want the fresh render's %+v", got, fresh.Grants())
	}
	if !slices.Equal(a[0].DNSNames, []string{"old.a.svc", "web.a.svc"}) {
		t.Fatalf("merged DNS names %v, want both workloads'", a[0].DNSNames)
	}
	if fresh.DNSNames[0] != "web.a.svc" || kept.Admin {
		t.Fatal("merge modified its inputs")
	}

	// Without DNS names to unite, only the grants differ.
	fresh.DNSNames, kept.DNSNames = nil, nil
	for _, order := range [][]*entries.Entry{{&fresh, &kept}, {&kept, &fresh}} {
		m := merge(order)
		if len(m) != 1 || !reflect.DeepEqual(m[0].Grants(), fresh.Grants()) {
			t.Fatalf("merged %+v, want one entry with the fresh render's grants %+v", m, fresh.Grants())
		}
	}
}
