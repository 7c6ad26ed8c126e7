package spiffefederation

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/trustplane/trustplane/common/condition"
	"github.com/trustplane/trustplane/common/ctrlerrors"
	"github.com/trustplane/trustplane/common/handler"
	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/class"
	"github.com/trustplane/trustplane/spiffe-operator/internal/handler/spifferegistration"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
)

// TypeConflict is the condition set while the object's trust domain is
// held by a relationship this operator did not create, or by another
// SpiffeFederation (the older one, or the one holding it). The object
// writes nothing to SPIRE meanwhile.
const TypeConflict = "Conflict"

// Condition reasons of this kind.
const (
	// ReasonInvalidTrustDomain: spec.trustDomain is not a trust domain
	// name, or is the SPIRE server's own.
	ReasonInvalidTrustDomain = spifferegistration.ReasonInvalidTrustDomain
	// ReasonInvalidBundleEndpointURL: spec.bundleEndpointURL is not an https URL with a host.
	ReasonInvalidBundleEndpointURL = "InvalidBundleEndpointURL"
	// ReasonInvalidProfile: spec.bundleEndpointProfile is neither https_web nor https_spiffe.
	ReasonInvalidProfile = "InvalidBundleEndpointProfile"
	// ReasonInvalidEndpointSPIFFEID: spec.endpointSPIFFEID is missing or
	// invalid with https_spiffe, or set with https_web.
	ReasonInvalidEndpointSPIFFEID = "InvalidEndpointSPIFFEID"
	// ReasonInvalidTrustDomainBundle: spec.trustDomainBundle is neither PEM
	// certificates nor a SPIFFE bundle, holds no authority or a certificate
	// that is no CA, holds no X.509 authority with https_spiffe, or, when
	// it is to be written, no CA valid at that time.
	ReasonInvalidTrustDomainBundle = "InvalidTrustDomainBundle"
	// ReasonForeignRelationship: SPIRE holds a relationship for the trust
	// domain that this object did not create; it is left alone.
	ReasonForeignRelationship = "ForeignRelationship"
	// ReasonTrustDomainTaken: another SpiffeFederation holds the trust
	// domain, or is older and waits for it.
	ReasonTrustDomainTaken = "TrustDomainTaken"
	// ReasonClaimed: the object recorded its claim of the trust domain and
	// creates the relationship in the next pass.
	ReasonClaimed = "Claimed"
	// ReasonRelationshipRejected: SPIRE refused the relationship.
	ReasonRelationshipRejected = "RelationshipRejected"
)

// Handler holds one federation relationship in SPIRE.
type Handler struct {
	// Reader lists the SpiffeFederations, normally the informer cache.
	Reader client.Reader
	// API reads and writes SPIRE's federation relationships.
	API spire.FederationAPI
	// TrustDomain is the SPIRE server's trust domain; empty skips the check.
	TrustDomain string
	// Class says which objects this instance takes: only those compete
	// for a trust domain.
	Class class.Filter
	// DryRun is true when API writes nothing (--dry-run).
	DryRun bool
	// ClaimDelay is how long after recording its claim the object is
	// reconciled again to create the relationship.
	ClaimDelay time.Duration
	// Now returns the time a start bundle's validity is judged at; nil is
	// time.Now.
	Now func() time.Time
}

// now returns the handler's current time.
func (h *Handler) now() time.Time {
	if h.Now == nil {
		return time.Now()
	}
	return h.Now()
}

var _ handler.Handler[*v1alpha1.SpiffeFederation] = &Handler{}

