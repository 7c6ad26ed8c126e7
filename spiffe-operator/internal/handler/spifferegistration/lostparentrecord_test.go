package spifferegistration

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
	"github.com/trustplane/trustplane/spiffe-operator/internal/nodes"
	"github.com/trustplane/trustplane/spiffe-operator/internal/workload"
)

// TestAParentWhoseRecordWasLostBeforeARestartIsFoundAtTheNextStart: with
// per-node parents, a pod on a new node n2 makes the pass create n2's
// entry and add n2's parent to status.parentIDs, but that status write is
// lost (it fails, and the operator restarts before the retry), and the pod
// ends while the operator is down. The new process reads the parents the
// status recorded and those its pods need now, and n2 is neither; the
// listing of every entry that the operator makes at its start (the orphan
// collection) finds the policy's entry under n2, so the policy's next full
// pass reads n2 and deletes the entry no pod needs, and records n2 until
// then. Whether the listing runs before the policy's first pass or after
// it (the pass is then asked for again, and is a full one), the entry goes,
// and the policy's deletion leaves nothing behind.
func TestAParentWhoseRecordWasLostBeforeARestartIsFoundAtTheNextStart(t *testing.T) {
	for _, listingFirst := range []bool{true, false} {
		t.Run(map[bool]string{true: "listing before the first pass", false: "listing after the first pass"}[listingFirst], func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), node("n1"), node("n2"),
				deploy("a", "web", "shop", map[string]string{"app": "web"}),
				runningPod("a", "web-1", "shop", "n1", map[string]string{"app": "web"}))
			e.h.Nodes, e.h.ClusterName = nodes.CacheGetter(e.c), "c1"
			p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) { s.ParentID = "" })
			if err := e.h.CreateOrUpdate(ctx, p); err != nil || len(entriesWithParents(e)) != 1 {
				t.Fatalf("setup: %v, entries %v", err, entriesWithParents(e))
			}
			written := slices.Clone(p.Status.ParentIDs)

			// A pod on n2: its node's entry is created, and the status that
			// records n2's parent is lost.
			if err := e.c.Create(ctx, runningPod("a", "web-2", "shop", "n2", map[string]string{"app": "web"})); err != nil {
				t.Fatal(err)
			}
			if err := e.h.CreateOrUpdate(ctx, p); err != nil || len(entriesWithParents(e)) != 2 {
				t.Fatalf("setup: %v, entries %v", err, entriesWithParents(e))
			}
			if slices.Equal(p.Status.ParentIDs, written) {
				t.Fatalf("setup: the pass did not record n2's parent: %v", p.Status.ParentIDs)
			}
			p.Status.ParentIDs = written

			// The pod on n2 ends while the operator restarts: a new process,
			// which lists every entry at its start, as the operator's orphan
			// collection does, with the policy alive.
			if err := e.c.Delete(ctx, runningPod("a", "web-2", "", "", nil)); err != nil {
				t.Fatal(err)
			}
			// The new process tracks events as the operator does, so its
			// passes are incremental unless something asks for a full one;
			// a notification does, as the operator's Notify does.
			var notified []string
			dirty := NewDirty()
			alive := func(context.Context) (map[string]bool, error) {
				return map[string]bool{entries.OwnerTag(p.UID): true}, nil
			}
			syncer := entrysync.New(e.api, entrysync.Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour,
				Alive: alive, AliveNow: alive, Notify: func(o entrysync.Owner) {
					dirty.All(o.Name)
					notified = append(notified, o.Name)
				}})
			h := &Handler{Reader: e.c, TrustDomain: "example.org", Nodes: nodes.CacheGetter(e.c), ClusterName: "c1", Syncer: syncer,
				Dirty: dirty, Lister: workload.ReaderLister{Reader: e.c}}
			if listingFirst {
				if _, err := syncer.CollectEverywhere(ctx); err != nil {
					t.Fatal(err)
				}
				if err := h.CreateOrUpdate(ctx, p); err != nil {
					t.Fatal(err)
				}
			} else {
				if err := h.CreateOrUpdate(ctx, p); err != nil {
					t.Fatal(err)
				}
				if got := entriesWithParents(e); len(got) != 2 {
					t.Fatalf("setup: the first pass, with no listing yet, already found n2: %v", got)
				}
				if _, err := syncer.CollectEverywhere(ctx); err != nil {
					t.Fatal(err)
				}
				if !slices.Contains(notified, p.Name) {
					t.Fatalf("the listing found the policy's entry under an unread parent and did not ask for its pass (notified %v)", notified)
				}
				if err := h.CreateOrUpdate(ctx, p); err != nil {
					t.Fatal(err)
				}
			}
			if got := entriesWithParents(e); len(got) != 1 {
				t.Errorf("after the restart no pod runs on n2, yet SPIRE still holds its entry: %v (status.parentIDs %v)", got, p.Status.ParentIDs)
			}
			if err := h.Delete(ctx, p); err != nil {
				t.Fatal(err)
			}
			if got := entriesWithParents(e); len(got) != 0 {
				t.Errorf("the policy was deleted, yet SPIRE still holds entries it created: %v", got)
			}
		})
	}
}
