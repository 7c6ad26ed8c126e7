package entrysync

import (
	"context"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// TestAReleaseReadsTheParentsTheStartupListingFound: an owner holds an
// entry under a parent no record of it names (its status write was lost);
// a new process lists every entry at its start, with the owner alive, and
// the owner is then deleted before any pass of it: its release reads that
// parent too and deletes the entry.
func TestAReleaseReadsTheParentsTheStartupListingFound(t *testing.T) {
	ctx := context.Background()
	api := fake.New()
	ids := entries.IDScheme{Prefix: "trustplane."}
	o := owner("p", time.Hour)
	elsewhere := named("/ns/a/sa/web", "a", "web")
	elsewhere.ParentID = spiffeid.RequireFromString("spiffe://example.org/spire/agent/k8s_psat/c1/uid-n2")
	elsewhere.Normalize()
	first := New(api, Options{IDs: ids, ResyncInterval: time.Hour})
	if _, err := first.Sync(ctx, o, ptrs([]entries.Entry{elsewhere}), nil); err != nil {
		t.Fatal(err)
	}

	alive := func(context.Context) (map[string]bool, error) { return map[string]bool{o.Tag(): true}, nil }
	restarted := New(api, Options{IDs: ids, ResyncInterval: time.Hour, Alive: alive, AliveNow: alive})
	if n, err := restarted.CollectEverywhere(ctx); err != nil || n != 0 {
		t.Fatalf("the listing deleted %d entries of a live owner (%v)", n, err)
	}
	if !holdsPath(api, "/ns/a/sa/web") {
		t.Fatal("setup: the live owner's entry is gone after the listing")
	}
	if err := restarted.Release(ctx, o, nil); err != nil {
		t.Fatal(err)
	}
	if holdsPath(api, "/ns/a/sa/web") {
		t.Errorf("the owner was released, yet its entry under a parent only the startup listing found is still there: %v", api.All())
	}
	if found := restarted.foundFor(o); len(found) != 0 {
		t.Errorf("the parents read by the release are still recorded as found: %v", found)
	}
}
