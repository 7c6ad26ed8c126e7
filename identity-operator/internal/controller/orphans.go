package controller

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
// kind, namespace, name and UID) are candidates; once an uncached list
// confirms that no binding with that UID exists, in any namespace, the
// owner's outputs are withdrawn as on the binding's own deletion (the
// janitor's Withdraw of the Live output types, with the UID as a delete
// precondition), once for each namespace and name the labels pair that UID
// with: the janitor withdraws only objects whose owner labels parse exactly
// to the owner it is given. Whether an owner is gone goes by UID alone.
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
	// By UID, namespace and name: the janitor withdraws only the outputs
	// whose owner labels parse exactly to the owner it is given, so each
	// distinct owner the labels name is withdrawn on its own.
	type named struct {
		key types.NamespacedName
		uid types.UID
	}
	owners := map[named]*v1alpha1.IdentityBinding{}
	for _, k := range s.kinds {
		l := output.NewList(k)
		if err := s.client.List(ctx, l, client.MatchingLabels{labels.OwnerKind: ownerKind}); err != nil {
			return 0, fmt.Errorf("list %s outputs: %w", k, err)
		}
		for _, o := range output.Items(l) {
			if b := ownerOf(o); b != nil {
				owners[named{client.ObjectKeyFromObject(b), b.UID}] = b
			}
		}
	}
	cached, err := s.cachedUIDs(ctx)
	if err != nil {
		return 0, err
	}
	var candidates []*v1alpha1.IdentityBinding
	for _, b := range owners {
		if !cached[b.UID] {
			candidates = append(candidates, b)
		}
	}
	if len(candidates) == 0 {
		return 0, nil
	}
	live, err := s.liveUIDs(ctx)
	if err != nil {
		return 0, err
	}
	withdrawn := 0
	for _, b := range candidates {
		if live[b.UID] {
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

// cachedUIDs returns the UIDs of the bindings in the cache: an owner among
// them is alive, and needs no uncached read (an object naming a live
// binding's UID costs nothing more than a cache read).
func (s *orphanSweeper) cachedUIDs(ctx context.Context) (map[types.UID]bool, error) {
	l := &v1alpha1.IdentityBindingList{}
	if err := s.client.List(ctx, l, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list cached bindings: %w", err)
	}
	return uidsIn(l)
}

// liveUIDs lists, uncached (the cache may lag behind a binding just
// created), the UIDs of every binding that exists, in any namespace.
func (s *orphanSweeper) liveUIDs(ctx context.Context) (map[types.UID]bool, error) {
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("IdentityBindingList"))
	if err := s.apiReader.List(ctx, l); err != nil {
		return nil, fmt.Errorf("list bindings: %w", err)
	}
	return uidsIn(l)
}

// uidsIn returns the UIDs of the items of l.
func uidsIn(l client.ObjectList) (map[types.UID]bool, error) {
	uids := map[types.UID]bool{}
	err := meta.EachListItem(l, func(o runtime.Object) error {
		m, err := meta.Accessor(o)
		if err != nil {
			return err
		}
		uids[m.GetUID()] = true
		return nil
	})
	return uids, err
}
