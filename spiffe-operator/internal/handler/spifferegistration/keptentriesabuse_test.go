package spifferegistration

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/trustplane/trustplane/common/controller"
	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/workload"
)

// TestAWorkloadReCreatedBeforeThePassDoesNotLaunderTheOldEntryIntoItsRecord:
// whoever may delete and create Deployments in the namespace deletes the
// failing web (which keeps its last good entry /a/web/pay) and creates a
// new web (another UID, no team label) before the policy's next pass. The
// new web must not inherit the old one's last good entry, in the process
// or through the status record. On the old code the memo passed it on by
// name and the record then named the new UID, so the new web kept the
// deleted one's identity across restarts and rollouts.
func TestAWorkloadReCreatedBeforeThePassDoesNotLaunderTheOldEntryIntoItsRecord(t *testing.T) {
	ctx := context.Background()
	e, p, web := failingWeb(ctx, t, nil)
	if err := e.c.Delete(ctx, web); err != nil {
		t.Fatal(err)
	}
	again := deploy("a", "web", "other", map[string]string{"app": "web"})
	again.UID = k8stypes.UID("uid-web-2")
	if err := e.c.Create(ctx, again); err != nil {
		t.Fatal(err)
	}
	_ = e.h.CreateOrUpdate(ctx, p)
	for _, rec := range p.Status.KeptEntries {
		if rec.UID == "uid-web-2" {
			t.Errorf("the status records the deleted web's entry %s as the last good entry of the re-created web (UID %s)",
				rec.SpiffeID, rec.UID)
		}
	}
	e.h = restarted(e)
	_ = e.h.CreateOrUpdate(ctx, p)
	rollOut(ctx, t, e, "")
	_ = e.h.CreateOrUpdate(ctx, p)
	if got := paths(e.api); len(got) != 0 {
		t.Errorf("after a restart and a rollout the re-created web (which never rendered) still has the deleted web's identity: SPIRE holds %v", got)
	}
}

// TestARecordedEntryFollowsThePolicysNewFixedParent: web's render fails
// and its last good entry is recorded; the admin then moves the policy to
// another fixed parent (from a fixed one, or from per-node parents). After
// a restart the kept entry hangs under the new parent. On the old code it
// stayed under the old agent (which could go on issuing web's identity
// while the tenant kept the render failing) or, from per-node parents,
// came back with no parent at all.
func TestARecordedEntryFollowsThePolicysNewFixedParent(t *testing.T) {
	for _, tc := range []struct{ name, node string }{
		{"from one fixed parent to another", ""},
		{"from per-node parents to a fixed parent", "n1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			e, p, _ := failingWebOn(ctx, t, tc.node, nil)
			p.Spec.ParentIDTemplate = ""
			p.Spec.ParentID = "spiffe://example.org/agent2"
			p.Generation = 2
			e.h = restarted(e)
			_ = e.h.CreateOrUpdate(ctx, p)
			rollOut(ctx, t, e, tc.node)
			_ = e.h.CreateOrUpdate(ctx, p)
			if got, want := entriesWithParents(e), []string{"/a/web/pay /agent2"}; !slices.Equal(got, want) {
				t.Errorf("the policy's parent is now spiffe://example.org/agent2, yet SPIRE holds web's kept entry as %v, want %v", got, want)
			}
			for _, rec := range p.Status.KeptEntries {
				if rec.ParentID != "spiffe://example.org/agent2" {
					t.Errorf("the status records web's entry under parent %q, not the policy's parent", rec.ParentID)
				}
			}
		})
	}
}

