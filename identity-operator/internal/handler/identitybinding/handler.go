package identitybinding

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/trustplane/trustplane/common/access"
	"github.com/trustplane/trustplane/common/condition"
	"github.com/trustplane/trustplane/common/ctrlerrors"
	"github.com/trustplane/trustplane/common/handler"
	"github.com/trustplane/trustplane/common/janitor"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/boundary"
	"github.com/trustplane/trustplane/identity-operator/internal/idtemplate"
	"github.com/trustplane/trustplane/identity-operator/internal/output"
	"github.com/trustplane/trustplane/identity-operator/internal/pool"
	"github.com/trustplane/trustplane/identity-operator/internal/selector"
)

// Options configure the Handler.
type Options struct {
	// TrustDomain is the trust domain of every rendered SPIFFE ID.
	TrustDomain spiffeid.TrustDomain
	// ParentID is the parent of every SpiffeEntry: the node alias of the
	// cluster's agents.
	ParentID string
	// Outputs are the kinds written for a Ready binding.
	Outputs []output.Kind
	// ServedOutputs are the known output kinds whose CRD is served,
	// configured or not (Outputs among them). Withdrawal, the cleanup of
	// outputs a pass no longer wants and the wait for peers' outputs cover
	// all of them, so outputs of a kind written under an earlier --output
	// still go. Empty means Outputs.
	ServedOutputs []output.Kind
	// ClassName is set on ClusterSPIFFEID outputs when not empty.
	ClassName string
	// CRDMissingRetry is the slow retry while the InferencePool CRD is
	// missing; zero means one minute.
	CRDMissingRetry time.Duration
	// WithdrawalRetry is the retry while outputs are being deleted; zero
	// means two seconds.
	WithdrawalRetry time.Duration
	// MaxSVIDTTL is the longest X509-SVID or JWT-SVID TTL a binding may ask
	// for; zero means DefaultMaxSVIDTTL.
	MaxSVIDTTL time.Duration
	// PoolMissingGrace is how long a Ready binding keeps its outputs once
	// its pool is not found, so that a pool replaced (deleted and made
	// again, its pods running on) never leaves those pods without an
	// entry; zero withdraws them at once.
	PoolMissingGrace time.Duration
	// APIReader reads uncached (the manager's API reader in production): the
	// InferencePool CRD, to confirm it is really not served before bindings
	// are told it is missing and their outputs withdrawn. Nil means the
	// handler's client.
	APIReader client.Reader
	// CRDServing is what the operator last read of the InferencePool CRD
	// while it runs (the controller's CRD monitor sets it): a CRD that no
	// longer serves v1 InferencePools makes bindings to InferencePools
	// report InferencePoolCRDMissing, whatever the cache still holds. Nil
	// leaves that to the "no matches" check alone.
	CRDServing *pool.Serving
	// Boundary is what the operator last read of the identity boundary's
	// admission policies (the controller's boundary monitor sets it): every
	// pass reports it in the condition BoundaryEnforced. Nil, or nothing
	// read yet, sets no condition.
	Boundary *boundary.State
	// Informers is the cache behind the handler's client (the manager's
	// cache in production): a pool is read only once the cache's informer
	// for its kind has synced, so a pass never waits for one that cannot
	// list. Nil reads the client at once.
	Informers pool.InformerGetter
}

// DefaultMaxSVIDTTL is the longest SVID TTL a binding may ask for unless
// the operator is configured otherwise.
const DefaultMaxSVIDTTL = 24 * time.Hour

// Handler reconciles IdentityBindings.
type Handler struct {
	// client reads bindings, pools and outputs from the cache.
	client client.Client
	pools  pool.Resolver
	opts   Options
	// refusals are the bindings whose output write the API server refused
	// although its dry run had passed: they are not written again until
	// their spec changes (see writeOutputs).
	refusals refusalRecords
	// forbidden are the bindings whose output writes admission has been
	// forbidding (confirmForbidden).
	forbidden forbiddenRuns
	// missing are the Ready bindings whose pool is not found, in their
	// grace (PoolMissingGrace).
	missing missingPools
}

var (
	_ handler.Handler[*v1alpha1.IdentityBinding] = &Handler{}
	_ handler.Forgetter                          = &Handler{}
)

