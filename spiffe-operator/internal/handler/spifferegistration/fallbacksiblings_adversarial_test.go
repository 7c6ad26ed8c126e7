package spifferegistration

import (
	"context"
	"fmt"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/workload"
)

// TestARestartKeepsTheEntryOfTwoSiblingsNoPolicyRenders: main selects
// Deployments a/v and a/w, both running as service account shop, and
// renders neither (no team label): the fallback registers the one entry of
// ns a / sa shop for both. After a restart, before main's first pass, both
// are claimUnsure: keepsOwn keeps each, but heldIn counts an unsure
// workload as held, so sharesPods finds each blocked by the other and the
// fallback drops its entry (no pod runs to retain it).
func TestARestartKeepsTheEntryOfTwoSiblingsNoPolicyRenders(t *testing.T) {
	ctx := context.Background()
	e := retainingEnv(t, ns("a", map[string]string{"spiffe": "on"}),
		deploy("a", "v", "shop", map[string]string{"app": "v"}), deploy("a", "w", "shop", map[string]string{"app": "w"}))
	main, fb, pass := mainAndStoredFallback(t, e, teamTemplate)
	pass()
	pass()
	want := []string{"/fallback/ns/a/sa/shop"}
	if got := sortedPaths(e.api); !slices.Equal(got, want) {
		t.Fatalf("precondition: SPIRE holds %v, want %v", got, want)
	}
	storeStatuses(ctx, t, e, main, fb)

	e.h = restarted(e)
	err := e.h.CreateOrUpdate(ctx, fb)
	if got := sortedPaths(e.api); !slices.Equal(got, want) {
		t.Errorf("after a restart, the fallback's pass before main's first left SPIRE holding %v, want %v (err %v, failures %+v)",
			got, want, err, fb.Status.Failures)
	}
	if err != nil {
		t.Errorf("after a restart the fallback's pass fails: %v", err)
	}
}

// TestANewSiblingTakesNoEntryFromAWorkloadNobodyHolds: main cannot render
// Deployment a/v (no team label), so the fallback registers v (ns a / sa
// shop). A tenant creates Deployment a/n, same service account, which main
// cannot render either. If the fallback's pass runs before main's, n is a
// workload main has not met (claimHeld), so sharesPods blocks v, which no
// policy holds: v's only identity is deleted (no pod runs to retain it).
func TestANewSiblingTakesNoEntryFromAWorkloadNobodyHolds(t *testing.T) {
	ctx := context.Background()
	e := retainingEnv(t, ns("a", map[string]string{"spiffe": "on"}), deploy("a", "v", "shop", map[string]string{"app": "v"}))
	_, fb, pass := mainAndStoredFallback(t, e, teamTemplate)
	pass()
	pass()
	want := []string{"/fallback/ns/a/sa/shop"}
	if got := sortedPaths(e.api); !slices.Equal(got, want) {
		t.Fatalf("precondition: SPIRE holds %v, want %v", got, want)
	}
	if err := e.c.Create(ctx, deploy("a", "n", "shop", map[string]string{"app": "n"})); err != nil {
		t.Fatal(err)
	}
	err := e.h.CreateOrUpdate(ctx, fb)
	if got := sortedPaths(e.api); !slices.Equal(got, want) {
		t.Errorf("a new Deployment main cannot render, beside v (which no policy holds), made the fallback delete v's only entry: "+
			"SPIRE holds %v, want %v (err %v)", got, want, err)
	}
}

