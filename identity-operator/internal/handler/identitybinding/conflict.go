package identitybinding

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/janitor"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/conflict"
	"github.com/trustplane/trustplane/identity-operator/internal/index"
	"github.com/trustplane/trustplane/identity-operator/internal/selector"
)

// findConflicts returns b's conflicts. Only bindings of the same
// namespace, service account and variant, or the same SPIFFE ID, can
// conflict (rules 1-4), so the two indexes give every candidate; a deleting peer counts until its
// finalizer is gone, that is until its outputs are confirmed deleted.
// Peers are read through the unscoped client, in every environment: all
// outputs reach the same SPIRE, so the environment decides who reconciles a
// binding, never whom it conflicts with.
func (h *Handler) findConflicts(ctx context.Context, b *v1alpha1.IdentityBinding, id string) ([]v1alpha1.Conflict, error) {
	var group, same v1alpha1.IdentityBindingList
	if err := h.client.List(ctx, &group, client.InNamespace(b.Namespace),
		client.MatchingFields{index.FieldGroup: index.GroupKey(b.Namespace, b.Spec.ServiceAccountName, b.Spec.IdentityBoundary.Variant)}); err != nil {
		return nil, fmt.Errorf("list bindings of service account %s/%s, variant %q: %w", b.Namespace, b.Spec.ServiceAccountName, b.Spec.IdentityBoundary.Variant, err)
	}
	if err := h.client.List(ctx, &same, client.MatchingFields{index.FieldSPIFFEID: index.IDKey(id)}); err != nil {
		return nil, fmt.Errorf("list bindings of SPIFFE ID %s: %w", id, err)
	}
	peers := make([]conflict.Member, 0, len(group.Items)+len(same.Items))
	for _, list := range [][]v1alpha1.IdentityBinding{group.Items, same.Items} {
		for i := range list {
			p := &list[i]
			if p.UID == b.UID {
				continue
			}
			if m, ok := h.member(p); ok {
				peers = append(peers, m)
			}
		}
	}
	self := conflict.Member{Namespace: b.Namespace, Name: b.Name, ServiceAccount: b.Spec.ServiceAccountName,
		Variant: b.Spec.IdentityBoundary.Variant, SPIFFEID: id}
	return conflict.Find(self, peers), nil
}

// member returns what the conflict rules see of a peer; ok is false for a
// peer whose spec is invalid, which never holds output and so never
// conflicts.
func (h *Handler) member(p *v1alpha1.IdentityBinding) (conflict.Member, bool) {
	if selector.ValidateVariant(p.Spec.IdentityBoundary.Variant) != nil || selector.ValidateServiceAccount(p.Spec.ServiceAccountName) != nil ||
		h.checkTTLs(p) != nil {
		return conflict.Member{}, false
	}
	id, ok := index.SPIFFEID(h.opts.TrustDomain, p)
	if !ok {
		return conflict.Member{}, false
	}
	return conflict.Member{Namespace: p.Namespace, Name: p.Name, ServiceAccount: p.Spec.ServiceAccountName,
		Variant: p.Spec.IdentityBoundary.Variant, SPIFFEID: id}, true
}

// Bounds on what a binding's status says of its conflicts, so that the
// size of each status write does not grow with the peers one namespace
// can create: status.conflicts lists the first conflictsListed (by peer),
// and the Conflict condition's message names the first conflictsNamed and
// counts all.
const (
	conflictsListed = 20
	conflictsNamed  = 5
)

// strongestFirst orders conflicts with the DuplicateSPIFFEID ones first
// (the condition's reason when there is one), each kind by peer, so that
// what the status lists and names shows the reason it gives.
func strongestFirst(conflicts []v1alpha1.Conflict) []v1alpha1.Conflict {
	out := slices.Clone(conflicts)
	slices.SortStableFunc(out, func(a, b v1alpha1.Conflict) int {
		ad, bd := a.Cause == v1alpha1.ReasonDuplicateSPIFFEID, b.Cause == v1alpha1.ReasonDuplicateSPIFFEID
		switch {
		case ad && !bd:
			return -1
		case bd && !ad:
			return 1
		}
		return strings.Compare(a.Peer, b.Peer)
	})
	return out
}

// listedConflicts returns the conflicts status.conflicts lists: the first
// conflictsListed, strongest first.
func listedConflicts(conflicts []v1alpha1.Conflict) []v1alpha1.Conflict {
	ordered := strongestFirst(conflicts)
	return ordered[:min(len(ordered), conflictsListed)]
}

// settleConflict withdraws b's outputs and reports the conflict; it is
// settled (Blocked) only once the outputs are confirmed gone.
func (h *Handler) settleConflict(ctx context.Context, j *janitor.Client, b *v1alpha1.IdentityBinding, conflicts []v1alpha1.Conflict) error {
	ordered := strongestFirst(conflicts)
	named := ordered[:min(len(ordered), conflictsNamed)]
	parts := make([]string, len(named))
	for i, c := range named {
		parts[i] = fmt.Sprintf("%s (%s)", c.Peer, c.Cause)
	}
	msg := "conflicts with " + strings.Join(parts, ", ")
	if more := len(conflicts) - len(named); more > 0 {
		msg += fmt.Sprintf(" and %d more (%d in all", more, len(conflicts))
		if len(conflicts) > conflictsListed {
			msg += fmt.Sprintf("; status.conflicts lists the first %d", conflictsListed)
		}
		msg += ")"
	}
	cause := reasoned(conflict.Reason(conflicts), errors.New(msg))
	return h.fail(ctx, j, b, v1alpha1.ConditionConflict, cause)
}
