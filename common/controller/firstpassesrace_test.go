package controller_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/trustplane/trustplane/common/controller"
)

// TestFirstPassesIsDoneWhenPassesEndWhileStartLists: passes end on many
// goroutines while Start lists; every listed object passes exactly once,
// some before, some during, some after the list. Done must close.
func TestFirstPassesIsDoneWhenPassesEndWhileStartLists(t *testing.T) {
	for iter := 0; iter < 50; iter++ {
		const n = 200
		var names []types.NamespacedName
		for i := 0; i < n; i++ {
			names = append(names, types.NamespacedName{Name: fmt.Sprintf("o%d", i)})
		}
		f := controller.NewFirstPasses(0)
		f.Track("c", func(context.Context) ([]types.NamespacedName, error) {
			time.Sleep(time.Millisecond) // widens the window in which passes end during the list
			return names, nil
		})
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(k types.NamespacedName) {
				defer wg.Done()
				f.Passed("c", k)
				_ = f.Waiting()
			}(names[i])
		}
		if err := f.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		select {
		case <-f.Done():
		default:
			t.Fatalf("iteration %d: every listed object had its pass, yet not done: %d waiting", iter, f.Waiting())
		}
	}
}
