package spifferegistration

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
	"github.com/trustplane/trustplane/spiffe-operator/internal/nodes"
	"github.com/trustplane/trustplane/spiffe-operator/internal/pods"
)

// TestARecreatedNodesRefusedEntryIsNotCoveredByAnotherNodes: per-node
// parents, one identity per service account, the syncer reading pods as in
// production. The account runs web-1 on n1 and web-2 on n2. SPIRE starts
// refusing the account's entry (a federated bundle it lost, say), and the
// Node n1 is re-created with a new UID while its agent still runs under the
// old one (the documented case the refusal rule protects). The entry under
// the old n1 must stay while web-1 runs there: its replacement is the
// refused one. The entry under n2, which n1's agent never serves, must not
// count as covering web-1. With web-2 absent the old entry stays (the
// control subtest); with it, it is deleted.
func TestARecreatedNodesRefusedEntryIsNotCoveredByAnotherNodes(t *testing.T) {
	for _, withN2 := range []bool{false, true} {
		name := "only n1 runs a pod"
		if withN2 {
			name = "n2 runs a pod of the account too"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			objs := []client.Object{ns("a", map[string]string{"spiffe": "on"}), node("n1"), node("n2"),
				deploy("a", "web", "shop", map[string]string{"app": "web"}),
				runningPod("a", "web-1", "shop", "n1", map[string]string{"app": "web"})}
			if withN2 {
				objs = append(objs, runningPod("a", "web-2", "shop", "n2", map[string]string{"app": "web"}))
			}
			e, p := perNodeEnv(t, objs...)
			before := entriesWithParents(e)
			var onN1 string
			for _, x := range before {
				if strings.HasSuffix(x, "/uid-n1") {
					onN1 = x
				}
			}
			if onN1 == "" {
				t.Fatalf("first pass: entries = %v", before)
			}
			e.api.Reject["spiffe://example.org/ns/a/sa/shop"] = true
			// n1 is re-created under a new UID; web-1 still runs there.
			if err := e.c.Delete(ctx, node("n1")); err != nil {
				t.Fatal(err)
			}
			if err := e.c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: k8stypes.UID("uid-n1b")}}); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 2; i++ {
				if err := e.h.CreateOrUpdate(ctx, p); err == nil {
					t.Fatal("SPIRE refused nothing")
				}
			}
			if got := entriesWithParents(e); !slices.Contains(got, onN1) {
				t.Errorf("web-1 runs on n1, whose agent still runs under the old UID, and the entry meant to replace "+
					"its entry is refused, yet the old entry went: %v (failures %+v)", got, p.Status.Failures)
			}
		})
	}
}

// TestAWithdrawnIdentityIsKeptOnlyUnderTheNodeItsPodRunsOn: per-node
// parents, the syncer reading pods and nodes as in production. The
// account runs web-1 on n1 and web-2 on n2, so it has an entry under each
// node's agent. web-2 goes and the namespace leaves the policy: the
// identity is withdrawn while web-1 still runs, on n1. The entry under n1
// stays while web-1 runs (it needed it); the one under n2 must go at once:
// n2's agent cannot serve web-1, so it would keep the withdrawn identity
// for any pod that lands on n2.
func TestAWithdrawnIdentityIsKeptOnlyUnderTheNodeItsPodRunsOn(t *testing.T) {
	ctx := context.Background()
	web2 := runningPod("a", "web-2", "shop", "n2", map[string]string{"app": "web"})
	namespace := ns("a", map[string]string{"spiffe": "on"})
	e, p := perNodeEnv(t, namespace, node("n1"), node("n2"),
		deploy("a", "web", "shop", map[string]string{"app": "web"}),
		runningPod("a", "web-1", "shop", "n1", map[string]string{"app": "web"}), web2)
	onBoth := []string{"/ns/a/sa/shop /spire/agent/k8s_psat/c1/uid-n1", "/ns/a/sa/shop /spire/agent/k8s_psat/c1/uid-n2"}
	if got := entriesWithParents(e); !slices.Equal(got, onBoth) {
		t.Fatalf("first pass: entries = %v, want %v", got, onBoth)
	}
	withdrawOnceGone(ctx, t, e, p, namespace, web2)
	if got := entriesWithParents(e); !slices.Equal(got, onBoth[:1]) {
		t.Errorf("the identity is withdrawn while web-1 runs on n1: entries = %v, want %v", got, onBoth[:1])
	}
}

// withdrawOnceGone deletes pod, takes the namespace out of the policy
// (its labels removed) and runs a pass: the identity is withdrawn while the
// account's other pods still run.
func withdrawOnceGone(ctx context.Context, t *testing.T, e *env, p *v1alpha1.SpiffeRegistration, namespace *corev1.Namespace, pod *corev1.Pod) {
	t.Helper()
	if err := e.c.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	namespace.Labels = nil
	if err := e.c.Update(ctx, namespace); err != nil {
		t.Fatal(err)
	}
	if err := e.h.CreateOrUpdate(ctx, p); err != nil {
		t.Fatal(err)
	}
}

// perNodeEnv is an env whose syncer reads pods and whose handler reads
// nodes as in production, with a policy of per-node parents (cluster c1)
// after its first pass.
func perNodeEnv(t *testing.T, objs ...client.Object) (*env, *v1alpha1.SpiffeRegistration) {
	t.Helper()
	e := newEnv(t, objs...)
	e.h.Syncer = entrysync.New(e.api, entrysync.Options{IDs: entries.IDScheme{Prefix: "trustplane."},
		ResyncInterval: time.Hour, Pods: pods.Lister(pods.Source{Reader: e.c})})
	e.h.Nodes, e.h.AllNodes, e.h.ClusterName = nodes.CacheGetter(e.c), nodes.CacheLister(e.c), "c1"
	p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) { s.ParentID = "" })
	if err := e.h.CreateOrUpdate(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	return e, p
}

// TestAGoneNodesEntryStaysForItsPodWhileTheDeploymentRunsElsewhere: the
// Node object n1 is deleted while web-1 still runs there; web-2 runs on
// n2. Only n1's agent can serve web-1, so the entry under n2 does not
// cover it and the entry under n1 stays while web-1 runs.
func TestAGoneNodesEntryStaysForItsPodWhileTheDeploymentRunsElsewhere(t *testing.T) {
	ctx := context.Background()
	e, p := perNodeEnv(t, ns("a", map[string]string{"spiffe": "on"}), node("n1"), node("n2"),
		deploy("a", "web", "shop", map[string]string{"app": "web"}),
		runningPod("a", "web-1", "shop", "n1", map[string]string{"app": "web"}),
		runningPod("a", "web-2", "shop", "n2", map[string]string{"app": "web"}))
	onBoth := []string{"/ns/a/sa/shop /spire/agent/k8s_psat/c1/uid-n1", "/ns/a/sa/shop /spire/agent/k8s_psat/c1/uid-n2"}
	if got := entriesWithParents(e); !slices.Equal(got, onBoth) {
		t.Fatalf("first pass: entries = %v, want %v", got, onBoth)
	}
	if err := e.c.Delete(ctx, node("n1")); err != nil {
		t.Fatal(err)
	}
	if err := e.h.CreateOrUpdate(ctx, p); err != nil {
		t.Fatal(err)
	}
	if got := entriesWithParents(e); !slices.Equal(got, onBoth) {
		t.Errorf("n1's Node object is gone while web-1 runs there: entries = %v, want %v", got, onBoth)
	}
}
