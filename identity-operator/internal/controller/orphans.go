package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/janitor"
	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/common/scoped"

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
// kind, namespace, name and UID) are candidates; once an uncached read
// confirms that no binding of that namespace, name and UID exists, the
// owner's outputs are withdrawn as on the binding's own deletion (the
// janitor's Withdraw of the Live output types: by owner UID, with the UID as
// a delete precondition).
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

// Start sweeps once the cache has synced, then every interval (lengthened
// by up to a tenth, so replicas restarted together spread out), until ctx
// ends.
func (s *orphanSweeper) Start(ctx context.Context) error {
	interval := s.interval
	if interval <= 0 {
		interval = DefaultOrphanSweepInterval
	}
	wait.JitterUntilWithContext(ctx, func(ctx context.Context) {
		if n, err := s.sweep(ctx); err != nil {
			s.log.Error(err, "sweep outputs whose binding is gone")
		} else if n > 0 {
			s.log.Info("withdrew the outputs of bindings that are gone", "bindings", n)
		}
	}, interval, 0.1, true)
	return nil
}

// ownedTypes are the output types of every served kind, Live as in the
// handler: found by owner UID in every environment, read uncached.
func (s *orphanSweeper) ownedTypes() []janitor.ChildType {
	types := make([]janitor.ChildType, 0, len(s.kinds))
	for _, k := range s.kinds {
		types = append(types, janitor.ChildType{List: output.NewList(k), Live: true})
	}
	return types
}

// sweep withdraws the outputs of every binding that is gone and returns
// how many such bindings it found.
func (s *orphanSweeper) sweep(ctx context.Context) (int, error) {
	owners := map[types.UID]*v1alpha1.IdentityBinding{}
	for _, k := range s.kinds {
		l := output.NewList(k)
		if err := s.client.List(ctx, l, client.MatchingLabels{labels.OwnerKind: ownerKind}); err != nil {
			return 0, fmt.Errorf("list %s outputs: %w", k, err)
		}
		for _, o := range output.Items(l) {
			if b := ownerOf(o); b != nil {
				owners[b.UID] = b
			}
		}
	}
	withdrawn := 0
	for _, b := range owners {
		gone, err := s.ownerGone(ctx, b)
		if err != nil {
			return withdrawn, err
		}
		if !gone {
			continue
		}
		j, err := janitor.New(scoped.AnyEnvironment(s.client), b, janitor.WithLiveReader(s.apiReader))
		if err != nil {
			return withdrawn, err
		}
		if _, err := j.Withdraw(ctx, s.ownedTypes()...); err != nil {
			return withdrawn, fmt.Errorf("withdraw the outputs of %s/%s (uid %s): %w", b.Namespace, b.Name, b.UID, err)
		}
		s.log.Info("withdrew the outputs of a binding that is gone", "owner", b.Namespace+"/"+b.Name, "ownerUID", b.UID)
		withdrawn++
	}
	return withdrawn, nil
}

// ownerOf returns the binding o's owner labels (and, for a name too long
// for a label, annotation) name, or nil when they are incomplete: such an
// object is never judged an orphan.
func ownerOf(o client.Object) *v1alpha1.IdentityBinding {
	key, uid, ok := labels.OwnerOfObject(o, ownerKind)
	if !ok || key.Namespace == "" {
		return nil
	}
	return &v1alpha1.IdentityBinding{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, UID: uid}}
}

// ownerGone reports whether no binding of owner's namespace, name and UID
// exists: none of that namespace and name, or one with another UID.
func (s *orphanSweeper) ownerGone(ctx context.Context, owner *v1alpha1.IdentityBinding) (bool, error) {
	key := client.ObjectKeyFromObject(owner)
	b := &v1alpha1.IdentityBinding{}
	if err := s.client.Get(ctx, key, b); err == nil && b.UID == owner.UID {
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
	return b.UID != owner.UID, nil
}
