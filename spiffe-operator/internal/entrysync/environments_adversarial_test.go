package entrysync

// Attacks on two spiffe-operator instances of different environments
// (--environments a / b) that share one SPIRE server and one entry-ID
// prefix: each Syncer knows the claims of its own environment's objects
// only (the Controller skips the others). Fake SPIRE:
//
//	go test -run TestAdversarial ./internal/entrysync/

import (
	"context"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// entriesFor returns the IDs of the entries in SPIRE under e's key.
func entriesFor(api *fake.EntryAPI, e entries.Entry) []string {
	var ids []string
	for _, got := range api.All() {
		if got.SpiffeId.Path == e.SpiffeID.Path() {
			ids = append(ids, got.Id)
		}
	}
	return ids
}

// TestAdversarialAReleaseInAnotherEnvironmentSendsTheNextClaimantToPass:
// policies X (environment b, older) and Y (environment a, younger) in one
// namespace want the same entry (same parent, SPIFFE ID, selectors). B's
// instance created it for X; A's instance reports Y masked by "the object
// owning entry ..." and waits. The tenant deletes X: B's Release deletes
// the entry and hands it over to the next claimant it knows, none. Within
// one instance the entry goes to Y in the same call (make-before-break,
// TestReleaseHandsTheEntryToTheNextOwnerInTheSameCall). Safe behaviour
// (guarantee 3: Y still selects the running pods): right after the
// release an entry with the key exists, or A is told to pass Y at once.
func TestAdversarialAReleaseInAnotherEnvironmentSendsTheNextClaimantToPass(t *testing.T) {
	api := fake.New()
	nA := &notified{}
	// Checks of a masking entry come an hour apart: only X's deletion
	// can make A look again in time.
	sA := New(api, Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour, MaskRecheck: time.Hour, Notify: nA.add})
	sB, _, _ := newSyncer(api)
	ctx := context.Background()
	x, y := owner("xxxxxxxx", time.Hour), owner("yyyyyyyy", 0)
	e := entry("/ns/team/sa/web", 0)
	if out, err := sB.Sync(ctx, x, ptrs([]entries.Entry{e}), nil); err != nil || len(out.Registered) != 1 {
		t.Fatalf("B for X: %v %+v", err, out)
	}
	out, err := sA.Sync(ctx, y, ptrs([]entries.Entry{e}), nil)
	if err != nil || len(out.Masked) != 1 {
		t.Fatalf("setup: A should report Y masked: %v %+v", err, out)
	}
	if err := sB.Release(ctx, x, []spiffeid.ID{parent}); err != nil {
		t.Fatal(err)
	}
	// X is gone from the API server: A's Controller finds it NotFound and
	// its handler forgets it, as for any object.
	sA.Forget(x.Kind, x.Name)
	deadline := time.Now().Add(5 * time.Second)
	for len(entriesFor(api, e)) == 0 && !nA.has(y) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if len(entriesFor(api, e)) == 0 && !nA.has(y) {
		t.Fatalf("X released in environment b: no entry for the key Y (environment a) still wants is left in SPIRE, "+
			"and A was not asked for a pass of Y within 5 s of X's deletion (its pods have no entry until the next check or resync); SPIRE holds %d entries", len(api.All()))
	}
}

// TestAdversarialAnObjectMovedAwayLeavesNoClaimBehind: the composition of
// the Controller's skip without handler.Forgetter (common/controller
// TestAdversarialObjectMovedAwayIsForgottenByItsHandler) and A's Syncer. X
// (older) had the entry K1 in A. The tenant moves X to environment b and,
// in the same or a later edit, makes it want K2 instead: B's pass creates
// K2 and deletes K1 (X's own entry, no longer wanted, no pods). A, which
// skips X now and never forgot it, still believes X claims K1. Y
// (environment a, younger) wants K1. Safe behaviour: Y gets K1 (X claims
// nothing in A any more); here Y is masked by a ghost claim until X is
// deleted or A restarts, and Y's pods have no entry.
func TestAdversarialAnObjectMovedAwayLeavesNoClaimBehind(t *testing.T) {
	api := fake.New()
	sA, clkA, _ := newSyncer(api)
	sB, _, _ := newSyncer(api)
	ctx := context.Background()
	x, y := owner("xxxxxxxx", time.Hour), owner("yyyyyyyy", 0)
	k1, k2 := entry("/ns/team/sa/web", 0), entry("/ns/team/sa/api", 0)
	if _, err := sA.Sync(ctx, x, ptrs([]entries.Entry{k1}), nil); err != nil {
		t.Fatal(err)
	}
	// X moved to b and edited: A's Controller skips it from now on and,
	// as for an object gone, its handler forgets it.
	sA.Forget(x.Kind, x.Name)
	if out, err := sB.Sync(ctx, x, ptrs([]entries.Entry{k2}), nil); err != nil || len(out.Registered) != 1 {
		t.Fatalf("B for X: %v %+v", err, out)
	}
	if ids := entriesFor(api, k1); len(ids) != 0 {
		t.Fatalf("setup: B should have deleted X's K1, left %v", ids)
	}
	clkA.Add(2 * time.Minute)
	out, err := sA.Sync(ctx, y, ptrs([]entries.Entry{k1}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(entriesFor(api, k1)) == 0 {
		t.Fatalf("Y (environment a) wants K1, which nobody holds, but A masks it by the ghost claim of X (moved to b): masked %+v", out.Masked)
	}
}

// TestAdversarialOrphanCollectionOfOneEnvironmentSparesTheOthers: instance A
// collects orphans (CollectEverywhere) under the shared prefix. X is a
// live object of environment b that A skips; Alive must count it (guarantee
// 2/3: A must not delete B's entries as orphans). Alive here is what the
// operator wires (controller.AliveOwners lists every SpiffeRegistration
// and SpiffeEntry, whatever their environment: see
// spiffe-operator/internal/controller TestAdversarialAliveOwnersCountsEveryEnvironment).
// Safe behaviour: X's entry survives A's collection; a dead owner's goes.
func TestAdversarialOrphanCollectionOfOneEnvironmentSparesTheOthers(t *testing.T) {
	api := fake.New()
	sB, _, _ := newSyncer(api)
	ctx := context.Background()
	x, dead := owner("xxxxxxxx", 0), owner("dddddddd", 0)
	e, f := entry("/ns/team/sa/web", 0), entry("/ns/team/sa/old", 0)
	if _, err := sB.Sync(ctx, x, ptrs([]entries.Entry{e}), nil); err != nil {
		t.Fatal(err)
	}
	ids := entries.IDScheme{Prefix: "trustplane."}
	orphan := api.Put(f.Proto(ids.EntryID(dead.Tag(), f.Key())))
	sA := New(api, Options{IDs: ids, ResyncInterval: time.Minute, HoldUntilSettled: true,
		Alive: func(context.Context) (map[string]bool, error) { return map[string]bool{x.Tag(): true}, nil }})
	sA.Settle()
	if _, err := sA.CollectEverywhere(ctx); err != nil {
		t.Fatal(err)
	}
	if len(entriesFor(api, e)) != 1 || api.Get(orphan) != nil {
		t.Fatalf("A's collection: X's entry %v (want kept), orphan present %v (want gone)", entriesFor(api, e), api.Get(orphan) != nil)
	}
}
