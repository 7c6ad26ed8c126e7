package spifferegistration

import (
	"context"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
	"github.com/trustplane/trustplane/spiffe-operator/internal/nodes"
	"github.com/trustplane/trustplane/spiffe-operator/internal/pods"
)

// restarted returns a handler as a new operator process makes it: no memo,
// a syncer with no views, over the same API server and SPIRE as e's.
func restarted(e *env) *Handler {
	return &Handler{Reader: e.c, TrustDomain: "example.org", Nodes: e.h.Nodes, AllNodes: e.h.AllNodes, ClusterName: e.h.ClusterName,
		Syncer: entrysync.New(e.api, entrysync.Options{
			IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour, Pods: pods.Lister(pods.Source{Reader: e.c})})}
}

// failingWeb is a policy whose SPIFFE ID names the workload's team label
// and a Deployment web (UID uid-web) whose pod web-1 runs, after the pass
// that registered /a/web/pay and a pass after the tenant removed the team
// label: web's render fails and it keeps its last good entry.
func failingWeb(ctx context.Context, t *testing.T, mut func(*v1alpha1.SpiffeRegistrationSpec)) (*env, *v1alpha1.SpiffeRegistration, *appsv1.Deployment) {
	t.Helper()
	return failingWebOn(ctx, t, "", mut)
}

// failingWebOn is failingWeb with web-1 on the node nodeName, under
// per-node parents when it is set.
func failingWebOn(ctx context.Context, t *testing.T, nodeName string, mut func(*v1alpha1.SpiffeRegistrationSpec)) (*env, *v1alpha1.SpiffeRegistration, *appsv1.Deployment) {
	t.Helper()
	web := deploy("a", "web", "web", map[string]string{"app": "web"})
	web.UID = "uid-web"
	web.Labels["team"] = "pay"
	objs := []client.Object{ns("a", map[string]string{"spiffe": "on", "kubernetes.io/metadata.name": "a"}), web,
		runningPod("a", "web-1", "web", nodeName, map[string]string{"app": "web"})}
	if nodeName != "" {
		objs = append(objs, node(nodeName))
		mut = func(s *v1alpha1.SpiffeRegistrationSpec) { s.ParentID = "" }
	}
	e := retainingEnv(t, objs...)
	if nodeName != "" {
		e.h.Nodes, e.h.AllNodes, e.h.ClusterName = nodes.CacheGetter(e.c), nodes.CacheLister(e.c), "c1"
	}
	p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.SpiffeIDTemplate = "{namespace}/{name}/{label:team}"
		if mut != nil {
			mut(s)
		}
	})
	p.Generation = 1
	if err := e.h.CreateOrUpdate(ctx, p); err != nil || !slices.Equal(paths(e.api), []string{"/a/web/pay"}) {
		t.Fatalf("setup: %v, entries %v", err, paths(e.api))
	}
	delete(web.Labels, "team")
	if err := e.c.Update(ctx, web); err != nil {
		t.Fatal(err)
	}
	if err := e.h.CreateOrUpdate(ctx, p); err == nil {
		t.Fatal("setup: web's render was to fail")
	}
	if len(p.Status.KeptEntries) != 1 || p.Status.KeptEntries[0].SpiffeID != "spiffe://example.org/a/web/pay" ||
		p.Status.KeptEntries[0].UID != "uid-web" {
		t.Fatalf("the status records web's last good entry as %+v", p.Status.KeptEntries)
	}
	return e, p, web
}

// rollOut replaces web's pod web-1 by web-2 (on the same node), as a
// rollout does.
func rollOut(ctx context.Context, t *testing.T, e *env, nodeName string) {
	t.Helper()
	if err := e.c.Delete(ctx, runningPod("a", "web-1", "web", "", nil)); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Create(ctx, runningPod("a", "web-2", "web", nodeName, map[string]string{"app": "web"})); err != nil {
		t.Fatal(err)
	}
}

