package spifferegistration

import (
	"context"
	"slices"
	"testing"
)

// TestTheOwnRecordSurvivesASameShapeTemplateEdit: the scenario of
// TestARecordSPIREHoldsIsKeptAfterATemplateEdit (web renders /a/web/pay,
// then a template edit that names a label web lacks makes its render fail,
// and it keeps its last good entry, which the operator records), with the
// edited template starting with {namespace} rather than a literal:
// "{namespace}/{label:unit}/{name}". After a restart SPIRE holds the entry
// under the policy's own ID; the first version of the check that it is no
// other workload's ("none the template renders for any workload of the
// account") rendered {name} and {label:unit} as wildcards, so a/web/pay
// matched a/<label>/<any name> and the operator's own record was dropped:
// the rollout then took web's identity away. The check now looks at the
// policy's workloads of the account that exist (no "pay" here).
func TestTheOwnRecordSurvivesASameShapeTemplateEdit(t *testing.T) {
	for _, tmpl := range []string{"teams/{label:unit}/{name}", "{namespace}/{label:unit}/{name}", "{namespace}/{label:team}/{name}"} {
		t.Run(tmpl, func(t *testing.T) {
			ctx := context.Background()
			e, p, web := failingWeb(ctx, t, nil)
			web.Labels["team"] = "pay"
			if err := e.c.Update(ctx, web); err != nil {
				t.Fatal(err)
			}
			if err := e.h.CreateOrUpdate(ctx, p); err != nil || !slices.Equal(paths(e.api), []string{"/a/web/pay"}) {
				t.Fatalf("setup: web renders again: %v, %v", err, paths(e.api))
			}
			if tmpl == "{namespace}/{label:team}/{name}" {
				delete(web.Labels, "team") // the tenant drops the label again
				if err := e.c.Update(ctx, web); err != nil {
					t.Fatal(err)
				}
			}
			p.Spec.SpiffeIDTemplate = tmpl
			p.Generation++
			if err := e.h.CreateOrUpdate(ctx, p); err == nil {
				t.Fatal("setup: web's render was to fail under the new template")
			}
			if len(p.Status.KeptEntries) != 1 || p.Status.KeptEntries[0].SpiffeID != "spiffe://example.org/a/web/pay" {
				t.Fatalf("setup: the status records %+v", p.Status.KeptEntries)
			}
			restartAndRollOut(ctx, t, e, p)
			if got := paths(e.api); !slices.Equal(got, []string{"/a/web/pay"}) {
				t.Errorf("template edited to %q, then a restart and a rollout: SPIRE holds %v, want web's last good entry /a/web/pay (status keptEntries %+v)",
					tmpl, got, p.Status.KeptEntries)
			}
		})
	}
}
