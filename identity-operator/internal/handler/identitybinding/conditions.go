package identitybinding

import (
	"context"
	"errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/common/condition"
	"github.com/trustplane/trustplane/common/ctrlerrors"
	"github.com/trustplane/trustplane/common/janitor"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/selector"
)

// failureTypes are the failure conditions; at most one is present at a time.
var failureTypes = []string{
	v1alpha1.ConditionInvalidRef,
	v1alpha1.ConditionUnsafeSelector,
	v1alpha1.ConditionConflict,
	v1alpha1.ConditionRenderFailure,
}

// reasoned attaches a condition reason to err.
func reasoned(reason string, err error) error { return ctrlerrors.WithReason(reason, err) }

// reasonOf returns the condition reason an error carries.
func reasonOf(err error) string {
	var se *selector.Error
	if errors.As(err, &se) {
		return se.Reason
	}
	return ctrlerrors.Reason(err, "Failed")
}

// setFailure makes condType the one failure condition of b.
func setFailure(b *v1alpha1.IdentityBinding, condType, reason, message string) {
	for _, t := range failureTypes {
		if t != condType {
			b.Status.RemoveCondition(t)
		}
	}
	condition.SetStatus(b, condType, true, reason, message)
}

// clearFailuresButOutputRefusal removes every failure condition but a
// RenderFailure for an output the API server refused at b's current
// generation.
func clearFailuresButOutputRefusal(b *v1alpha1.IdentityBinding) {
	for _, t := range failureTypes {
		if c := condition.Find(b, t); c != nil && t == v1alpha1.ConditionRenderFailure &&
			c.Reason == v1alpha1.ReasonManagedOutputApplyFailed && c.ObservedGeneration == b.Generation {
			continue
		}
		b.Status.RemoveCondition(t)
	}
}

// clearFailures removes every failure condition.
func clearFailures(b *v1alpha1.IdentityBinding) {
	for _, t := range failureTypes {
		b.Status.RemoveCondition(t)
	}
}

// fail reports cause as the one failure condition condType, withdraws the
// binding's outputs ("any failure: no output") and returns the error that
// sets Ready=False with the same reason: Blocked once the outputs are
// confirmed gone (a user has to act), a short retry while they are not.
func (h *Handler) fail(ctx context.Context, j *janitor.Client, b *v1alpha1.IdentityBinding, condType string, cause error) error {
	reason := reasonOf(cause)
	if condType != v1alpha1.ConditionConflict {
		b.Status.Conflicts = nil
	}
	if reason != v1alpha1.ReasonManagedOutputApplyFailed {
		// Only an output failure comes after the selectors were rendered
		// in this pass; otherwise they would be stale.
		b.Status.Selectors = nil
		b.Status.SelectorFingerprint = ""
	}
	gone, err := h.withdraw(ctx, j, b)
	if err != nil {
		setFailure(b, condType, reason, cause.Error()+"; withdrawing outputs failed")
		return reasoned(reason, err)
	}
	if !gone {
		setFailure(b, condType, reason, cause.Error()+"; outputs are being withdrawn")
		return reasoned(reason, ctrlerrors.RetryableWithDelayErrorf(h.opts.WithdrawalRetry, "%w (outputs are being withdrawn)", cause))
	}
	b.Status.Outputs = nil
	setFailure(b, condType, reason, cause.Error()+"; no output is kept")
	return reasoned(reason, ctrlerrors.BlockedErrorf("%w", cause))
}

// reportBoundary sets the condition BoundaryEnforced from what was last read
// of the identity boundary's admission policies: True when they are in
// force; False, naming what is missing, when not; Unknown when they could
// not be read for a while. It does not touch Ready: a binding renders its
// outputs either way, and the condition says what the identity rests on.
// Before any read it leaves the condition as it is.
func (h *Handler) reportBoundary(b *v1alpha1.IdentityBinding) {
	r := h.opts.Boundary.Get()
	switch {
	case !r.Known:
	case r.Unreadable != "":
		condition.Set(b, metav1.Condition{Type: v1alpha1.ConditionBoundaryEnforced, Status: metav1.ConditionUnknown,
			Reason: v1alpha1.ReasonAdmissionPoliciesUnreadable,
			Message: condition.Cut("the operator cannot read the identity boundary's admission policies, so it cannot tell whether they are in force: "+
				r.Unreadable, maxBoundaryMessage)})
	case r.Why == "":
		condition.SetStatus(b, v1alpha1.ConditionBoundaryEnforced, true, v1alpha1.ReasonAdmissionPoliciesInForce,
			"the identity boundary's admission policies are installed, bound to deny in every namespace, fail closed and read the platform's parameters")
	default:
		condition.SetStatus(b, v1alpha1.ConditionBoundaryEnforced, false, v1alpha1.ReasonAdmissionPoliciesMissing,
			condition.Cut("whoever may create a pod can give it this variant's label, and so this identity: "+r.Why+
				"; install identity-operator/config/policy", maxBoundaryMessage))
	}
}

// maxBoundaryMessage bounds the BoundaryEnforced message.
const maxBoundaryMessage = 1024