// TestAFailingWorkloadKeepsItsLastGoodEntryAcrossARestartAndARollout: a
// workload whose render fails keeps the entry of its last good render; the
// policy's status records it, so that a new operator process, which has no
// memory of renders, keeps it too, and a rollout after the restart (its
// pods replaced) does not take the identity away. On the old code the new
// process kept the entry only for the pods running at the restart, and
// deleted it once the rollout replaced them.
func TestAFailingWorkloadKeepsItsLastGoodEntryAcrossARestartAndARollout(t *testing.T) {
	for _, node := range []string{"", "n1"} {
		t.Run(map[string]string{"": "a fixed parent", "n1": "per-node parents"}[node], func(t *testing.T) {
			ctx := context.Background()
			e, p, _ := failingWebOn(ctx, t, node, nil)
			want := entriesWithParents(e)
			e.h = restarted(e)
			_ = e.h.CreateOrUpdate(ctx, p)
			rollOut(ctx, t, e, node)
			_ = e.h.CreateOrUpdate(ctx, p)
			if got := entriesWithParents(e); !slices.Equal(got, want) {
				t.Errorf("after a restart and a rollout, SPIRE holds %v, want web's last good entry %v", got, want)
			}
			if len(p.Status.KeptEntries) != 1 {
				t.Errorf("the status no longer records web's last good entry: %+v", p.Status.KeptEntries)
			}
		})
	}
}

// TestAWorkloadReCreatedUnderTheSameNameDoesNotKeepTheRecordedEntry: the
// record belongs to the workload by UID. A Deployment deleted and created
// again under the same name (by whoever may do so in the namespace) whose
// render fails keeps nothing after a restart: its pods are a new
// workload's.
func TestAWorkloadReCreatedUnderTheSameNameDoesNotKeepTheRecordedEntry(t *testing.T) {
	ctx := context.Background()
	e, p, web := failingWeb(ctx, t, nil)
	if err := e.c.Delete(ctx, web); err != nil {
		t.Fatal(err)
	}
	again := deploy("a", "web", "web", map[string]string{"app": "web"})
	again.UID = k8stypes.UID("uid-web-2")
	if err := e.c.Create(ctx, again); err != nil {
		t.Fatal(err)
	}
	e.h = restarted(e)
	_ = e.h.CreateOrUpdate(ctx, p)
	rollOut(ctx, t, e, "")
	_ = e.h.CreateOrUpdate(ctx, p)
	if got := paths(e.api); len(got) != 0 {
		t.Errorf("the re-created web kept the recorded entry of the web before it: %v", got)
	}
	if len(p.Status.KeptEntries) != 0 {
		t.Errorf("the status still records an entry for web: %+v", p.Status.KeptEntries)
	}
}

// TestARecordedEntryKeepsNoGrantWithdrawnWhileTheOperatorWasDown: admin
// is withdrawn in an edit made while no operator ran; the new process
// keeps web's recorded entry without it, and records it so.
func TestARecordedEntryKeepsNoGrantWithdrawnWhileTheOperatorWasDown(t *testing.T) {
	ctx := context.Background()
	e, p, _ := failingWeb(ctx, t, func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.Admin = true
		s.NamespaceSelector.MatchLabels = map[string]string{"kubernetes.io/metadata.name": "a"}
		s.ServiceAccountName = "web"
	})
	p.Spec.Admin = false
	p.Generation = 2
	e.h = restarted(e)
	_ = e.h.CreateOrUpdate(ctx, p)
	rollOut(ctx, t, e, "")
	_ = e.h.CreateOrUpdate(ctx, p)
	if got := grantsOf(e); !slices.Equal(got, []string{"/a/web/pay admin=false downstream=false federatesWith=[]"}) {
		t.Errorf("SPIRE holds %v, want web's last good entry without admin", got)
	}
	if len(p.Status.KeptEntries) != 1 || p.Status.KeptEntries[0].Admin {
		t.Errorf("the status records %+v, want web's entry without admin", p.Status.KeptEntries)
	}
}

// TestTheRecordGoesOnceTheWorkloadRendersAgain: fixed, web renders its
// own entry and the status records nothing.
func TestTheRecordGoesOnceTheWorkloadRendersAgain(t *testing.T) {
	ctx := context.Background()
	e, p, web := failingWeb(ctx, t, nil)
	web.Labels["team"] = "ops"
	if err := e.c.Update(ctx, web); err != nil {
		t.Fatal(err)
	}
	if err := e.h.CreateOrUpdate(ctx, p); err != nil {
		t.Fatal(err)
	}
	if len(p.Status.KeptEntries) != 0 {
		t.Errorf("web renders again, yet the status records %+v", p.Status.KeptEntries)
	}
}
