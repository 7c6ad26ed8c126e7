package spifferegistration

import (
	"context"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// entriesOf lists "<path> <selectors...>" of SPIRE's entries.
func entriesOf(e *env) []string {
	var out []string
	for _, x := range e.api.All() {
		s := x.SpiffeId.Path
		for _, sel := range x.Selectors {
			s += " " + sel.Type + ":" + sel.Value
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// TestAKeptRecordTakesNoEntryOfAWorkloadThatMovedAccount: api (same
// matchLabels as web) ran under web's service account, then moved to its
// own service account "api" while no operator ran. SPIRE still holds the
// policy's entry /a/api/pay for account a/web. A forged record gave
// failing web that entry: the first version of the check looked only at
// the policy's workloads of a/web, so it never saw api, which exists and
// to which the current template renders /a/api/pay. Every workload of the
// namespace counts now.
func TestAKeptRecordTakesNoEntryOfAWorkloadThatMovedAccount(t *testing.T) {
	ctx := context.Background()
	e, p, _ := failingWeb(ctx, t, nil)
	api := forgeWebsRecordAsAPIs(ctx, t, e, p, map[string]string{"app": "web"})
	// Operator down: api moves to its own service account.
	api.Spec.Template.Spec.ServiceAccountName = "api"
	if err := e.c.Update(ctx, api); err != nil {
		t.Fatal(err)
	}
	e.h = restarted(e)
	_ = e.h.CreateOrUpdate(ctx, p)
	if recordsAPIsIdentity(p) {
		t.Errorf("after a restart the status records api's identity (api exists, account a/api) as web's: %+v", p.Status.KeptEntries)
	}
	if err := e.c.Delete(ctx, runningPod("a", "web-1", "web", "", nil)); err != nil {
		t.Fatal(err)
	}
	_ = e.h.CreateOrUpdate(ctx, p)
	for _, s := range entriesOf(e) {
		if strings.HasPrefix(s, "/a/api/pay ") && slices.Contains(strings.Fields(s), "k8s:sa:web") {
			t.Errorf("no pod of a/web runs, api exists under a/api, yet SPIRE holds api's identity for account a/web: %v", entriesOf(e))
		}
	}
}

// TestAKeptRecordTakesNoEntryOfADeselectedWorkload: the policy selects
// workloads by the label app=web; api (same matchLabels as web) loses it
// while no operator runs. api still exists; SPIRE still holds its entry.
// The first version of the check looked only at the workloads the policy
// selects, and let the forged record through.
func TestAKeptRecordTakesNoEntryOfADeselectedWorkload(t *testing.T) {
	ctx := context.Background()
	e, p, _ := failingWeb(ctx, t, func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.WorkloadSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	})
	api := forgeWebsRecordAsAPIs(ctx, t, e, p, map[string]string{"app": "web"})
	api.Labels["app"] = "api-legacy" // deselected, still exists
	if err := e.c.Update(ctx, api); err != nil {
		t.Fatal(err)
	}
	e.h = restarted(e)
	_ = e.h.CreateOrUpdate(ctx, p)
	if recordsAPIsIdentity(p) {
		t.Errorf("after a restart the status records deselected api's identity as web's: %+v", p.Status.KeptEntries)
	}
	if err := e.c.Delete(ctx, runningPod("a", "web-1", "web", "", nil)); err != nil {
		t.Fatal(err)
	}
	_ = e.h.CreateOrUpdate(ctx, p)
	if got := paths(e.api); slices.Contains(got, "/a/api/pay") {
		t.Errorf("api is deselected and no pod runs, yet SPIRE holds %v", got)
	}
}

// TestTheOwnRecordSurvivesAnEditToALabelOnlyTemplate: a realistic
// template migration from {name} to a label ("{namespace}/{name}/{label:team}"
// -> "{namespace}/{label:component}/{label:team}"). web lacks the new label
// and keeps its last good /a/web/pay, which SPIRE holds under the policy's
// ID. Another workload of the same (shared) service account, worker, has
// the label and renders fine. A check that matched a/web/pay against
// worker with every label a wildcard would drop web's own record (the
// policy could render it for web, which is judged first), and the
// rollout would take web's identity away.
func TestTheOwnRecordSurvivesAnEditToALabelOnlyTemplate(t *testing.T) {
	ctx := context.Background()
	e, p, web := failingWeb(ctx, t, nil)
	web.Labels["team"] = "pay"
	if err := e.c.Update(ctx, web); err != nil {
		t.Fatal(err)
	}
	worker := deploy("a", "worker", "web", map[string]string{"app": "worker"})
	worker.UID, worker.Labels["team"], worker.Labels["component"] = "uid-worker", "pay", "worker"
	if err := e.c.Create(ctx, worker); err != nil {
		t.Fatal(err)
	}
	if err := e.h.CreateOrUpdate(ctx, p); err != nil {
		t.Fatalf("setup: %v", err)
	}
	p.Spec.SpiffeIDTemplate = "{namespace}/{label:component}/{label:team}"
	p.Generation++
	if err := e.h.CreateOrUpdate(ctx, p); err == nil {
		t.Fatal("setup: web's render was to fail under the new template")
	}
	if len(p.Status.KeptEntries) != 1 || p.Status.KeptEntries[0].SpiffeID != "spiffe://example.org/a/web/pay" {
		t.Fatalf("setup: the status records %+v", p.Status.KeptEntries)
	}
	if got := paths(e.api); !slices.Contains(got, "/a/web/pay") {
		t.Fatalf("setup: before the restart SPIRE holds %v", got)
	}
	restartAndRollOut(ctx, t, e, p)
	if got := paths(e.api); !slices.Contains(got, "/a/web/pay") {
		t.Errorf("template edited to a label-only one, then a restart and a rollout: SPIRE holds %v, want web's last good entry /a/web/pay kept (status keptEntries %+v)",
			got, p.Status.KeptEntries)
	}
}

// TestTheOwnRecordSurvivesAMigrationFromAnAppLabelToNames: identity by
// app label ("{namespace}/{label:app}/{label:team}"): web and web-canary
// (app=web, one service account) both hold /a/web/pay. The template moves
// to names ("{namespace}/{name}/{label:unit}"); web has unit, web-canary
// not, so web-canary keeps its last good /a/web/pay, which SPIRE holds
// under the policy's ID. After a restart the first version of the check
// matched /a/web/pay against web with {label:unit} a wildcard (web really
// renders /a/web/checkout), dropped web-canary's own record, and its
// rollout lost its identity (seen failing, as the one before).
func TestTheOwnRecordSurvivesAMigrationFromAnAppLabelToNames(t *testing.T) {
	ctx := context.Background()
	web := deploy("a", "web", "web", map[string]string{"app": "web", "track": "stable"})
	web.UID, web.Labels["team"], web.Labels["unit"] = "uid-web", "pay", "checkout"
	canary := deploy("a", "web-canary", "web", map[string]string{"app": "web", "track": "canary"})
	canary.UID, canary.Labels["app"], canary.Labels["team"] = "uid-canary", "web", "pay"
	e := retainingEnv(t, ns("a", map[string]string{"spiffe": "on", "kubernetes.io/metadata.name": "a"}), web, canary,
		runningPod("a", "web-1", "web", "", map[string]string{"app": "web", "track": "stable"}),
		runningPod("a", "canary-1", "web", "", map[string]string{"app": "web", "track": "canary"}))
	p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) { s.SpiffeIDTemplate = "{namespace}/{label:app}/{label:team}" })
	p.Generation = 1
	if err := e.h.CreateOrUpdate(ctx, p); err != nil || !slices.Equal(paths(e.api), []string{"/a/web/pay", "/a/web/pay"}) {
		t.Fatalf("setup: %v, %v", err, paths(e.api))
	}
	p.Spec.SpiffeIDTemplate = "{namespace}/{name}/{label:unit}"
	p.Generation++
	if err := e.h.CreateOrUpdate(ctx, p); err == nil {
		t.Fatal("setup: web-canary's render was to fail")
	}
	if len(p.Status.KeptEntries) != 1 || p.Status.KeptEntries[0].Name != "web-canary" || p.Status.KeptEntries[0].SpiffeID != "spiffe://example.org/a/web/pay" {
		t.Fatalf("setup: status records %+v", p.Status.KeptEntries)
	}
	before := entriesOf(e)
	e.h = restarted(e)
	_ = e.h.CreateOrUpdate(ctx, p)
	if err := e.c.Delete(ctx, runningPod("a", "canary-1", "web", "", nil)); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Create(ctx, runningPod("a", "canary-2", "web", "", map[string]string{"app": "web", "track": "canary"})); err != nil {
		t.Fatal(err)
	}
	_ = e.h.CreateOrUpdate(ctx, p)
	if got := entriesOf(e); !slices.Contains(got, "/a/web/pay k8s:ns:a k8s:pod-label:app:web k8s:pod-label:track:canary k8s:sa:web") {
		t.Errorf("after the edit, before a restart SPIRE held %v; after a restart and web-canary's rollout it holds %v: web-canary's own last good entry was dropped (status %+v)",
			before, got, p.Status.KeptEntries)
	}
}

// forgeWebAs rewrites web's record in p's status (a status write only) as
// the entry SPIRE holds for the policy under SPIFFE ID path.
func forgeWebAs(t *testing.T, e *env, p *v1alpha1.SpiffeRegistration, path string) {
	t.Helper()
	var sels []string
	for _, se := range e.api.All() {
		if se.SpiffeId.Path == path {
			for _, s := range se.Selectors {
				sels = append(sels, s.Type+":"+s.Value)
			}
		}
	}
	if sels == nil {
		t.Fatalf("setup: SPIRE holds no %s: %v", path, paths(e.api))
	}
	i := slices.IndexFunc(p.Status.KeptEntries, func(k v1alpha1.KeptEntry) bool { return k.Name == "web" })
	if i < 0 {
		t.Fatalf("setup: no record of web: %+v", p.Status.KeptEntries)
	}
	p.Status.KeptEntries[i].SpiffeID, p.Status.KeptEntries[i].Selectors = "spiffe://example.org"+path, sels
}

// TestAKeptRecordTakesNoEntryOfAWorkloadOfADeselectedKind: api is a
// StatefulSet (web's account, same matchLabels); the policy selected Deployments and StatefulSets, then is edited to Deployments
// only while no operator runs. api exists and the template renders
// /a/api/pay for it now; the first version of the check listed only the
// policy's kinds, and let the forged record through (seen failing).
func TestAKeptRecordTakesNoEntryOfAWorkloadOfADeselectedKind(t *testing.T) {
	ctx := context.Background()
	e, p := failingWebBesidesAPI(ctx, t, v1alpha1.WorkloadKindStatefulSet, "{namespace}/{name}/{label:team}")
	forgeWebAs(t, e, p, "/a/api/pay")
	// Operator down: the policy is edited to select Deployments only.
	p.Spec.WorkloadKinds = []v1alpha1.WorkloadKind{v1alpha1.WorkloadKindDeployment}
	p.Generation++
	e.h = restarted(e)
	_ = e.h.CreateOrUpdate(ctx, p)
	if recordsAPIsIdentity(p) {
		t.Errorf("StatefulSet api exists and the template renders /a/api/pay for it, yet after a restart the status records it as web's: %+v; SPIRE: %v",
			p.Status.KeptEntries, entriesOf(e))
	}
}

// TestTheOwnRecordSurvivesWhenTheTemplateRendersItsIDForItselfToo: the
// default account-wide template ns/{namespace}/sa/{serviceAccount}; a DNS name template naming a label is added, so entries select pods by
// label. web lacks the label: its render fails and it keeps its
// account-wide /ns/a/sa/web, the very SPIFFE ID the template renders for
// web now. Another workload of the account renders it too; the first
// version of claimant's owner map held whichever was listed last, so
// web's own record survived a restart when the other sorted before "web"
// and was dropped otherwise (seen failing).
func TestTheOwnRecordSurvivesWhenTheTemplateRendersItsIDForItselfToo(t *testing.T) {
	for _, other := range []string{"api", "worker"} {
		t.Run(other, func(t *testing.T) {
			ctx := context.Background()
			web := deploy("a", "web", "web", map[string]string{"app": "web"})
			web.UID = "uid-web"
			o := deploy("a", other, "web", map[string]string{"app": other})
			o.UID, o.Labels["host"] = k8stypes.UID("uid-"+other), other
			e := retainingEnv(t, ns("a", map[string]string{"spiffe": "on", "kubernetes.io/metadata.name": "a"}), web, o,
				runningPod("a", "web-1", "web", "", map[string]string{"app": "web"}),
				runningPod("a", other+"-1", "web", "", map[string]string{"app": other}))
			p := newPolicy(nil)
			p.Generation = 1
			if err := e.h.CreateOrUpdate(ctx, p); err != nil {
				t.Fatalf("setup: %v", err)
			}
			p.Spec.DNSNameTemplates = []string{"{label:host}.example.com"}
			p.Generation++
			if err := e.h.CreateOrUpdate(ctx, p); err == nil || len(p.Status.KeptEntries) != 1 ||
				p.Status.KeptEntries[0].SpiffeID != "spiffe://example.org/ns/a/sa/web" {
				t.Fatalf("setup: web's render was to fail and keep /ns/a/sa/web: %v, %+v", err, p.Status.KeptEntries)
			}
			restartAndRollOut(ctx, t, e, p)
			if !slices.ContainsFunc(p.Status.KeptEntries, func(k v1alpha1.KeptEntry) bool { return k.Name == "web" }) ||
				!slices.Contains(entriesOf(e), "/ns/a/sa/web k8s:ns:a k8s:sa:web") {
				t.Errorf("other workload %q: after a restart and a rollout web's own record (the ID the template renders for web now) is gone: status %+v, SPIRE %v",
					other, p.Status.KeptEntries, entriesOf(e))
			}
		})
	}
}
