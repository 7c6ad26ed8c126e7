package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// DefaultStatusWriteTimeout bounds a status write running off the worker
// when Options.StatusWriteTimeout is zero or negative (the next pass of its
// object waits for it).
const DefaultStatusWriteTimeout = 30 * time.Second

// Results of a status write off the worker, as counted by
// trustplane_status_writes_behind_total ("result").
const (
	behindWritten  = "written"
	behindConflict = "conflict"
	behindFailed   = "failed"
)

// behindWrites keeps the status writes that passes left running off the
// worker, one per object at most. A pass whose status may wait
// (StatusMayWait) but can be held back no longer (Options.StatusMaxWait is
// over) writes it this way, so that the pass an event of the object starts
// meanwhile runs its handler while the write is on its way, rather than
// after it: the status write is off the path from an event to what its
// handler does. The next pass of the object takes the write (waiting for
// it) before it decides on its own status, and works from the object the
// write left.
type behindWrites struct {
	mu    sync.Mutex
	byKey map[types.NamespacedName]*behindWrite
	// queue queues an object again when its write failed, so that a pass
	// computes and writes its status anew; nil until a queue is made.
	queue workqueue.TypedRateLimitingInterface[reconcile.Request]
}

// behindWrite is one status write running off the worker.
type behindWrite struct {
	done chan struct{}
	// readVersion is the resourceVersion of the object the pass read.
	readVersion string
	// written is the object the write left, nil when it failed; read it
	// only after done is closed.
	written client.Object
}

func newBehindWrites() *behindWrites {
	return &behindWrites{byKey: map[types.NamespacedName]*behindWrite{}}
}

// setQueue records the queue that failed writes queue their object on.
func (b *behindWrites) setQueue(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.queue = q
}

// start records a write of key's status by a pass that read readVersion,
// and returns it; the caller closes done once it ended. A write of key
// that no pass took yet is replaced (the caller took it before deciding).
func (b *behindWrites) start(key types.NamespacedName, readVersion string) *behindWrite {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := &behindWrite{done: make(chan struct{}), readVersion: readVersion}
	b.byKey[key] = w
	return w
}

// take waits for the write of key's status that no pass took yet, if any,
// forgets it and returns it (nil when there was none). When ctx ends first
// (the manager stops), it leaves the write to the next pass and returns
// ctx's error, so that no worker waits for a write past its pass (see
// Controller.passEnded).
func (b *behindWrites) take(ctx context.Context, key types.NamespacedName) (*behindWrite, error) {
	b.mu.Lock()
	w := b.byKey[key]
	delete(b.byKey, key)
	b.mu.Unlock()
	if w == nil {
		return nil, nil
	}
	select {
	case <-w.done:
		return w, nil
	case <-ctx.Done():
		b.mu.Lock()
		if _, started := b.byKey[key]; !started {
			b.byKey[key] = w
		}
		b.mu.Unlock()
		return nil, fmt.Errorf("wait for the status write off the worker: %w", context.Cause(ctx))
	}
}

// requeueUntaken queues key for a pass, when a queue was made and no pass
// took the write w of key yet (a pass that took it writes its own status).
func (b *behindWrites) requeueUntaken(key types.NamespacedName, w *behindWrite) {
	b.mu.Lock()
	q, untaken := b.queue, b.byKey[key] == w
	b.mu.Unlock()
	if q != nil && untaken {
		q.AddRateLimited(reconcile.Request{NamespacedName: key})
	}
}
