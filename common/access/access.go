// Package access tells apart the two reasons an API server forbids a write.
// A write may be forbidden because of who makes it (the caller's own
// permissions, judged by RBAC or another authorizer), or because of what it
// writes (a denying admission webhook or policy). Both answer 403 Forbidden,
// but they call for opposite handling: a refusal of the object judges the
// spec it was rendered from, while a refusal of the caller says nothing of
// the object and meets every object of that kind alike, and is cured only by
// granting the caller the permission.
package access

import (
	"context"
	"errors"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// CallerDeniedError is a write forbidden because the caller's own
// permissions do not allow it. It wraps the API server's Forbidden answer.
type CallerDeniedError struct {
	// Verb, Group and Resource are the request the authorizer denied;
	// Namespace and Name are the object's (Name is empty for a create).
	Verb, Group, Resource, Namespace, Name string
	// Reason is the authorizer's reason, when it gives one.
	Reason string
	err    error
}

// Error names the permission to grant.
func (e *CallerDeniedError) Error() string {
	what := e.Resource
	if e.Group != "" {
		what += "." + e.Group
	}
	if e.Name != "" {
		what += " " + e.Name
	}
	where := "at the cluster scope"
	if e.Namespace != "" {
		where = "in namespace " + e.Namespace
	}
	msg := fmt.Sprintf("the operator's own permissions do not allow it to %s %s %s: grant %q on %q in its role", e.Verb, what, where, e.Verb, e.Resource)
	if e.Reason != "" {
		msg += " (" + e.Reason + ")"
	}
	return msg + ": " + e.err.Error()
}

// Unwrap returns the API server's Forbidden answer.
func (e *CallerDeniedError) Unwrap() error { return e.err }

// UnexplainedError is a Forbidden write for which asking whether the
// caller may make it failed: whose refusal it was is unknown. It does not
// unwrap to the Forbidden answer, so that no caller takes it for a refusal
// of the object.
type UnexplainedError struct {
	// Forbidden is the API server's answer to the write.
	Forbidden error
	// Review is why asking failed.
	Review error
}

// Error says both what was refused and why its cause is unknown.
func (e *UnexplainedError) Error() string {
	return fmt.Sprintf("%v (whether the operator's own permissions allow the write is unknown: %v)", e.Forbidden, e.Review)
}

// ExplainForbidden returns err unchanged unless it is a Forbidden answer
// to the caller's verb (such as "create" or "update") on obj. Then it asks
// the API server whether the caller may do that (a SelfSubjectAccessReview,
// which every authenticated user may create by default): if it may not, it
// returns a *CallerDeniedError; if it may, err unchanged, as admission
// refused the object. If the review fails, it returns an *UnexplainedError.
//
// The review is asked after the write: a permission granted in between (or
// an API server whose authorizer is fresher than the one that judged the
// write) makes the caller's own refusal read as admission's: a caller that
// withdraws what it rendered on admission's refusal should send the write
// again after the review (RecheckForbidden), and see the refusal stand for
// a while first.
func ExplainForbidden(ctx context.Context, c client.Client, verb string, obj client.Object, err error) error {
	if !apierrors.IsForbidden(err) {
		return err
	}
	attrs, aErr := attributes(c, verb, obj)
	if aErr != nil {
		return &UnexplainedError{Forbidden: err, Review: aErr}
	}
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: attrs}}
	if rErr := c.Create(ctx, review); rErr != nil {
		return &UnexplainedError{Forbidden: err, Review: fmt.Errorf("self subject access review: %w", rErr)}
	}
	if review.Status.Allowed {
		return err
	}
	return &CallerDeniedError{Verb: attrs.Verb, Group: attrs.Group, Resource: attrs.Resource,
		Namespace: attrs.Namespace, Name: attrs.Name, Reason: review.Status.Reason, err: err}
}

// RecheckForbidden is ExplainForbidden for a write that may be sent again:
// again sends the very same request again (a server-side dry run if the
// first was one). When the review says the caller may make the write,
// RecheckForbidden calls again, which the API server judges after the
// review:
//   - it passes: nil, as the write is made (a permission granted between
//     the write and the review, or an admission check that changed its
//     answer, let it through);
//   - it is forbidden too: err, as admission refused the object (unless
//     the caller's permissions changed between the review and the
//     recheck, or API servers whose authorizers disagree answered them);
//   - it conflicts (the object changed meanwhile, say its status): err,
//     as ExplainForbidden reads it, since the recheck could not judge;
//   - it is answered about the object (AlreadyExists, NotFound, Invalid):
//     that answer, as the write met it now;
//   - it fails otherwise: an *UnexplainedError.
func RecheckForbidden(ctx context.Context, c client.Client, verb string, obj client.Object, err error, again func(context.Context) error) error {
	err = ExplainForbidden(ctx, c, verb, obj, err)
	if !apierrors.IsForbidden(err) || IsCallerDenied(err) {
		return err
	}
	switch sent := again(ctx); {
	case sent == nil:
		return nil
	case apierrors.IsForbidden(sent), apierrors.IsConflict(sent):
		return err
	case apierrors.IsAlreadyExists(sent), apierrors.IsNotFound(sent), apierrors.IsInvalid(sent):
		return sent
	default:
		return &UnexplainedError{Forbidden: err, Review: fmt.Errorf("the write sent again after the review: %w", sent)}
	}
}

// IsCallerDenied reports whether err is, or wraps, a *CallerDeniedError.
func IsCallerDenied(err error) bool {
	var denied *CallerDeniedError
	return errors.As(err, &denied)
}

// attributes are the resource attributes of verb on obj, as the API server
// authorizes them. A create names no object: RBAC's resourceNames never
// match a create, so a review naming one would judge another request.
func attributes(c client.Client, verb string, obj client.Object) (*authorizationv1.ResourceAttributes, error) {
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
	if err != nil {
		return nil, fmt.Errorf("kind of %T: %w", obj, err)
	}
	mapping, err := c.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("resource of %s: %w", gvk, err)
	}
	attrs := &authorizationv1.ResourceAttributes{Verb: verb, Group: gvk.Group, Version: gvk.Version,
		Resource: mapping.Resource.Resource, Namespace: obj.GetNamespace()}
	if verb != "create" {
		attrs.Name = obj.GetName()
	}
	return attrs, nil
}