// TestATenantCannotEvictAnotherNamespacesKeptEntryFromTheStatus: a tenant
// of namespace z creates 100 DaemonSets that render once and then fail;
// "DaemonSet" sorts before "Deployment". Namespace a's record of web must
// stay, and web keep its identity across a restart and a rollout. On the
// old code the first 100 records by kind, namespace and name were kept, so
// z's pushed a's out.
func TestATenantCannotEvictAnotherNamespacesKeptEntryFromTheStatus(t *testing.T) {
	ctx := context.Background()
	e, p, _ := failingWeb(ctx, t, func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.WorkloadKinds = []v1alpha1.WorkloadKind{v1alpha1.WorkloadKindDeployment, v1alpha1.WorkloadKindDaemonSet}
	})
	want := entriesWithParents(e)
	if err := e.c.Create(ctx, ns("z", map[string]string{"spiffe": "on", "kubernetes.io/metadata.name": "z"})); err != nil {
		t.Fatal(err)
	}
	var sets []*appsv1.DaemonSet
	for i := range maxKeptEntries {
		ds := &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: "z", Name: fmt.Sprintf("ds-%03d", i), UID: k8stypes.UID(fmt.Sprintf("uid-ds-%03d", i)),
				Labels: map[string]string{"team": "x"}},
			Spec: appsv1.DaemonSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("ds-%03d", i)}},
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{ServiceAccountName: "ds"}},
			},
		}
		if err := e.c.Create(ctx, ds); err != nil {
			t.Fatal(err)
		}
		sets = append(sets, ds)
	}
	_ = e.h.CreateOrUpdate(ctx, p) // the DaemonSets render once
	for _, ds := range sets {
		delete(ds.Labels, "team")
		if err := e.c.Update(ctx, ds); err != nil {
			t.Fatal(err)
		}
	}
	_ = e.h.CreateOrUpdate(ctx, p) // and now fail, keeping their last good entries
	if !slices.ContainsFunc(p.Status.KeptEntries, func(r v1alpha1.KeptEntry) bool { return r.Namespace == "a" && r.Name == "web" }) {
		t.Errorf("namespace z's tenant pushed namespace a's record of web out of status.keptEntries (%d records, first %s %s/%s)",
			len(p.Status.KeptEntries), p.Status.KeptEntries[0].Kind, p.Status.KeptEntries[0].Namespace, p.Status.KeptEntries[0].Name)
	}
	e.h = restarted(e)
	_ = e.h.CreateOrUpdate(ctx, p)
	rollOut(ctx, t, e, "")
	_ = e.h.CreateOrUpdate(ctx, p)
	var got []string
	for _, x := range entriesWithParents(e) {
		if slices.Contains(want, x) {
			got = append(got, x)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("after a restart and a rollout web lost its identity %v to another namespace's records", want)
	}
}

// TestAnIncrementalPassThatChangesTheRecordsDoesNotLetItsStatusWait: the
// incremental pass that first records web's last good entry must write its
// status at once. On the old code it let the write wait (the parents held
// were unchanged), and a restart in that window, with other workloads'
// events holding the write back, lost the record.
func TestAnIncrementalPassThatChangesTheRecordsDoesNotLetItsStatusWait(t *testing.T) {
	ctx := context.Background()
	web := deploy("a", "web", "web", map[string]string{"app": "web"})
	web.UID = "uid-web"
	web.Labels["team"] = "pay"
	e := retainingEnv(t, ns("a", map[string]string{"spiffe": "on", "kubernetes.io/metadata.name": "a"}), web,
		runningPod("a", "web-1", "web", "", map[string]string{"app": "web"}))
	e.h.Lister, e.h.Dirty = workload.ReaderLister{Reader: e.c}, NewDirty()
	p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) { s.SpiffeIDTemplate = "{namespace}/{name}/{label:team}" })
	p.Generation = 1
	if err := e.h.CreateOrUpdate(ctx, p); err != nil || len(p.Status.KeptEntries) != 0 {
		t.Fatalf("setup: %v, %+v", err, p.Status.KeptEntries)
	}
	delete(web.Labels, "team")
	if err := e.c.Update(ctx, web); err != nil {
		t.Fatal(err)
	}
	e.h.Dirty.Workload(p.Name, v1alpha1.WorkloadKindDeployment, "a", "web")
	pass, notes := controller.WithEventPassNotes(ctx)
	_ = e.h.CreateOrUpdate(pass, p)
	if len(p.Status.KeptEntries) != 1 {
		t.Fatalf("setup: the incremental pass records %+v, want web's last good entry", p.Status.KeptEntries)
	}
	if notes.StatusMayWait() {
		t.Errorf("the pass that first records web's last good entry in status.keptEntries lets its status wait; a restart meanwhile loses the record")
	}
}