// CreateOrUpdate makes SPIRE hold the relationship of obj: created when
// none exists for its trust domain, updated when it is obj's own and
// differs from the spec, and left alone when it is not obj's own.
//
// The object records a claim of the trust domain in its status before it
// creates the relationship (one pass claims, the next creates), so a
// relationship it created is recognised even when the operator stops
// between the two writes or a status write conflicts; a relationship found
// under a claim is taken only if it is exactly the one the object would
// have created, so one made by someone else meanwhile stays foreign.
func (h *Handler) CreateOrUpdate(ctx context.Context, obj *v1alpha1.SpiffeFederation) (err error) {
	defer func() {
		if err == nil && h.DryRun {
			err = spifferegistration.DryRunError()
		}
	}()
	d, fe := build(&obj.Spec, h.TrustDomain)
	if fe != nil {
		return ctrlerrors.WithReason(fe.reason, ctrlerrors.BlockedErrorf("%w", fe))
	}
	td := d.relationship.TrustDomain
	st := &obj.Status
	held, claimed := st.RelationshipTrustDomain == td, st.ClaimedTrustDomain == td
	if !held && !claimed {
		by, err := h.aheadOf(ctx, obj, td)
		if err != nil {
			return err
		}
		if by != "" {
			return conflict(obj, ReasonTrustDomainTaken, fmt.Sprintf(
				"SpiffeFederation %s holds the trust domain %s (or is older and waits for it); this object writes nothing to SPIRE until it is deleted",
				by, td))
		}
	}
	have, err := h.API.Get(ctx, td)
	if err != nil {
		return spireError(err)
	}
	switch {
	case held:
	case claimed && have != nil:
		// Created by this object in a pass whose record was lost, or by
		// someone else since the claim: only the very relationship this
		// object would have created is taken as its own.
		if !sameAs(have, d) {
			st.ClaimedTrustDomain = ""
			return foreign(obj, td)
		}
		st.RelationshipTrustDomain, st.ClaimedTrustDomain = td, ""
		st.TrustDomainBundleSHA256 = d.bundleSHA256
	case claimed:
	case have != nil:
		return foreign(obj, td)
	case !h.DryRun:
		if err := d.writableAt(h.now()); err != nil {
			// No claim for a bundle that cannot be written: the trust
			// domain stays free for another object meanwhile.
			return notWritten(err)
		}
		st.RemoveCondition(TypeConflict)
		st.ClaimedTrustDomain = td
		return ctrlerrors.WithReason(ReasonClaimed, ctrlerrors.RetryableWithDelayErrorf(h.ClaimDelay,
			"recorded the claim of the trust domain %s; the relationship is created next", td))
	}
	st.RemoveCondition(TypeConflict)
	log := logf.FromContext(ctx)
	// The spec's bundle is written on creation and when it changed since
	// it was last written; in between SPIRE refreshes it from the endpoint.
	writeBundle := d.bundle != nil && (have == nil || d.bundleSHA256 != st.TrustDomainBundleSHA256)
	want := d.relationship
	if writeBundle {
		if err := d.writableAt(h.now()); err != nil {
			// A relationship this object holds, gone from SPIRE, is made
			// again without the bundle it was given once and that has
			// expired since: that bundle could authenticate nothing now,
			// and without it SPIRE uses the domain's bundle it holds.
			if !held || have != nil || d.bundleSHA256 != st.TrustDomainBundleSHA256 {
				return notWritten(err)
			}
			writeBundle = false
			log.Info("recreating the federation relationship without its start bundle, which is no longer valid", "trustDomain", td, "reason", err.Error())
		}
	}
	if writeBundle {
		want.TrustDomainBundle = d.bundle
	}
	if have == nil {
		if err := h.API.Create(ctx, want); err != nil {
			return spireError(err)
		}
		log.Info("created federation relationship", "trustDomain", td, "bundle", writeBundle)
		if !h.DryRun {
			st.RelationshipTrustDomain, st.ClaimedTrustDomain = td, ""
		}
	} else {
		mask := drift(have, d.relationship)
		if writeBundle {
			if mask == nil {
				mask = &types.FederationRelationshipMask{}
			}
			mask.TrustDomainBundle = true
		}
		if mask != nil {
			if err := h.API.Update(ctx, want, mask); err != nil {
				return spireError(err)
			}
			log.Info("updated federation relationship", "trustDomain", td, "mask", mask.String())
		}
	}
	if !h.DryRun {
		st.TrustDomainBundleSHA256 = d.bundleSHA256
	}
	return nil
}

// notWritten is the Blocked error of a start bundle that may not be written now.
func notWritten(err error) error {
	return ctrlerrors.WithReason(ReasonInvalidTrustDomainBundle, ctrlerrors.BlockedErrorf(
		"spec.trustDomainBundle is not written to SPIRE: %w", err))
}