// New returns a Handler reading through c (cached). The janitor of each pass
// reads outputs uncached to confirm they are gone (controller.Options.APIReader),
// once for each binding until a pass writes one of its outputs again
// (janitor.ConfirmedGone).
func New(c client.Client, opts Options) (*Handler, error) {
	if opts.TrustDomain.IsZero() {
		return nil, errors.New("trust domain is required")
	}
	parent, err := spiffeid.FromString(opts.ParentID)
	if err != nil {
		return nil, fmt.Errorf("parent ID %q: %w", opts.ParentID, err)
	}
	if parent.TrustDomain() != opts.TrustDomain {
		return nil, fmt.Errorf("parent ID %q is not in trust domain %s", opts.ParentID, opts.TrustDomain)
	}
	if len(opts.Outputs) == 0 {
		opts.Outputs = []output.Kind{output.KindSpiffeEntry}
	}
	opts.ServedOutputs = slices.Clone(opts.ServedOutputs)
	for _, k := range opts.Outputs {
		if !slices.Contains(opts.ServedOutputs, k) {
			opts.ServedOutputs = append(opts.ServedOutputs, k)
		}
	}
	if opts.CRDMissingRetry == 0 {
		opts.CRDMissingRetry = time.Minute
	}
	if opts.WithdrawalRetry == 0 {
		opts.WithdrawalRetry = 2 * time.Second
	}
	if opts.MaxSVIDTTL == 0 {
		opts.MaxSVIDTTL = DefaultMaxSVIDTTL
	}
	if opts.MaxSVIDTTL < 0 {
		return nil, fmt.Errorf("max SVID TTL %s is negative", opts.MaxSVIDTTL)
	}
	return &Handler{client: c, pools: pool.Resolver{
		Reader: c, CRDReader: opts.APIReader, Serving: opts.CRDServing, Informers: opts.Informers,
	}, opts: opts}, nil
}

