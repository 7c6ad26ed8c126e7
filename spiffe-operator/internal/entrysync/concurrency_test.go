package entrysync

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// TestForgetCollectionReleaseAndSyncRunTogether runs Forget, orphan
// collection, Release and Sync of owners sharing keys at once, with a
// Notify that re-enters the Syncer (ViewsDue), under -race: no deadlock,
// no concurrent map access.
func TestForgetCollectionReleaseAndSyncRunTogether(t *testing.T) {
	api := fake.New()
	ctx := context.Background()
	var owners []Owner
	for i := 0; i < 6; i++ {
		owners = append(owners, owner(fmt.Sprintf("o%d", i), time.Duration(i)*time.Minute))
	}
	live := newLiveOwners(owners...)
	c := &clock{now: t0}
	var s *Syncer
	s = New(api, Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Minute, Now: c.Now,
		Alive: live.read, AliveNow: live.read, Notify: func(o Owner) { _ = s.ViewsDue(o) }})
	es := []entries.Entry{entry("/ns/a/sa/x", 0), entry("/ns/b/sa/y", 0)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var wg sync.WaitGroup
		for r := 0; r < 30; r++ {
			for i, o := range owners {
				wg.Add(1)
				go func(i int, o Owner) {
					defer wg.Done()
					switch (r + i) % 5 {
					case 0:
						live.gone(o)
						s.Forget(o.Kind, o.Name)
					case 1:
						_ = s.Release(ctx, o, nil)
					case 2:
						_, _ = s.CollectEverywhere(ctx)
					default:
						live.add(o)
						_, _ = s.Sync(ctx, o, ptrs(es), nil)
					}
				}(i, o)
			}
			c.Add(30 * time.Second)
			wg.Wait()
		}
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("deadlock")
	}
}