// foreign reports the relationship for td as not this object's.
func foreign(obj *v1alpha1.SpiffeFederation, td string) error {
	return conflict(obj, ReasonForeignRelationship, fmt.Sprintf(
		"SPIRE already has a federation relationship for %s that this object did not create; it is left alone. "+
			"Delete it in SPIRE (spire-server federation delete -id %s) for this object to take over, or delete this object",
		td, td))
}

// Delete deletes the relationship obj holds, and nothing else: an object
// that never created one deletes nothing, and a status naming another
// trust domain than the spec's deletes nothing. Under a claim not yet confirmed,
// it deletes the relationship only if it is exactly the one the object
// would have created.
func (h *Handler) Delete(ctx context.Context, obj *v1alpha1.SpiffeFederation) error {
	td := obj.Status.RelationshipTrustDomain
	if td != "" && td != string(obj.Spec.TrustDomain) {
		// The spec's trust domain is immutable, so the object never held
		// another one's relationship: a status that says so was written by
		// someone else, and another's relationship (a partner's) stays.
		logf.FromContext(ctx).Error(nil, "the status names a relationship of another trust domain than the spec's; it is left alone",
			"statusTrustDomain", td, "specTrustDomain", obj.Spec.TrustDomain)
		return nil
	}
	if td == "" && obj.Status.ClaimedTrustDomain != "" {
		d, fe := read(&obj.Spec, h.TrustDomain)
		if fe != nil || d.relationship.TrustDomain != obj.Status.ClaimedTrustDomain {
			return nil
		}
		have, err := h.API.Get(ctx, obj.Status.ClaimedTrustDomain)
		if err != nil {
			return spireError(err)
		}
		if have != nil && sameAs(have, d) {
			td = obj.Status.ClaimedTrustDomain
		}
	}
	if td == "" {
		return nil
	}
	if err := h.API.Delete(ctx, td); err != nil {
		return spireError(err)
	}
	logf.FromContext(ctx).Info("deleted federation relationship", "trustDomain", td)
	return nil
}

// aheadOf returns the name of another SpiffeFederation of this instance
// that comes before obj for the trust domain td: one that holds or claims it, or
// else an older one (by creation time, then name) not being deleted.
// Empty when obj comes first.
func (h *Handler) aheadOf(ctx context.Context, obj *v1alpha1.SpiffeFederation, td string) (string, error) {
	var list v1alpha1.SpiffeFederationList
	if err := h.Reader.List(ctx, &list); err != nil {
		return "", fmt.Errorf("list SpiffeFederations: %w", err)
	}
	older := ""
	for i := range list.Items {
		o := &list.Items[i]
		if o.UID == obj.UID || string(o.Spec.TrustDomain) != td || !h.Class.Takes(o.Spec.ClassName) {
			continue
		}
		if o.Status.RelationshipTrustDomain == td || o.Status.ClaimedTrustDomain == td {
			return o.Name, nil
		}
		if o.DeletionTimestamp == nil && older == "" && before(o, obj) {
			older = o.Name
		}
	}
	return older, nil
}

// before reports whether a was created before b (by name on a tie).
func before(a, b *v1alpha1.SpiffeFederation) bool {
	ta, tb := a.CreationTimestamp.Time, b.CreationTimestamp.Time
	if !ta.Equal(tb) {
		return ta.Before(tb)
	}
	return strings.Compare(a.Name, b.Name) < 0
}

// conflict sets the Conflict condition and returns the Blocked error of
// the same reason.
func conflict(obj *v1alpha1.SpiffeFederation, reason, message string) error {
	condition.SetStatus(obj, TypeConflict, true, reason, message)
	return ctrlerrors.WithReason(reason, ctrlerrors.BlockedErrorf("%s", message))
}

// spireError maps an error of the TrustDomain API: a refusal is Blocked
// until the spec changes, anything else is retried.
func spireError(err error) error {
	if status.Code(err) == codes.InvalidArgument {
		return ctrlerrors.WithReason(ReasonRelationshipRejected, ctrlerrors.BlockedErrorf("SPIRE refused the relationship: %w", err))
	}
	return spifferegistration.SpireError(err)
}