// CreateOrUpdate runs one pass. The checks run in a fixed order, and the
// first failure withdraws the binding's outputs and sets its one failure
// condition: the spec (variant, service account, SPIFFE ID template), then
// conflicts with peers, then the pool and the rendered selectors, then the
// outputs themselves. Transient read errors keep existing outputs.
func (h *Handler) CreateOrUpdate(ctx context.Context, b *v1alpha1.IdentityBinding) (err error) {
	log := logf.FromContext(ctx)
	j := janitor.FromContext(ctx)
	if j == nil {
		return errors.New("no janitor client in context")
	}

	forbidden := h.forbidden.begin(client.ObjectKeyFromObject(b), b.UID)
	defer func() {
		if p := recover(); p != nil {
			// A pass that panics failed otherwise: it keeps the run as a
			// failing pass does, then panics on for the Controller.
			h.forbidden.end(forbidden, errPassPanicked)
			panic(p)
		}
		h.forbidden.end(forbidden, err)
	}()

	// Status fields are recomputed every pass; the Controller writes them
	// only if they differ from what is stored. The SPIFFE ID is set only
	// once the pass ends Ready.
	b.Status.SPIFFEID = ""
	h.reportBoundary(b)

	// 1. The spec alone: variant, service account, SPIFFE ID.
	if err := selector.ValidateVariant(b.Spec.IdentityBoundary.Variant); err != nil {
		return h.fail(ctx, j, b, v1alpha1.ConditionUnsafeSelector, err)
	}
	if err := selector.ValidateServiceAccount(b.Spec.ServiceAccountName); err != nil {
		return h.fail(ctx, j, b, v1alpha1.ConditionUnsafeSelector, err)
	}
	if err := h.checkTTLs(b); err != nil {
		return h.fail(ctx, j, b, v1alpha1.ConditionRenderFailure, err)
	}
	id, err := idtemplate.Render(h.opts.TrustDomain, b.Spec.SPIFFEIDPathTemplate, idtemplate.Vars{
		Namespace:      b.Namespace,
		ServiceAccount: b.Spec.ServiceAccountName,
		Pool:           b.Spec.PoolRef.Name,
		Variant:        b.Spec.IdentityBoundary.Variant,
	})
	if err != nil {
		reason := v1alpha1.ReasonInvalidSPIFFEIDTemplate
		var outside *idtemplate.OutsideServiceAccountError
		if errors.As(err, &outside) {
			reason = v1alpha1.ReasonSPIFFEIDOutsideServiceAccount
		}
		return h.fail(ctx, j, b, v1alpha1.ConditionRenderFailure, reasoned(reason, fmt.Errorf("render SPIFFE ID: %w", err)))
	}

	// 2. Conflicts with peers of the same group or SPIFFE ID.
	conflicts, err := h.findConflicts(ctx, b, id)
	if err != nil {
		return err
	}
	b.Status.Conflicts = listedConflicts(conflicts)
	if len(conflicts) > 0 {
		return h.settleConflict(ctx, j, b, conflicts)
	}

	// 3. The pool and the rendered selector set.
	poolLabels, err := h.pools.Selector(ctx, b.Namespace, b.Spec.PoolRef)
	if err != nil {
		return h.poolFailure(ctx, j, b, err)
	}
	h.missing.forget(client.ObjectKeyFromObject(b))
	selectors, err := selector.Render(selector.Input{
		Namespace:      b.Namespace,
		ServiceAccount: b.Spec.ServiceAccountName,
		PoolLabels:     poolLabels,
		Variant:        b.Spec.IdentityBoundary.Variant,
	})
	if err != nil {
		return h.fail(ctx, j, b, v1alpha1.ConditionUnsafeSelector, err)
	}
	b.Status.Selectors = selectors
	b.Status.SelectorFingerprint = selector.Fingerprint(selectors)

	// 4. Outputs, once no former peer's output overlaps this one.
	d := output.Desired{
		Namespace:      b.Namespace,
		ServiceAccount: b.Spec.ServiceAccountName,
		Variant:        b.Spec.IdentityBoundary.Variant,
		SPIFFEID:       id,
		ParentID:       h.opts.ParentID,
		Selectors:      selectors,
		PoolLabels:     poolLabels,
		X509SVIDTTL:    b.Spec.X509SVIDTTL,
		JWTSVIDTTL:     b.Spec.JWTSVIDTTL,
		Hint:           b.Spec.Hint,
		ClassName:      h.opts.ClassName,
	}
	pending, err := h.peerOutputPending(ctx, j, d)
	if err != nil {
		return err
	}
	if pending != "" {
		// An output b holds for an earlier spec (another variant or
		// SPIFFE ID) goes now: kept while b waits, it would select pods b
		// no longer names, and a peer that moved into its group would
		// wait on it as b waits on the peer's (two bindings swapping
		// their variants waited on each other for good).
		stale, err := h.holdsStaleOutput(ctx, j, b, d)
		if err != nil {
			return err
		}
		if stale {
			if _, err := h.withdraw(ctx, j, b); err != nil {
				return err
			}
			b.Status.Outputs = nil
		}
		clearFailures(b)
		log.V(1).Info("waiting for a former peer's output to be withdrawn", "peerOutput", pending, "ownStaleOutputWithdrawn", stale)
		return ctrlerrors.WithReason(v1alpha1.ReasonPeerOutputPending, ctrlerrors.RetryableWithDelayErrorf(h.opts.WithdrawalRetry,
			"output %s of another binding still selects these workloads; waiting for it to be withdrawn", pending))
	}
	refs, err := h.writeOutputs(ctx, j, b, d, forbidden)
	if err != nil {
		// An object in the way, or an output the API server rejects (say,
		// more selectors than SpiffeEntry allows), needs a user; anything
		// else is retried.
		var (
			be       *blockedOutputError
			notOwned *janitor.NotOwnedError
		)
		if access.IsCallerDenied(err) {
			// The operator's role, not the spec: every binding whose output
			// must change meets it, and withdrawing would take the
			// identity of all their workloads at once. The outputs stay
			// as they are until the role allows the write. The failures an
			// earlier pass reported go, as this pass judged the spec again,
			// but for admission's refusal of an output of this very spec:
			// the operator's role is judged before admission, so this pass
			// could not judge the output again.
			clearFailuresButOutputRefusal(b)
			return ctrlerrors.WithReason(v1alpha1.ReasonOperatorForbidden, ctrlerrors.RetryableErrorf("%w", err))
		}
		if errors.As(err, &be) || errors.As(err, &notOwned) || refused(err) {
			return h.fail(ctx, j, b, v1alpha1.ConditionRenderFailure, reasoned(v1alpha1.ReasonManagedOutputApplyFailed, err))
		}
		return ctrlerrors.WithReason(v1alpha1.ReasonManagedOutputApplyFailed, err)
	}
	b.Status.Outputs = refs
	b.Status.SPIFFEID = id
	clearFailures(b)
	return nil
}

// Delete withdraws the binding's outputs and returns nil only once they are
// confirmed gone, so a deleting binding keeps counting as a conflict peer
// until then.
func (h *Handler) Delete(ctx context.Context, b *v1alpha1.IdentityBinding) error {
	h.Forget(client.ObjectKeyFromObject(b))
	gone, err := h.withdraw(ctx, janitor.FromContext(ctx), b)
	if err != nil {
		return err
	}
	if !gone {
		return ctrlerrors.RetryableWithDelayErrorf(h.opts.WithdrawalRetry, "waiting for the outputs of %s/%s to be deleted", b.Namespace, b.Name)
	}
	return nil
}

