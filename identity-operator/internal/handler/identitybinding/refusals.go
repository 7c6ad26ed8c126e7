package identitybinding

import (
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trustplane/trustplane/common/access"
	"github.com/trustplane/trustplane/common/ctrlerrors"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
)

// refused reports whether err is the API server refusing an output for
// good until someone acts: the object is invalid (a schema, or an
// admission policy's Invalid) or admission forbids it (a denying webhook
// answers 403). Such an output can only be withdrawn. A write the
// operator's own permissions forbid (also 403) is not a refusal of the
// output: it says nothing of the binding's spec (access.ExplainForbidden).
func refused(err error) bool {
	return apierrors.IsInvalid(err) || forbiddenByAdmission(err)
}

// forbiddenByAdmission reports whether err is a Forbidden answer that the
// operator's own permissions do not explain.
func forbiddenByAdmission(err error) bool {
	return apierrors.IsForbidden(err) && !access.IsCallerDenied(err)
}

// confirmForbidden returns err, unless it is a Forbidden answer admission
// gave b's output write and the pass before (forbiddenBefore) did not meet
// one at this generation of b's spec: then it records it and returns a
// retryable error that is no refusal, so the outputs stay until the next
// pass meets the refusal again. The review that tells admission's refusal
// from the operator's role (access.ExplainForbidden) is asked after the
// write: a role granted in between, or an API server whose authorizer lags
// another's, makes a refusal by the role read as admission's. Only two
// passes in a row confirm it: an answer met before some other failure says
// nothing of the one met now.
func (h *Handler) confirmForbidden(b *v1alpha1.IdentityBinding, forbiddenBefore bool, err error) error {
	if !forbiddenByAdmission(err) || forbiddenBefore {
		return err
	}
	h.forbidden.add(b.UID, b.Generation, err)
	// %v, not %w: until confirmed, the answer is not a refusal (refused).
	return ctrlerrors.RetryableWithDelayErrorf(h.opts.WithdrawalRetry,
		"%v (the outputs are kept until the next pass is refused too: a refusal by the operator's own role, granted meanwhile, reads the same)", err)
}

// refusalRecords remember, for each binding, one refusal of its output
// write at one generation of its spec; a record of another generation is
// dropped when read.
type refusalRecords struct {
	mu sync.Mutex
	// at holds, for each binding, the generation it was refused at and
	// the refusal.
	at map[types.UID]refusal
}

// refusal is one refused write: at which generation of the binding, and
// what the API server said.
type refusal struct {
	generation int64
	err        string
}

// add records that uid's write was refused at generation with err.
func (r *refusalRecords) add(uid types.UID, generation int64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at == nil {
		r.at = map[types.UID]refusal{}
	}
	r.at[uid] = refusal{generation: generation, err: err.Error()}
}

// holds returns the refusal of uid's write at generation, if there was
// one; a record of another generation is dropped.
func (r *refusalRecords) holds(uid types.UID, generation int64) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	got, ok := r.at[uid]
	if ok && got.generation != generation {
		delete(r.at, uid)
		return "", false
	}
	return got.err, ok
}

// take returns whether uid's write was refused at generation, and drops
// uid's record.
func (r *refusalRecords) take(uid types.UID, generation int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	got, ok := r.at[uid]
	delete(r.at, uid)
	return ok && got.generation == generation
}

// forget drops uid's record.
func (r *refusalRecords) forget(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.at, uid)
}
