package controller

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
)

// TestAFloodOfNotificationsIsBoundedAndLosesNoOwner: a sync pass may notify
// thousands of owners before the controller reads any; that must cost no
// goroutine per notification, and every owner must still get its pass.
func TestAFloodOfNotificationsIsBoundedAndLosesNoOwner(t *testing.T) {
	const owners = 3000
	n := NewNotifier("Kind")
	before := runtime.NumGoroutine()
	for i := 0; i < 3*owners; i++ {
		n.Notify(entrysync.Owner{Kind: "Kind", Name: fmt.Sprintf("owner-%d", i%owners)})
	}
	if extra := runtime.NumGoroutine() - before; extra > 10 {
		t.Fatalf("%d notifications started %d goroutines", 3*owners, extra)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	if err := n.source("Kind").Start(ctx, q); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return q.Len() == owners, nil
	})
	if err != nil {
		t.Fatalf("queued %d of %d owners: %v", q.Len(), owners, err)
	}
	n.Notify(entrysync.Owner{Kind: "Kind", Name: "late"})
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return q.Len() == owners+1, nil
	})
	if err != nil {
		t.Fatalf("a notification after the start was not queued: %v", err)
	}
	n.Notify(entrysync.Owner{Kind: "Unknown", Name: "x"})
}