// Forget implements handler.Forgetter: it drops what the handler
// remembers of the binding key (its refusals), once the binding is gone
// or being deleted.
func (h *Handler) Forget(key types.NamespacedName) {
	h.refusals.forget(key)
	h.forbidden.forget(key)
	h.missing.forget(key)
}

// checkTTLs refuses SVID TTLs that are negative or not whole seconds
// (InvalidSVIDTTL) and TTLs longer than the configured maximum
// (SVIDTTLTooLong). SPIRE takes whole seconds and reads 0 as its own
// default, so "500ms" would silently become the server's default lifetime,
// which may be longer than the maximum.
func (h *Handler) checkTTLs(b *v1alpha1.IdentityBinding) error {
	for _, ttl := range []struct {
		field string
		d     *metav1.Duration
	}{{"x509SVIDTTL", b.Spec.X509SVIDTTL}, {"jwtSVIDTTL", b.Spec.JWTSVIDTTL}} {
		switch {
		case ttl.d == nil:
		case ttl.d.Duration < 0:
			return reasoned(v1alpha1.ReasonInvalidSVIDTTL, fmt.Errorf("%s %s is negative", ttl.field, ttl.d.Duration))
		case ttl.d.Duration%time.Second != 0:
			return reasoned(v1alpha1.ReasonInvalidSVIDTTL,
				fmt.Errorf("%s %s is not a whole number of seconds: SPIRE would cut it to %s, and reads 0s as its own default", ttl.field, ttl.d.Duration, ttl.d.Duration.Truncate(time.Second)))
		case ttl.d.Duration > h.opts.MaxSVIDTTL:
			return reasoned(v1alpha1.ReasonSVIDTTLTooLong,
				fmt.Errorf("%s %s is longer than the %s the operator allows (--max-svid-ttl)", ttl.field, ttl.d.Duration, h.opts.MaxSVIDTTL))
		}
	}
	return nil
}

// poolFailure maps a pool resolution error to its condition and retry.
func (h *Handler) poolFailure(ctx context.Context, j *janitor.Client, b *v1alpha1.IdentityBinding, err error) error {
	var re *pool.RefError
	var se *selector.Error
	switch {
	case errors.As(err, &re) && re.Reason == v1alpha1.ReasonInferencePoolCRDMissing:
		if fErr := h.fail(ctx, j, b, v1alpha1.ConditionInvalidRef, reasoned(re.Reason, err)); !ctrlerrors.IsBlocked(fErr) {
			return fErr
		}
		return ctrlerrors.WithReason(re.Reason, ctrlerrors.RetryableWithDelayErrorf(h.opts.CRDMissingRetry, "%w", err))
	case errors.As(err, &re) && re.Reason == v1alpha1.ReasonTargetPoolNotFound && h.opts.PoolMissingGrace > 0:
		if since, ok := h.missing.since(client.ObjectKeyFromObject(b), b, time.Now()); ok {
			if left := h.opts.PoolMissingGrace - time.Since(since); left > 0 {
				// %v, not %w: within the grace this is no refusal of
				// the spec, and the outputs stay as they are.
				return ctrlerrors.WithReason(re.Reason, ctrlerrors.RetryableWithDelayErrorf(left,
					"%v; the outputs are kept for %s after the pool went, as a pool replaced keeps its pods: they are withdrawn unless it comes back",
					err, h.opts.PoolMissingGrace))
			}
		}
		return h.fail(ctx, j, b, v1alpha1.ConditionInvalidRef, reasoned(re.Reason, err))
	case errors.As(err, &re):
		return h.fail(ctx, j, b, v1alpha1.ConditionInvalidRef, reasoned(re.Reason, err))
	case errors.As(err, &se):
		return h.fail(ctx, j, b, v1alpha1.ConditionUnsafeSelector, err)
	case ctrlerrors.Reason(err, "") == v1alpha1.ReasonPoolCacheNotSynced:
		// The API server serves the pool's kind (its informer exists): an
		// earlier pass's InferencePoolCRDMissing no longer holds.
		if c := condition.Find(b, v1alpha1.ConditionInvalidRef); c != nil && c.Reason == v1alpha1.ReasonInferencePoolCRDMissing {
			b.Status.RemoveCondition(v1alpha1.ConditionInvalidRef)
		}
	}
	return err
}
