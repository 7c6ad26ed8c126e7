package target

import (
	"context"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// catchUpAfterList is a cache whose watch event for our write lands right
// after a List: the List shows the target at the version before our
// write, every read after it the version our write made.
type catchUpAfterList struct {
	attackMeta
	after func()
}

func (c *catchUpAfterList) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	err := c.attackMeta.List(ctx, list, opts...)
	if c.after != nil {
		c.after()
		c.after = nil
	}
	return err
}

// TestReleaseAllNeverTakesASkippedTargetForReleased: a pass updated the
// ConfigMap team/ca (resourceVersion 9) and the TrustBundle is deleted at
// once. ReleaseAll lists the cache, which still shows team/ca at 5: release
// skips it, as a write of ours is still expected. The watch event lands
// before unseenWrites reads the cache again, sees 9, judges the
// expectation met (and drops it) and reports nothing: ReleaseAll neither
// released team/ca nor failed, so Delete returns nil and team/ca stays for
// good, labelled as the target of a TrustBundle that is gone.
func TestReleaseAllNeverTakesASkippedTargetForReleased(t *testing.T) {
	ctx := context.Background()
	l := tbLabels("uid-b", "prod")
	cache := &catchUpAfterList{}
	cache.set(ourTarget("team", "5", "h-before", l))
	cache.after = func() { cache.set(ourTarget("team", "9", "h", l)) }
	var writes attackWrites
	e := NewExpectations()
	o := &Objects{Cache: cache, Live: cache, Client: attackWriter(&writes, nil), Expectations: e}
	e.expectFor("b", KindConfigMap, "team", "ca", "9")

	rep := o.ReleaseAll(ctx, KindConfigMap, l)
	released := hasPrefixIn(writes.all(), "delete team/ca") || hasPrefixIn(writes.all(), "apply team/ca")
	if !released && rep.FailedCount == 0 {
		t.Errorf("ReleaseAll() = %+v with writes %v: team/ca was skipped (listed at 5, a write at 9 expected) and then not reported, "+
			"so the release counts as done and the target stays", rep, writes.all())
	}
}

// TestClusterTrustBundleReleaseNeverMissesACreateSeenAfterTheList: the
// ClusterTrustBundle counterpart. A pass created ClusterTrustBundle roots
// (resourceVersion 9) and the TrustBundle is deleted at once. Sync("")
// lists the cache before the create's watch event (roots is not listed, so
// it is not among the ones to release); the event lands, and unseenWrites
// reads roots at 9, drops the expectation and reports nothing. The release
// is taken as done and roots stays.
func TestClusterTrustBundleReleaseNeverMissesACreateSeenAfterTheList(t *testing.T) {
	ctx := context.Background()
	l := tbLabels("uid-b", "prod")
	cache := &catchUpAfterList{}
	cache.after = func() {
		m := ctbMeta("roots", l)
		m.ResourceVersion = "9"
		cache.set(m)
	}
	w := &attackWrites{}
	c := &ClusterTrustBundles{Cache: cache, Live: cache, Client: attackWriter(w, nil)}
	c.unseen.expectFor("b", kindClusterTrustBundle, "", "roots", "9")

	rep := c.Sync(ctx, "", nil, l)
	if !hasPrefixIn(w.all(), "delete /roots") && rep.FailedCount == 0 {
		t.Errorf("Sync(\"\") = %+v with writes %v: roots, created by our last write, was neither released nor reported, "+
			"so the release counts as done and roots stays", rep, w.all())
	}
}
