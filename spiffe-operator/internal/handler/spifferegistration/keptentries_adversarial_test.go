package spifferegistration

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// restartAndRollOut restarts the operator, passes, rolls web out and
// passes again, as the restart tests do.
func restartAndRollOut(ctx context.Context, t *testing.T, e *env, p *v1alpha1.SpiffeRegistration) {
	t.Helper()
	e.h = restarted(e)
	_ = e.h.CreateOrUpdate(ctx, p)
	rollOut(ctx, t, e, "")
	_ = e.h.CreateOrUpdate(ctx, p)
}

// TestAForgedRecordGetsNoWildcardDNSNameFromALabelTemplate: the
// policy's DNS name template is "{label:team}.example.com", so web (whose
// render fails because it lacks the team label now) could only ever have
// had one host name under example.com, and never a wildcard: render
// refuses "*" as a variable's value (validDNSName), and no label value can
// be "*" anyway. Whoever may write the status records "*.example.com" for
// web; the first version of template.Matches turned the missing label into
// "[^/]+", which matches "*", so after a restart web's pods got a wildcard
// DNS SAN for every host under example.com.
func TestAForgedRecordGetsNoWildcardDNSNameFromALabelTemplate(t *testing.T) {
	ctx := context.Background()
	e, p, _ := failingWeb(ctx, t, func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.DNSNameTemplates = []string{"{label:team}.example.com"}
	})
	p.Status.KeptEntries[0].DNSNames = []string{"*.example.com"}
	restartAndRollOut(ctx, t, e, p)
	for _, en := range e.api.All() {
		for _, d := range en.DnsNames {
			if d == "*.example.com" {
				t.Errorf("after a restart SPIRE holds %s with the forged wildcard DNS name %q, which the template never renders", en.SpiffeId.Path, d)
			}
		}
	}
}

// TestAForgedRecordGetsNoMoreHostNamesThanTemplates: one DNS name
// template renders one name per workload; a forged record lists several
// names that each match the same template (the missing label any one
// label-less text); web's single entry carried them all on the first
// version of the check.
func TestAForgedRecordGetsNoMoreHostNamesThanTemplates(t *testing.T) {
	ctx := context.Background()
	e, p, _ := failingWeb(ctx, t, func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.DNSNameTemplates = []string{"{label:team}.example.com"}
	})
	p.Status.KeptEntries[0].DNSNames = []string{"api.example.com", "db.example.com", "pay.example.com"}
	restartAndRollOut(ctx, t, e, p)
	for _, en := range e.api.All() {
		if len(en.DnsNames) > len(p.Spec.DNSNameTemplates) {
			t.Errorf("after a restart SPIRE holds %s with DNS names %v: more than the policy's %d template(s) can render for one workload",
				en.SpiffeId.Path, en.DnsNames, len(p.Spec.DNSNameTemplates))
		}
	}
}

// TestAForgedRecordCannotDropASelectorTemplatesSelector: the
// policy pins the image its entries' pods must run
// (workloadSelectorTemplates), so a tenant who can run any image under
// web's account still gets web's identity only in pods of that image.
// The first version of couldHaveRendered checked the account and
// matchLabels selectors, not those of the selector templates: a forged
// record without the image selector gave, after a restart, web's identity
// to any image web's pods run.
func TestAForgedRecordCannotDropASelectorTemplatesSelector(t *testing.T) {
	const pinned = "pod-image:registry.example.com/web@sha256:0123456789abcdef"
	ctx := context.Background()
	e, p, _ := failingWeb(ctx, t, func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.WorkloadSelectorTemplates = []string{"k8s:" + pinned}
	})
	rec := &p.Status.KeptEntries[0]
	if !slices.Contains(rec.Selectors, "k8s:"+pinned) {
		t.Fatalf("setup: the record's selectors %v lack the pinned image", rec.Selectors)
	}
	rec.Selectors = slices.DeleteFunc(slices.Clone(rec.Selectors), func(s string) bool { return s == "k8s:"+pinned })
	restartAndRollOut(ctx, t, e, p)
	for _, en := range e.api.All() {
		if !slices.ContainsFunc(en.Selectors, func(s *types.Selector) bool { return s.Type == "k8s" && s.Value == pinned }) {
			t.Errorf("after a restart SPIRE holds %s without the policy's image selector: selectors %v", en.SpiffeId.Path, en.Selectors)
		}
	}
}

// TestTheOperatorsOwnRecordSurvivesALabelValueChange: web renders
// /a/web/pay-fe; its tenant then changes team to ops and removes tier, so
// the render fails and web keeps /a/web/pay-fe, in this process through a
// rollout, and, from the record the operator writes, after a restart and a
// rollout. The check on records must not demand the team label's current
// value (ops), since labels are the tenant's to choose and demanding their
// current value protects nothing (a first version of the check dropped the
// record, and web's pods had no identity after the restart).
func TestTheOperatorsOwnRecordSurvivesALabelValueChange(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart=%t", restart), func(t *testing.T) {
			ctx := context.Background()
			web := deploy("a", "web", "web", map[string]string{"app": "web"})
			web.UID = "uid-web"
			web.Labels["team"], web.Labels["tier"] = "pay", "fe"
			e := retainingEnv(t, ns("a", map[string]string{"spiffe": "on", "kubernetes.io/metadata.name": "a"}), web,
				runningPod("a", "web-1", "web", "", map[string]string{"app": "web"}))
			p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
				s.SpiffeIDTemplate = "{namespace}/{name}/{label:team}-{label:tier}"
			})
			p.Generation = 1
			if err := e.h.CreateOrUpdate(ctx, p); err != nil || !slices.Equal(paths(e.api), []string{"/a/web/pay-fe"}) {
				t.Fatalf("setup: %v, entries %v", err, paths(e.api))
			}
			web.Labels["team"] = "ops"
			delete(web.Labels, "tier")
			if err := e.c.Update(ctx, web); err != nil {
				t.Fatal(err)
			}
			if err := e.h.CreateOrUpdate(ctx, p); err == nil {
				t.Fatal("setup: web's render was to fail")
			}
			if len(p.Status.KeptEntries) != 1 || p.Status.KeptEntries[0].SpiffeID != "spiffe://example.org/a/web/pay-fe" {
				t.Fatalf("setup: the status records %+v", p.Status.KeptEntries)
			}
			if restart {
				restartAndRollOut(ctx, t, e, p)
			} else {
				rollOut(ctx, t, e, "")
				_ = e.h.CreateOrUpdate(ctx, p)
			}
			if got := paths(e.api); !slices.Equal(got, []string{"/a/web/pay-fe"}) {
				t.Errorf("after a rollout SPIRE holds %v, want web's last good entry /a/web/pay-fe", got)
			}
		})
	}
}
