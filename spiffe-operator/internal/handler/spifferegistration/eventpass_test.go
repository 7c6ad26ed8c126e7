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
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
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
		{"fixed parent", nil, []count{{PassFull, ReasonUnknownState, 1}, {PassIncremental, "", 1},
			{PassIncremental, ReasonEventsTaken, 1}, {PassFull, ReasonResync, 1}}},
		{"per-node parents", func(s *v1alpha1.SpiffeRegistrationSpec) { s.ParentID = "" },
			[]count{{PassFull, ReasonUnknownState, 1}, {PassFull, ReasonViewDue, 1}, {PassIncremental, ReasonEventsTaken, 1}, {PassFull, ReasonResync, 1}}},
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
			// lastSyncTime too: the pass that took the changes talked to
			// SPIRE, and the pass that reports it did not.
			got, want := unwritten.Status, p.Status
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

// TestEventsThatKeepComingDoNotPostponeTheResync checks that drift in
// SPIRE (an entry deleted by hand) is repaired by the first pass that an
// event starts once SPIRE was last read a resync interval ago: each
// event's pass queues the policy before its resync, so under a steady flow
// of events the resync itself never runs. A full pass that reads nothing
// again (its views are fresh) must not postpone the repair.
func TestEventsThatKeepComingDoNotPostponeTheResync(t *testing.T) {
	const interval = time.Hour
	ctx, _ := controller.WithEventPassNotes(context.Background())
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), deploy("a", "web", "shop", map[string]string{"app": "web"}))
	now := time.Now()
	clock := func() time.Time { return now }
	e.h.Syncer = entrysync.New(e.api, entrysync.Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: interval, Now: clock})
	e.h.Lister, e.h.Dirty, e.h.Now = workload.ReaderLister{Reader: e.c}, NewDirty(), clock
	p := newPolicy(nil)
	if err := e.h.CreateOrUpdate(ctx, p); err != nil { // reads SPIRE
		t.Fatal(err)
	}
	readAt := now
	now = now.Add(time.Minute)
	e.api.Remove(e.api.All()[0].Id)
	// A full pass asked for by an event (a namespace's labels, say) finds
	// its view fresh and reads nothing.
	now = now.Add(30 * time.Minute)
	e.h.Dirty.All(p.Name)
	if err := e.h.CreateOrUpdate(ctx, p); err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Duration{interval - time.Minute, interval} {
		now = readAt.Add(at)
		e.h.Dirty.Workload(p.Name, v1alpha1.WorkloadKindDeployment, "a", "web")
		if err := e.h.CreateOrUpdate(ctx, p); err != nil {
			t.Fatal(err)
		}
		back := slices.Contains(paths(e.api), "/ns/a/sa/shop")
		switch {
		case at < interval && back:
			t.Errorf("the entry came back %v after SPIRE was read: the test's premise (no re-read before the interval) fails", at)
		case at >= interval && !back:
			t.Errorf("an event's pass %v after SPIRE was last read (resync interval %v) did not repair the entry deleted by hand", at, interval)
		}
	}
}
