package identitybinding_test

import (
	"context"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/identity-operator/internal/handler/identitybinding"
	"github.com/trustplane/trustplane/identity-operator/internal/pool"
)

// poolsThrough reads InferencePools through pools and everything else
// through the embedded client. Each pool read is cut off after giveUp, so
// a read that would wait for ever fails the test instead of hanging it.
type poolsThrough struct {
	client.Client
	pools  client.Reader
	giveUp time.Duration
}

func (p poolsThrough) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if obj.GetObjectKind().GroupVersionKind().GroupKind() != pool.InferencePoolGVK().GroupKind() {
		return p.Client.Get(ctx, key, obj, opts...)
	}
	ctx, cancel := context.WithTimeout(ctx, p.giveUp)
	defer cancel()
	return p.pools.Get(ctx, key, obj, opts...)
}

// unlistableCache is a started cache whose identity may list nothing: every
// informer it starts fails its first list (Forbidden) and never syncs.
func unlistableCache(t *testing.T) cache.Cache {
	t.Helper()
	cfg := rest.CopyConfig(cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "may-not-list-pools"}
	c, err := cache.New(cfg, cache.Options{Scheme: cp.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) { // no informer yet: true once started
		t.Fatal("the cache did not start")
	}
	return c
}

// An operator whose role does not let it list InferencePools (a role from
// an older release, or one edited by hand) has an informer for them that
// never syncs. A cached pool read waited for it until the pass's context
// ended, which is never: the pass held its worker for ever, and once every
// worker was held no binding converged. The read is bounded now: the pass
// fails within the bound, says what to check, and keeps the outputs.
func TestAPoolReadWhoseCacheCannotSyncFailsWithinItsBound(t *testing.T) {
	c := cachedClient(t)
	b := readyBindingToAPool(t, c)
	through := poolsThrough{Client: c, pools: unlistableCache(t), giveUp: 30 * time.Second}
	h, err := identitybinding.New(through, identitybinding.Options{
		TrustDomain: td, ParentID: "spiffe://example.org/nodes",
		CRDMissingRetry: 45 * time.Second, WithdrawalRetry: 100 * time.Millisecond,
		APIReader: cp.Client, PoolReadTimeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = reconcile(t, h, through, b)
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("the pass waited %s for a cache that cannot sync (bound 2s): %v", took.Round(time.Second), err)
	}
	wantOutputsKeptAndRetried(t, b, err, "cache of InferencePool has not synced within 2s: does its role grant list and watch")
}
