package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/labels"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/output"
)

// DefaultOrphanSweepInterval is how often outputs whose owner binding is
// gone are looked for, unless SetupOptions says otherwise.
const DefaultOrphanSweepInterval = 5 * time.Minute

// ownerKind is the owner-kind label value of every output.
const ownerKind = "IdentityBinding"

// orphanSweeper deletes outputs whose owner binding no longer exists: a
// finalizer removed by hand, or the operator reinstalled while bindings were
// deleted. Only objects labelled as outputs of an IdentityBinding (owner
// kind, namespace, name and UID) are candidates, and one is deleted only
// when an uncached read confirms that no binding of that namespace, name and
// UID exists; the delete carries the object's UID as a precondition.
type orphanSweeper struct {
	client    client.Client
	apiReader client.Reader
	kinds     []output.Kind
	interval  time.Duration
	log       logr.Logger
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: only the
// leader deletes.
func (s *orphanSweeper) NeedLeaderElection() bool { return true }

// Start sweeps once the cache has synced, then every interval, until ctx
// ends.
func (s *orphanSweeper) Start(ctx context.Context) error {
	interval := s.interval
	if interval <= 0 {
		interval = DefaultOrphanSweepInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if n, err := s.sweep(ctx); err != nil {
			s.log.Error(err, "sweep outputs whose binding is gone")
		} else if n > 0 {
			s.log.Info("deleted outputs whose binding is gone", "count", n)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// sweep deletes the orphaned outputs of every kind and returns how many.
func (s *orphanSweeper) sweep(ctx context.Context) (int, error) {
	deleted := 0
	for _, k := range s.kinds {
		l := output.NewList(k)
		gvk := k.GVK()
		if err := s.client.List(ctx, l, client.MatchingLabels{labels.OwnerKind: ownerKind}); err != nil {
			return deleted, fmt.Errorf("list %s outputs: %w", k, err)
		}
		for _, o := range output.Items(l) {
			gone, err := s.ownerGone(ctx, o)
			if err != nil {
				return deleted, err
			}
			if !gone || o.GetDeletionTimestamp() != nil {
				continue
			}
			uid := o.GetUID()
			if err := s.client.Delete(ctx, o, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
				return deleted, fmt.Errorf("delete %s %s: %w", k, o.GetName(), err)
			}
			s.log.Info("deleted an output whose binding is gone", "kind", gvk.Kind, "name", o.GetName(),
				"owner", o.GetLabels()[labels.OwnerNamespace]+"/"+o.GetLabels()[labels.OwnerName], "ownerUID", o.GetLabels()[labels.OwnerUID])
			deleted++
		}
	}
	return deleted, nil
}

// ownerGone reports whether o's owner labels name a binding that does not
// exist: none of that namespace and name, or one with another UID. Objects
// without complete owner labels are never judged gone.
func (s *orphanSweeper) ownerGone(ctx context.Context, o client.Object) (bool, error) {
	l := o.GetLabels()
	ns, name, uid := l[labels.OwnerNamespace], l[labels.OwnerName], types.UID(l[labels.OwnerUID])
	if ns == "" || name == "" || uid == "" {
		return false, nil
	}
	key := client.ObjectKey{Namespace: ns, Name: name}
	b := &v1alpha1.IdentityBinding{}
	if err := s.client.Get(ctx, key, b); err == nil && b.UID == uid {
		return false, nil
	}
	// The cache may lag behind a binding just created: confirm uncached.
	err := s.apiReader.Get(ctx, key, b)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("get binding %s: %w", key, err)
	}
	return b.UID != uid, nil
}
