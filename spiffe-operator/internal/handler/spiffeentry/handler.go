package spiffeentry

import (
	"context"
	"fmt"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/trustplane/trustplane/common/condition"
	"github.com/trustplane/trustplane/common/ctrlerrors"
	"github.com/trustplane/trustplane/common/handler"
	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
	"github.com/trustplane/trustplane/spiffe-operator/internal/handler/spifferegistration"
)

// Kind is the kind name used for ownership and metrics.
const Kind = "SpiffeEntry"

// TypeMasked is the condition set while an older object or a foreign entry
// holds the same entry (same parent ID, SPIFFE ID and selectors). The
// workload still gets its identity; this object takes over when the holder goes.
const TypeMasked = "Masked"

// Condition reasons of this kind.
const (
	// ReasonInvalidSpiffeID: spec.spiffeID is not a SPIFFE ID of the
	// server's trust domain, or is over entries.MaxIDLength bytes.
	ReasonInvalidSpiffeID = "InvalidSpiffeID"
	// ReasonInvalidParentID: spec.parentID is not a SPIFFE ID of the server's trust domain.
	ReasonInvalidParentID = spifferegistration.ReasonInvalidParentID
	// ReasonInvalidSelector: an entry of spec.selectors is not type:value,
	// or is longer than an entry's selector may be.
	ReasonInvalidSelector = "InvalidSelector"
	// ReasonInvalidDNSName: an entry of spec.dnsNames has a label over 63
	// characters.
	ReasonInvalidDNSName = "InvalidDNSName"
	// ReasonInvalidFederatesWith: an entry of spec.federatesWith is not a trust domain.
	ReasonInvalidFederatesWith = spifferegistration.ReasonInvalidFederatesWith
	// ReasonInvalidTTL: a TTL is out of range.
	ReasonInvalidTTL = spifferegistration.ReasonInvalidTTL
	// ReasonMaskedByObject: an older SpiffeRegistration or SpiffeEntry holds the entry.
	ReasonMaskedByObject = "MaskedByOlderObject"
	// ReasonMaskedByForeignEntry: an entry this operator did not create holds it.
	ReasonMaskedByForeignEntry = "MaskedByForeignEntry"
)

// Handler registers one explicit entry.
type Handler struct {
	// DryRun is true when the Syncer writes nothing (--dry-run).
	DryRun bool
	// Syncer writes the entry.
	Syncer *entrysync.Syncer
	// TrustDomain is the SPIRE server's trust domain; empty skips the check.
	TrustDomain string
	// Metrics records entries by object and state; nil disables it.
	Metrics *entrysync.Metrics
}

var (
	_ handler.Handler[*v1alpha1.SpiffeEntry] = &Handler{}
	_ handler.Forgetter                      = &Handler{}
)

// OwnerOf returns the entry owner that obj stands for.
func OwnerOf(obj *v1alpha1.SpiffeEntry) entrysync.Owner {
	return entrysync.Owner{Kind: Kind, Name: obj.Name, UID: obj.UID, Created: obj.CreationTimestamp.Time}
}

type fieldError struct {
	reason, field string
	err           error
}

func (e *fieldError) Error() string { return fmt.Sprintf("%s: %v", e.field, e.err) }

