package target

import (
	"context"
	"strings"
	"testing"
)

// TestReleaseAllFailsWhileAContentWriteIsNotInTheCache proves that
// ReleaseAll does not take a release as done while the cache lacks a
// write of the TrustBundle's content (a create it does not list, an update
// it lists at the version before), that it releases the target once the
// cache shows the write, and that a release of ours still on its way to
// the cache holds nothing up.
func TestReleaseAllFailsWhileAContentWriteIsNotInTheCache(t *testing.T) {
	ctx := context.Background()
	l := tbLabels("uid-b", "prod")
	cache := &attackMeta{}
	var writes attackWrites
	e := NewExpectations()
	o := &Objects{Cache: cache, Live: cache, Client: attackWriter(&writes, nil), Expectations: e}
	e.expectFor("b", KindConfigMap, "team", "ca", "9")

	for _, step := range []struct {
		name   string
		cached string // resourceVersion the cache holds; "" for none
	}{{"the create not in the cache", ""}, {"the update not in the cache", "5"}} {
		if step.cached != "" {
			cache.set(ourTarget("team", step.cached, "h", l))
		}
		rep := o.ReleaseAll(ctx, KindConfigMap, l)
		if rep.FailedCount != 1 || len(rep.Failed) != 1 || !strings.Contains(rep.Failed[0], errWriteNotSeen.Error()) {
			t.Errorf("%s: ReleaseAll() = %+v, want the target failed as not in the cache yet", step.name, rep)
		}
		if w := writes.all(); len(w) != 0 {
			t.Errorf("%s: ReleaseAll() wrote %v from a cache that lacks our write", step.name, w)
		}
	}

	cache.set(ourTarget("team", "9", "h", l))
	if rep := o.ReleaseAll(ctx, KindConfigMap, l); rep.FailedCount != 0 || rep.Written != 1 {
		t.Fatalf("once the cache shows the write: ReleaseAll() = %+v, want it released", rep)
	}
	// The cache still shows the target we just deleted: the release is
	// done, and a retry neither fails nor writes.
	if rep := o.ReleaseAll(ctx, KindConfigMap, l); rep.FailedCount != 0 || rep.Written != 0 {
		t.Errorf("after the release: ReleaseAll() = %+v, want nothing to do", rep)
	}
	if w := writes.all(); len(w) != 1 || w[0] != "delete team/ca" {
		t.Errorf("writes = %v, want one delete of team/ca", w)
	}
}
