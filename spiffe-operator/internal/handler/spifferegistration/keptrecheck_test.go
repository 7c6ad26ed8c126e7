package spifferegistration

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
	"github.com/trustplane/trustplane/spiffe-operator/internal/nodes"
	"github.com/trustplane/trustplane/spiffe-operator/internal/pods"
	"github.com/trustplane/trustplane/spiffe-operator/internal/workload"
)

// TestAPodLeavingAKeptEntryNeedsNoFullPass: a Deployment deleted before
// its pod (as a cascading deletion does) leaves the entry in SPIRE for the
// pod while it runs. The pod's deletion then asked for a full pass of the
// policy, on the old code: every workload rendered and diffed again, over
// 250 ms of the policy's queue at 50,000 workloads, for each pod a rollout
// or a withdrawal ends. Now an incremental pass judges the kept entries of
// the pod's namespace again, and the entry goes with it (and its parent
// from status.parentIDs, when it was the last there). The Syncer's
// callbacks are wired as the operator wires them: Notify asks for a full
// pass, Recheck records kept entries to judge.
func TestAPodLeavingAKeptEntryNeedsNoFullPass(t *testing.T) {
	for _, mode := range []struct {
		name string
		spec func(*v1alpha1.SpiffeRegistrationSpec)
	}{
		{"fixed parent", nil},
		{"per-node parents", func(s *v1alpha1.SpiffeRegistrationSpec) { s.ParentID = "" }},
	} {
		t.Run(mode.name, func(t *testing.T) {
			ctx := context.Background()
			web := deploy("a", "web", "shop", map[string]string{"app": "web"})
			webPod := runningPod("a", "web-1", "shop", "n2", map[string]string{"app": "web"})
			e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), node("n1"), node("n2"), web, webPod,
				deploy("a", "api", "api", map[string]string{"app": "api"}),
				runningPod("a", "api-1", "api", "n1", map[string]string{"app": "api"}))
			reg := prometheus.NewRegistry()
			passes, err := NewPassMetrics(reg)
			if err != nil {
				t.Fatal(err)
			}
			dirty := NewDirty()
			e.h.Syncer = entrysync.New(e.api, entrysync.Options{IDs: entries.IDScheme{Prefix: "trustplane."},
				ResyncInterval: time.Hour, Pods: pods.Lister(pods.Source{Reader: e.c}),
				Notify:  func(o entrysync.Owner) { dirty.All(o.Name) },
				Recheck: func(o entrysync.Owner) { dirty.Kept(o.Name) }})
			e.h.Lister, e.h.Dirty, e.h.Nodes, e.h.ClusterName, e.h.Passes = workload.ReaderLister{Reader: e.c}, dirty, nodes.CacheGetter(e.c), "c1", passes
			p := newPolicy(mode.spec)
			if err := e.h.CreateOrUpdate(ctx, p); err != nil {
				t.Fatal(err)
			}
			full := func() float64 {
				var n float64
				for _, reason := range []string{ReasonAsked, ReasonUnknownState, ReasonResync, ReasonViewDue} {
					n += testutil.ToFloat64(passes.passes.WithLabelValues(p.Name, PassFull, reason))
				}
				return n
			}
			fullBefore := full()

			// The Deployment goes first; its pod still runs.
			if err := e.c.Delete(ctx, web); err != nil {
				t.Fatal(err)
			}
			dirty.Workload(p.Name, v1alpha1.WorkloadKindDeployment, "a", "web")
			if err := e.h.CreateOrUpdate(ctx, p); err != nil {
				t.Fatal(err)
			}
			if got := paths(e.api); !slices.Contains(got, "/ns/a/sa/shop") {
				t.Fatalf("setup: the entry was to stay while its pod runs: %v", got)
			}

			// The pod goes: the events the operator's watches record.
			if err := e.c.Delete(ctx, webPod); err != nil {
				t.Fatal(err)
			}
			if mode.spec != nil {
				dirty.Account(p.Name, "a", "shop")
			}
			e.h.Syncer.PodsChanged("a")
			if err := e.h.CreateOrUpdate(ctx, p); err != nil {
				t.Fatal(err)
			}
			if got := paths(e.api); !slices.Equal(got, []string{"/ns/a/sa/api"}) {
				t.Errorf("after the pod went SPIRE holds %v, want only /ns/a/sa/api", got)
			}
			// With per-node parents, n2's agent holds nothing of the
			// policy's any more; the record of parents says so.
			if held := strings.Join(p.Status.ParentIDs, " "); mode.spec != nil && (strings.Contains(held, "uid-n2") || !strings.Contains(held, "uid-n1")) {
				t.Errorf("status.parentIDs = %v, want n1's parent only", p.Status.ParentIDs)
			}
			if n := full() - fullBefore; n != 0 {
				t.Errorf("%v full passes after the first; the Deployment's and the pod's deletions each need an incremental pass", n)
			}
		})
	}
}
