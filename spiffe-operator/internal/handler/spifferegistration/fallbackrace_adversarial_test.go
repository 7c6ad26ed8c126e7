package spifferegistration

import (
	"context"
	"sync"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/workload"
)

// TestTwoFallbacksAndAPolicyRunTogetherWithRefusals runs main (incremental
// passes, SPIRE refusing its entry for web and api) and two fallbacks
// concurrently on one handler. Run with -race.
func TestTwoFallbacksAndAPolicyRunTogetherWithRefusals(t *testing.T) {
	ctx := context.Background()
	webL := map[string]string{"app": "web"}
	d := deploy("a", "web", "shop", webL)
	d.Labels["team"] = "pay"
	e := retainingEnv(t, ns("a", map[string]string{"spiffe": "on"}), d,
		deploy("a", "api", "shop", map[string]string{"app": "api"}), runningPod("a", "web-1", "shop", "", webL))
	e.h.Lister, e.h.Dirty = workload.ReaderLister{Reader: e.c}, NewDirty()
	e.api.Reject["spiffe://example.org"+mainPay] = true
	main, fb, _ := mainAndStoredFallback(t, e, teamTemplate)
	fb2 := fb.DeepCopy()
	fb2.Name, fb2.UID = "fallback2", "uid-fallback2"
	if err := e.c.Create(ctx, fb2.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		m := main.DeepCopy()
		for i := range 30 {
			cur := deploy("a", "api", "shop", nil)
			if err := e.c.Get(ctx, client.ObjectKey{Namespace: "a", Name: "api"}, cur); err == nil {
				if i%3 == 0 {
					cur.Labels["team"] = "pay"
				} else {
					delete(cur.Labels, "team")
				}
				_ = e.c.Update(ctx, cur)
			}
			e.h.Dirty.Workload("main", v1alpha1.WorkloadKindDeployment, "a", "api")
			_ = e.h.CreateOrUpdate(ctx, m)
		}
	}()
	for _, f := range []*v1alpha1.SpiffeRegistration{fb, fb2} {
		go func() {
			defer wg.Done()
			f := f.DeepCopy()
			for range 30 {
				_ = e.h.CreateOrUpdate(ctx, f)
			}
		}()
	}
	wg.Wait()
}