// TestAnIncrementalPassThatRegistersARefusedEntryTakesItFromTheFallback:
// SPIRE refuses main's entry for web, so main publishes web as unheld
// (refused) and the fallback registers web. SPIRE then takes main's entry
// (a bundle arrives, say) and the tenant edits web: main's incremental pass
// publishes the unheld set before its sync, from the stale spireFailed,
// and publishes again only when the sync fails. web stays "refused" in the
// published set although main now holds its entry, so the fallback keeps
// its own: web's pod holds two identities until main's next full pass.
func TestAnIncrementalPassThatRegistersARefusedEntryTakesItFromTheFallback(t *testing.T) {
	ctx := context.Background()
	webL := map[string]string{"app": "web"}
	d := deploy("a", "web", "web", webL)
	d.Labels["team"] = "pay"
	e := retainingEnv(t, ns("a", map[string]string{"spiffe": "on"}), d, runningPod("a", "web-1", "web", "", webL))
	l := &countingLister{ReaderLister: workload.ReaderLister{Reader: e.c}}
	e.h.Lister, e.h.Dirty = l, NewDirty()
	e.api.Reject["spiffe://example.org"+mainPay] = true
	main, fb, pass := mainAndStoredFallback(t, e, teamTemplate)
	pass()
	pass()
	if got := sortedPaths(e.api); !slices.Equal(got, []string{fallbackForWeb}) {
		t.Fatalf("precondition: SPIRE holds %v", got)
	}
	delete(e.api.Reject, "spiffe://example.org"+mainPay)
	cur := &appsv1.Deployment{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: "a", Name: "web"}, cur); err != nil {
		t.Fatal(err)
	}
	cur.Labels["edited"] = "yes"
	if err := e.c.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	e.h.Dirty.Workload("main", v1alpha1.WorkloadKindDeployment, "a", "web")
	lists := l.lists
	if err := e.h.CreateOrUpdate(ctx, main); err != nil {
		t.Fatalf("main's pass: %v", err)
	}
	if l.lists != lists {
		t.Fatalf("precondition: main's pass should be incremental")
	}
	if got := sortedPaths(e.api); !slices.Contains(got, mainPay) {
		t.Fatalf("precondition: main's pass should register web now: SPIRE holds %v", got)
	}
	// The fallback's passes (it wakes on every event); the old pod rolls.
	_ = e.h.CreateOrUpdate(ctx, fb)
	rollWeb(ctx, t, e)
	_ = e.h.CreateOrUpdate(ctx, fb)
	if got := selectingPod(e.api.All(), "a", "web", webL); len(got) > 1 {
		t.Errorf("web's new pod holds two identities, main's and the fallback's: %v", got)
	}
}

// TestATerminatingWorkloadTakesNoEntryFromItsSibling: main (per-account
// template) selects Deployments labelled tier=managed. Deployment a/x,
// tier=managed, runs as shop and is being deleted (a finalizer holds it):
// main no longer selects it and holds nothing for it. heldIn does not skip
// workloads being deleted, so it counts x as held by main, and the
// fallback leaves Deployment a/v (same account, which no policy holds)
// unregistered for as long as x stays Terminating.
func TestATerminatingWorkloadTakesNoEntryFromItsSibling(t *testing.T) {
	ctx := context.Background()
	x := deploy("a", "x", "shop", map[string]string{"app": "x"})
	x.Labels["tier"] = "managed"
	x.Finalizers = []string{"example.com/hold"}
	e := retainingEnv(t, ns("a", map[string]string{"spiffe": "on"}), deploy("a", "v", "shop", map[string]string{"app": "v"}), x)
	main := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.SpiffeIDTemplate = "ns/{namespace}/sa/{serviceAccount}"
		s.WorkloadSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "managed"}}
	})
	main.Name, main.Generation, main.UID = "main", 1, "uid-policy-main"
	if err := e.c.Create(ctx, main.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	fb := storedFallback(ctx, t, e)
	if err := e.c.Delete(ctx, x.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := e.h.CreateOrUpdate(ctx, main); err != nil {
			t.Fatal(err)
		}
		_ = e.h.CreateOrUpdate(ctx, fb)
	}
	if main.Status.WorkloadsSelected != 0 {
		t.Fatalf("precondition: main should select nothing, selects %d", main.Status.WorkloadsSelected)
	}
	if got := sortedPaths(e.api); !slices.Contains(got, "/fallback/ns/a/sa/shop") {
		t.Errorf("Deployment a/v, which no policy holds, has no identity: SPIRE holds %v; fallback failures %+v", got, fb.Status.Failures)
	}
}

// TestUnsureWorkloadsCostOneSPIRECallPerEntry: main is a policy this
// instance never judges (another environment, or before its first pass
// after a restart). A tenant of a namespace main selects creates n
// Deployments main cannot render (no team label). Every fallback pass, and
// a fallback makes a full pass on every event, asks SPIRE once per such
// workload (keepsOwn: GetEntry), one round trip at a time.
func TestUnsureWorkloadsCostOneSPIRECallPerEntry(t *testing.T) {
	ctx := context.Background()
	const n = 200
	objs := []client.Object{ns("t", map[string]string{"spiffe": "on"})}
	for i := range n {
		name := fmt.Sprintf("w%d", i)
		objs = append(objs, deploy("t", name, name, map[string]string{"app": name}))
	}
	e := retainingEnv(t, objs...)
	_, fb, _ := mainAndStoredFallback(t, e, teamTemplate)
	_ = e.h.CreateOrUpdate(ctx, fb)
	before := e.api.CallCount("GetEntry")
	_ = e.h.CreateOrUpdate(ctx, fb)
	calls := e.api.CallCount("GetEntry") - before
	if calls > 10 {
		t.Errorf("one fallback pass made %d GetEntry calls to SPIRE for %d workloads a tenant created", calls, n)
	}
}
