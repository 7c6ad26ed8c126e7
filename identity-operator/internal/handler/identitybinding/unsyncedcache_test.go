package identitybinding_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/ctrlerrors"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
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
// worker was held no binding converged. A pass now reads a pool only once
// its informer has synced, and otherwise fails at once: PoolCacheNotSynced,
// retried through the rate limiter, outputs kept, and an earlier
// InferencePoolCRDMissing taken off.
func TestAPoolWhoseCacheHasNotSyncedFailsThePassAtOnce(t *testing.T) {
	informers, c := cacheAndClient(t)
	b := readyBindingToAPool(t, c)
	unlistable := unlistableCache(t)
	through := poolsThrough{Client: c, pools: unlistable, giveUp: 30 * time.Second}
	// As left by a pass that ran before the CRD was installed: it no longer
	// holds once the API server serves the kind.
	b.Status.Conditions = append(b.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionInvalidRef,
		Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonInferencePoolCRDMissing, Message: "not installed"})
	start := time.Now()
	err := reconcile(t, handlerWith(t, through, cp.Client, unlistable), through, b)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the pass waited %s for a cache that cannot sync: %v", took.Round(time.Second), err)
	}
	if r, ok := ctrlerrors.AsRetryable(err); !ok || r.Delay != 0 || ctrlerrors.IsBlocked(err) {
		t.Fatalf("want an error retried through the rate limiter, got %v", err)
	}
	if reason := ctrlerrors.Reason(err, ""); reason != v1alpha1.ReasonPoolCacheNotSynced {
		t.Fatalf("want reason %s, got %q (%v)", v1alpha1.ReasonPoolCacheNotSynced, reason, err)
	}
	if !strings.Contains(err.Error(), "role allows neither list nor watch on inferencepools.inference.networking.k8s.io") {
		t.Fatalf("the error should name the resource to grant, got %v", err)
	}
	if f := failureConditions(b); f[v1alpha1.ConditionInvalidRef] != "" || f[v1alpha1.ConditionUnsafeSelector] != "" {
		t.Fatalf("want no failure condition (the CRD is served, so InferencePoolCRDMissing is stale), got %v", f)
	}
	if n := entriesOf(t, b); n != 1 {
		t.Fatalf("the binding's output was withdrawn (%d entries left) while its pool could not be read", n)
	}

	// Through a cache whose informer has synced, the same pass is Ready.
	if err := reconcile(t, handlerWith(t, c, cp.Client, informers), c, b); err != nil || entriesOf(t, b) != 1 {
		t.Fatalf("want Ready with one output through a synced cache, got %v and %d entries", err, entriesOf(t, b))
	}
}