// TestAServiceLookupErrorIsNotForgottenByTheNextWorkloads: with
// autoPopulateDNSNames, a failed Service lookup for one namespace's
// workload must fail the pass and keep its entry. On the old code the next
// workload's successful lookup overwrote the error, the failing workload
// was left out of the desired set, and its entry was deleted: whoever
// could make one namespace's lookup fail took its identities away.
func TestAServiceLookupErrorIsNotForgottenByTheNextWorkloads(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), ns("b", map[string]string{"spiffe": "on"}),
		deploy("a", "web", "web", map[string]string{"app": "web"}), deploy("b", "api", "api", map[string]string{"app": "api"}))
	failing := ""
	e.h.ServiceNames = func(_ context.Context, namespace string, _ map[string]string) ([]string, error) {
		if namespace == failing {
			return nil, fmt.Errorf("list services of %s: the API server is unavailable", namespace)
		}
		return []string{"svc." + namespace + ".svc"}, nil
	}
	p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) { s.AutoPopulateDNSNames = true })
	if err := e.h.CreateOrUpdate(ctx, p); err != nil || len(paths(e.api)) != 2 {
		t.Fatalf("setup: %v, entries %v", err, sortedPaths(e.api))
	}
	failing = "a"
	err := e.h.CreateOrUpdate(ctx, p)
	if got := sortedPaths(e.api); !slices.Equal(got, []string{"/ns/a/sa/web", "/ns/b/sa/api"}) {
		t.Errorf("the Service lookup of namespace a failed (pass error %v), and the pass deleted a's entry: SPIRE holds %v", err, got)
	}
}

// TestAForgedRecordGivesNoIdentityTheTemplateNeverRenders: the status
// records each failing workload's last good entry, which an operator that
// restarts takes back. Whoever may write the policy's status (the
// operator's own service account token) rewrites web's record to another
// namespace's SPIFFE ID, a DNS name of another service and another
// service account of web's namespace. After a restart and a rollout, web's
// pods must not get that identity: a record counts only where the policy's
// template could have rendered it for web. On the old code SPIRE then held
// /payments/sa/db for web's pods.
func TestAForgedRecordGivesNoIdentityTheTemplateNeverRenders(t *testing.T) {
	ctx := context.Background()
	for name, forge := range map[string]func(*v1alpha1.KeptEntry){
		"another namespace's SPIFFE ID":  func(r *v1alpha1.KeptEntry) { r.SpiffeID = "spiffe://example.org/payments/sa/db" },
		"a DNS name no template renders": func(r *v1alpha1.KeptEntry) { r.DNSNames = []string{"db.payments.svc"} },
		"another service account": func(r *v1alpha1.KeptEntry) {
			for i, s := range r.Selectors {
				if s == "k8s:sa:web" {
					r.Selectors[i] = "k8s:sa:admin"
				}
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			e, p, _ := failingWeb(ctx, t, nil)
			if !slices.Contains(p.Status.KeptEntries[0].Selectors, "k8s:sa:web") {
				t.Fatalf("setup: the record's selectors %v", p.Status.KeptEntries[0].Selectors)
			}
			forge(&p.Status.KeptEntries[0])
			e.h = restarted(e)
			_ = e.h.CreateOrUpdate(ctx, p)
			rollOut(ctx, t, e, "")
			_ = e.h.CreateOrUpdate(ctx, p)
			all, err := e.api.ListAll(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, en := range all {
				if en.SpiffeId.Path != "/a/web/pay" || len(en.DnsNames) > 0 || !slices.ContainsFunc(en.Selectors, func(s *types.Selector) bool {
					return s.Type == "k8s" && s.Value == "sa:web"
				}) {
					t.Errorf("after a restart SPIRE holds a forged record's entry: %s, DNS names %v, selectors %v", en.SpiffeId.Path, en.DnsNames, en.Selectors)
				}
			}
		})
	}
}

// TestARecordSPIREHoldsIsKeptAfterATemplateEdit: a template edit makes
// web's render fail, so web keeps its last good entry, which the status
// records. After a restart the record no longer matches the policy's
// template, but SPIRE holds the entry under the policy's own ID, which
// only the operator can have written: web keeps its identity across the
// restart and a rollout. The edited templates but the first keep the
// template's shape ({namespace} first): the first version of the check
// that such a record is no other workload's ("none the template renders
// for any workload of the account") rendered {name} and {label:unit} as
// wildcards, so a/web/pay matched a/<label>/<any name>, and the
// operator's own record was dropped (seen failing); the check now looks
// at what the template renders for the workloads that exist.
func TestARecordSPIREHoldsIsKeptAfterATemplateEdit(t *testing.T) {
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
