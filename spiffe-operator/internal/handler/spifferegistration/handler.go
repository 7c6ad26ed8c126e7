package spifferegistration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/trustplane/trustplane/common/ctrlerrors"
	"github.com/trustplane/trustplane/common/handler"
	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
	"github.com/trustplane/trustplane/spiffe-operator/internal/workload"
)

// Kind is the kind name used for ownership and metrics.
const Kind = "SpiffeRegistration"

// maxFailures caps status.failures.
const maxFailures = 5

// Handler registers the workloads a SpiffeRegistration selects.
type Handler struct {
	// Reader reads namespaces, normally the informer cache.
	Reader client.Reader
	// Lister yields workloads; nil means a workload.ReaderLister on Reader.
	Lister workload.Lister
	// Syncer writes the entries.
	Syncer *entrysync.Syncer
	// TrustDomain is the SPIRE server's trust domain; empty skips the check.
	TrustDomain string
	// Metrics records entries by policy and state; nil disables it.
	Metrics *entrysync.Metrics
	// Now returns the time; nil means time.Now.
	Now func() time.Time

	memo renders
}

var _ handler.Handler[*v1alpha1.SpiffeRegistration] = &Handler{}

// OwnerOf returns the entry owner that obj stands for.
func OwnerOf(obj *v1alpha1.SpiffeRegistration) entrysync.Owner {
	return entrysync.Owner{Kind: Kind, Name: obj.Name, UID: obj.UID, Created: obj.CreationTimestamp.Time}
}

// CreateOrUpdate renders the entries of every selected workload and makes
// SPIRE hold exactly those for this policy.
func (h *Handler) CreateOrUpdate(ctx context.Context, obj *v1alpha1.SpiffeRegistration) error {
	log := logf.FromContext(ctx)
	p, specErr := compile(&obj.Spec, h.TrustDomain)
	if specErr != nil {
		// Keep what is registered: a bad edit must not revoke identities.
		return ctrlerrors.WithReason(specErr.reason, ctrlerrors.BlockedErrorf("%w", specErr))
	}
	lister := h.Lister
	if lister == nil {
		lister = workload.ReaderLister{Reader: h.Reader}
	}
	var (
		rendered []*entries.Entry
		failures []v1alpha1.Failure
		memo     = h.memo.forPolicy(obj.UID, obj.Generation)
	)
	memo.begin()
	selected, err := workload.Each(ctx, h.Reader, lister, p.selection, func(w workload.Workload) {
		e, f := memo.render(p, w)
		if f != nil {
			failures = append(failures, *f)
			return
		}
		rendered = append(rendered, e)
	})
	if err != nil {
		return fmt.Errorf("select workloads: %w", err)
	}
	memo.end()
	want := merge(rendered)

	owner := OwnerOf(obj)
	out, syncErr := h.Syncer.Sync(ctx, owner, want)
	for _, f := range out.Failed {
		failures = append(failures, v1alpha1.Failure{Object: f.Entry.SpiffeID.String(), Reason: f.Reason, Message: f.Message})
	}
	slices.SortFunc(failures, func(a, b v1alpha1.Failure) int { return strings.Compare(a.Object, b.Object) })

	st := &obj.Status
	st.WorkloadsSelected = int32(selected)
	st.EntriesDesired = int32(len(want))
	st.EntriesRegistered = int32(len(out.Registered))
	st.EntriesMasked = int32(len(out.Masked))
	st.EntriesFailed = int32(len(failures))
	st.Failures = failures[:min(len(failures), maxFailures)]
	if len(st.Failures) == 0 {
		st.Failures = nil
	}
	if out.Talked && syncErr == nil {
		st.LastSyncTime = &metav1.Time{Time: h.now()}
	}
	h.Metrics.Record(owner, len(want), len(out.Registered), len(out.Masked), len(failures))
	log.V(1).Info("synced", "workloads", selected, "desired", len(want), "registered", len(out.Registered),
		"masked", len(out.Masked), "failed", len(failures), "talked", out.Talked)

	if syncErr != nil {
		return SpireError(syncErr)
	}
	if len(failures) > 0 {
		f := failures[0]
		reason := f.Reason
		if len(out.Failed) > 0 && !strings.HasPrefix(reason, "Invalid") && reason != ReasonUnsafePodSelector {
			reason = ReasonEntryRejected
		}
		return ctrlerrors.WithReason(reason, ctrlerrors.BlockedErrorf(
			"%d of %d workloads' entries failed; first: %s: %s: %s", len(failures), selected, f.Object, f.Reason, f.Message))
	}
	return nil
}

// Delete removes exactly the entries this policy holds.
func (h *Handler) Delete(ctx context.Context, obj *v1alpha1.SpiffeRegistration) error {
	owner := OwnerOf(obj)
	var parents []spiffeid.ID
	if id, err := spiffeid.FromString(obj.Spec.ParentID); err == nil {
		parents = append(parents, id)
	}
	if err := h.Syncer.Release(ctx, owner, parents); err != nil {
		return SpireError(err)
	}
	h.Metrics.Forget(owner)
	h.memo.forget(obj.UID)
	return nil
}

func (h *Handler) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

// SpireError maps a Syncer error to a retryable error with the reason a
// user can act on.
func SpireError(err error) error {
	switch {
	case errors.Is(err, entrysync.ErrStale):
		return ctrlerrors.WithReason(ReasonSpireChanged, ctrlerrors.RetryableErrorf("%w", err))
	case status.Code(err) == codes.InvalidArgument:
		return ctrlerrors.WithReason(ReasonEntryRejected, ctrlerrors.BlockedErrorf("SPIRE refused the request: %w", err))
	case status.Code(err) == codes.PermissionDenied || status.Code(err) == codes.Unauthenticated:
		return ctrlerrors.WithReason(ReasonSpirePermissionDenied, ctrlerrors.RetryableErrorf("SPIRE: %w", err))
	}
	return ctrlerrors.WithReason(ReasonSpireUnavailable, ctrlerrors.RetryableErrorf("SPIRE: %w", err))
}
