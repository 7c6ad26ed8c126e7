package spifferegistration

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/trustplane/trustplane/common/controller"
	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/nodes"
	"github.com/trustplane/trustplane/spiffe-operator/internal/workload"
)

// TestAPassServingTakenEventsRendersNothing checks the race between an
// event handler, which records a change and then queues the policy, and a
// pass that begins in between and takes the record: the pass that then
// serves the event finds nothing recorded. It must not render every
// workload (a cost that grows with the cluster, on a new workload's path),
// and must report what the pass that took the change did, also when that
// pass's status was never written. A pass that serves no event with
// nothing recorded (the resync) stays a full one.
func TestAPassServingTakenEventsRendersNothing(t *testing.T) {
	type count struct {
		kind, reason string
		want         float64
	}
	for _, mode := range []struct {
		name string
		spec func(*v1alpha1.SpiffeRegistrationSpec)
		// passes are the passes counted by kind and reason: the new
		// workload's pass is a full one with per-node parents, as the
		// Syncer has no view of the new node's parent yet.
		passes []count
	}{
		{"fixed parent", nil, []count{{PassFull, ReasonUnknownState, 1}, {PassIncremental, "", 2}, {PassFull, ReasonResync, 1}}},
		{"per-node parents", func(s *v1alpha1.SpiffeRegistrationSpec) { s.ParentID = "" },
			[]count{{PassFull, ReasonUnknownState, 1}, {PassFull, ReasonViewDue, 1}, {PassIncremental, "", 1}, {PassFull, ReasonResync, 1}}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			ctx := context.Background()
			eventCtx, _ := controller.WithEventPassNotes(ctx)
			e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), node("n1"), node("n2"),
				deploy("a", "web", "shop", map[string]string{"app": "web"}),
				runningPod("a", "web-1", "shop", "n1", map[string]string{"app": "web"}))
			l := &countingLister{ReaderLister: workload.ReaderLister{Reader: e.c}}
			reg := prometheus.NewRegistry()
			passes, err := NewPassMetrics(reg)
			if err != nil {
				t.Fatal(err)
			}
			e.h.Lister, e.h.Dirty, e.h.Nodes, e.h.ClusterName, e.h.Passes = l, NewDirty(), nodes.CacheGetter(e.c), "c1", passes
			p := newPolicy(mode.spec)
			if err := e.h.CreateOrUpdate(eventCtx, p); err != nil { // the creation: nothing known yet
				t.Fatal(err)
			}

			// A new workload and its pod, on a node the policy had none on.
			if err := e.c.Create(ctx, deploy("a", "fresh", "fresh", map[string]string{"app": "fresh"})); err != nil {
				t.Fatal(err)
			}
			if err := e.c.Create(ctx, runningPod("a", "fresh-1", "fresh", "n2", map[string]string{"app": "fresh"})); err != nil {
				t.Fatal(err)
			}
			unwritten := p.DeepCopy() // the policy as the cache holds it if the next status write is refused
			e.h.Dirty.Workload(p.Name, v1alpha1.WorkloadKindDeployment, "a", "fresh")
			e.h.Dirty.Account(p.Name, "a", "fresh")
			if err := e.h.CreateOrUpdate(eventCtx, p); err != nil { // takes the records
				t.Fatal(err)
			}
			if !slices.Contains(paths(e.api), "/ns/a/sa/fresh") {
				t.Fatalf("entries = %v", entriesWithParents(e))
			}

			// The pass that serves the events whose records were taken.
			lists, w := l.lists, writes(e)
			if err := e.h.CreateOrUpdate(eventCtx, unwritten); err != nil {
				t.Fatal(err)
			}
			if l.lists != lists {
				t.Errorf("a pass serving events whose changes an earlier pass took listed every workload")
			}
			if writes(e) != w {
				t.Errorf("it wrote to SPIRE: %v", e.api.Writes()[w:])
			}
			got, want := unwritten.Status, p.Status
			got.LastSyncTime, want.LastSyncTime = nil, nil
			if !equality.Semantic.DeepEqual(got, want) {
				t.Errorf("it reports\n%+v\nthe pass that took the changes reported\n%+v", got, want)
			}

			// Nothing recorded, no event: the resync, a full pass.
			expectFullPassAgrees(ctx, t, e, l, p)

			if n := testutil.CollectAndCount(reg); n != len(mode.passes) {
				t.Errorf("passes of %d kinds and reasons counted, want %d", n, len(mode.passes))
			}
			for _, c := range mode.passes {
				if got := testutil.ToFloat64(passes.passes.WithLabelValues(p.Name, c.kind, c.reason)); got != c.want {
					t.Errorf("trustplane_registration_passes_total{kind=%q,reason=%q} = %v, want %v", c.kind, c.reason, got, c.want)
				}
			}
			if err := e.h.Delete(ctx, p); err != nil {
				t.Fatal(err)
			}
			if n := testutil.CollectAndCount(reg); n != 0 {
				t.Errorf("%d counts of passes kept after the policy was deleted", n)
			}
		})
	}
}

// TestEventsThatKeepComingDoNotPostponeTheResync checks that a pass that
// an event starts is a full one once the last full pass is older than the
// resync interval: each event's pass queues the policy before its resync,
// so under a steady flow of events the resync itself never runs.
func TestEventsThatKeepComingDoNotPostponeTheResync(t *testing.T) {
	ctx, _ := controller.WithEventPassNotes(context.Background())
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), deploy("a", "web", "shop", map[string]string{"app": "web"}))
	l := &countingLister{ReaderLister: workload.ReaderLister{Reader: e.c}}
	now := time.Now()
	e.h.Lister, e.h.Dirty, e.h.Now = l, NewDirty(), func() time.Time { return now }
	p := newPolicy(nil)
	if err := e.h.CreateOrUpdate(ctx, p); err != nil {
		t.Fatal(err)
	}
	pass := func() (full bool) {
		t.Helper()
		e.h.Dirty.Workload(p.Name, v1alpha1.WorkloadKindDeployment, "a", "web")
		lists := l.lists
		if err := e.h.CreateOrUpdate(ctx, p); err != nil {
			t.Fatal(err)
		}
		return l.lists != lists
	}
	interval := e.h.Syncer.ResyncInterval()
	now = now.Add(interval - time.Second)
	if pass() {
		t.Errorf("an event's pass within the resync interval of the last full pass was a full one")
	}
	now = now.Add(time.Second)
	if !pass() {
		t.Errorf("an event's pass %v after the last full pass was not a full one", interval)
	}
	now = now.Add(time.Second)
	if pass() {
		t.Errorf("the pass after the full one was a full one too")
	}
}