// build validates spec into an entry.
func build(spec *v1alpha1.SpiffeEntrySpec, serverTD string) (entries.Entry, *fieldError) {
	var e entries.Entry
	id := func(field, reason, s string) (spiffeid.ID, *fieldError) {
		v, err := spiffeid.FromString(s)
		if err == nil && v.Path() == "" {
			err = fmt.Errorf("%q has no path", s)
		}
		if err == nil && serverTD != "" && v.TrustDomain().Name() != serverTD {
			err = fmt.Errorf("%q is not in the SPIRE server's trust domain %q", s, serverTD)
		}
		if err == nil {
			err = entries.CheckIDLength(v)
		}
		if err != nil {
			return spiffeid.ID{}, &fieldError{reason, field, err}
		}
		return v, nil
	}
	var fe *fieldError
	if e.SpiffeID, fe = id("spec.spiffeID", ReasonInvalidSpiffeID, spec.SpiffeID); fe != nil {
		return e, fe
	}
	if e.ParentID, fe = id("spec.parentID", ReasonInvalidParentID, spec.ParentID); fe != nil {
		return e, fe
	}
	if e.SpiffeID.TrustDomain() != e.ParentID.TrustDomain() {
		return e, &fieldError{ReasonInvalidParentID, "spec.parentID", fmt.Errorf("not in the trust domain of spec.spiffeID")}
	}
	if len(spec.Selectors) == 0 {
		return e, &fieldError{ReasonInvalidSelector, "spec.selectors", fmt.Errorf("at least one selector is required")}
	}
	// The CRD's maxItems may be missing (an older or edited CRD): SPIRE's
	// datastore fails a lookup of that many selectors as an Internal error.
	if err := entries.CheckSelectorCount(len(spec.Selectors)); err != nil {
		return e, &fieldError{ReasonInvalidSelector, "spec.selectors", err}
	}
	for i, s := range spec.Selectors {
		sel, err := entries.ParseSelector(s)
		if err == nil {
			err = entries.CheckSelectorLength(sel)
		}
		if err != nil {
			return e, &fieldError{ReasonInvalidSelector, fmt.Sprintf("spec.selectors[%d]", i), err}
		}
		e.Selectors = append(e.Selectors, sel)
	}
	for i, f := range spec.FederatesWith {
		td, err := spiffeid.TrustDomainFromString(string(f))
		if err != nil {
			return e, &fieldError{ReasonInvalidFederatesWith, fmt.Sprintf("spec.federatesWith[%d]", i), err}
		}
		e.FederatesWith = append(e.FederatesWith, td.Name())
	}
	ttl := func(field string, d *metav1.Duration) (int32, *fieldError) {
		if d == nil {
			return 0, nil
		}
		if d.Duration < 0 || d.Seconds() > 1<<31-1 {
			return 0, &fieldError{ReasonInvalidTTL, field, fmt.Errorf("%s is out of range", d.Duration)}
		}
		return int32(d.Seconds()), nil
	}
	if e.X509SVIDTTL, fe = ttl("spec.x509SVIDTTL", spec.X509SVIDTTL); fe != nil {
		return e, fe
	}
	if e.JWTSVIDTTL, fe = ttl("spec.jwtSVIDTTL", spec.JWTSVIDTTL); fe != nil {
		return e, fe
	}
	for i, name := range spec.DNSNames {
		// The rest of a DNS name's syntax is SPIRE's to judge (it
		// refuses with InvalidArgument, reported as EntryRejected).
		if err := entries.CheckDNSLabels(name); err != nil {
			return e, &fieldError{ReasonInvalidDNSName, fmt.Sprintf("spec.dnsNames[%d]", i), err}
		}
	}
	e.DNSNames = spec.DNSNames
	e.Hint, e.Admin, e.Downstream = spec.Hint, spec.Admin, spec.Downstream
	e.Normalize()
	return e, nil
}

// CreateOrUpdate makes SPIRE hold the entry for this object.
func (h *Handler) CreateOrUpdate(ctx context.Context, obj *v1alpha1.SpiffeEntry) (err error) {
	defer func() {
		if err == nil && h.DryRun {
			err = spifferegistration.DryRunError()
		}
	}()
	e, fe := build(&obj.Spec, h.TrustDomain)
	if fe != nil {
		return ctrlerrors.WithReason(fe.reason, ctrlerrors.BlockedErrorf("%w", fe))
	}
	owner := OwnerOf(obj)
	owner.Grants = e.Grants()
	out, err := h.Syncer.Sync(ctx, owner, []*entries.Entry{&e}, entrysync.ParseParents(obj.Status.ParentIDs))
	obj.Status.ParentIDs = out.Parents
	if err != nil {
		return spifferegistration.SpireError(err)
	}
	h.Metrics.Record(owner, 1, len(out.Registered), len(out.Masked), len(out.Failed))
	obj.Status.EntryID = out.Registered[e.Key()]
	switch {
	case len(out.Masked) > 0:
		m := out.Masked[0]
		reason := ReasonMaskedByObject
		if m.Foreign {
			reason = ReasonMaskedByForeignEntry
		}
		condition.SetStatus(obj, TypeMasked, true, reason,
			fmt.Sprintf("the same entry is held by %s; this object takes over when it goes", m.By))
	default:
		obj.Status.RemoveCondition(TypeMasked)
	}
	if len(out.Failed) > 0 {
		f := out.Failed[0]
		if entrysync.OwnReason(f.Reason) {
			return ctrlerrors.WithReason(f.Reason, ctrlerrors.BlockedErrorf("%s", f.Message))
		}
		return ctrlerrors.WithReason(spifferegistration.ReasonEntryRejected,
			ctrlerrors.BlockedErrorf("SPIRE refused the entry: %s: %s", f.Reason, f.Message))
	}
	return nil
}

// Delete removes the entry this object holds, under its parent and under
// every parent its status recorded.
func (h *Handler) Delete(ctx context.Context, obj *v1alpha1.SpiffeEntry) error {
	owner := OwnerOf(obj)
	parents := entrysync.ParseParents(obj.Status.ParentIDs, obj.Spec.ParentID)
	if err := h.Syncer.Release(ctx, owner, parents); err != nil {
		return spifferegistration.SpireError(err)
	}
	h.Metrics.Forget(owner)
	return nil
}

// Forget implements handler.Forgetter: an object gone from the cache
// without its Delete pass (its finalizer removed by hand) gives up its
// claim on its entry, so that the next claimant is no longer masked by it
// (see entrysync.Syncer.Forget).
func (h *Handler) Forget(key k8stypes.NamespacedName) {
	for _, o := range h.Syncer.Forget(Kind, key.Name) {
		h.Metrics.Forget(o)
	}
}
