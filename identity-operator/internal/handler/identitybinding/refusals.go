package identitybinding

import (
	"errors"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trustplane/trustplane/common/access"
	"github.com/trustplane/trustplane/common/ctrlerrors"
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

// forbiddenRunGap is how many passes in a row may meet neither
// admission's Forbidden nor a written output (a review that failed, a 413,
// a pool that could not be read) without ending a run of Forbidden
// answers.
const forbiddenRunGap = 2

// confirmForbidden returns err, unless it is a Forbidden answer admission
// gave b's output write (access.RecheckForbidden: the write, sent again
// after the review, was refused too) and the run of such answers started
// less than WithdrawalRetry ago: then it returns a retryable error that is
// no refusal, so the outputs stay until the refusal has stood that long.
// Within one API server the recheck tells a permission granted between the
// write and its review from admission; the run's age covers API servers
// whose authorizers disagree for a moment, however many passes (events)
// come meanwhile.
func (h *Handler) confirmForbidden(pass *forbiddenPass, err error) error {
	if !forbiddenByAdmission(err) {
		return err
	}
	now := time.Now()
	if !pass.had {
		pass.run = forbiddenRun{since: now}
	}
	pass.run.misses = 0
	age := now.Sub(pass.run.since)
	if age >= h.opts.WithdrawalRetry {
		pass.outcome = runConfirmed
		return err
	}
	pass.outcome = runGoesOn
	// %v, not %w: until confirmed, the answer is not a refusal (refused).
	return ctrlerrors.RetryableWithDelayErrorf(h.opts.WithdrawalRetry-age,
		"%v (the outputs are kept until the refusal has stood for %s: a refusal by the operator's own role, while API servers disagree on it, reads the same)",
		err, h.opts.WithdrawalRetry)
}

// forbiddenRun is a run of Forbidden answers admission gave one binding's
// output writes: since when, and how many passes in a row since the last
// one met neither such an answer nor a written output.
type forbiddenRun struct {
	since  time.Time
	misses int
}

// runOutcome is what a pass did to its binding's run.
type runOutcome int

const (
	// runUnmet: the pass met no Forbidden answer of admission's.
	runUnmet runOutcome = iota
	// runGoesOn: it met one, and the run has not stood long enough.
	runGoesOn
	// runConfirmed: it met one, and the run has stood long enough.
	runConfirmed
)

// forbiddenPass is one pass's view of its binding's run.
type forbiddenPass struct {
	uid     types.UID
	run     forbiddenRun
	had     bool
	outcome runOutcome
}

// forbiddenRuns hold each binding's run of Forbidden answers between its
// passes: a pass takes its binding's run out (begin) and puts it back
// (end) unless the pass ended it.
type forbiddenRuns struct {
	mu sync.Mutex
	of map[types.UID]forbiddenRun
}

// begin takes uid's run out for a pass.
func (r *forbiddenRuns) begin(uid types.UID) *forbiddenPass {
	r.mu.Lock()
	defer r.mu.Unlock()
	run, had := r.of[uid]
	delete(r.of, uid)
	return &forbiddenPass{uid: uid, run: run, had: had}
}

// end puts the pass's run back, unless the pass ended it: it confirmed the
// refusal, wrote the outputs (err nil), met a refusal by the operator's
// own role or one that did not stand on its recheck, or was the
// forbiddenRunGap+1st pass in a row to meet nothing of the kind.
func (r *forbiddenRuns) end(pass *forbiddenPass, err error) {
	switch pass.outcome {
	case runConfirmed:
		return
	case runUnmet:
		var passed *access.PassedOnRecheckError
		if !pass.had || err == nil || access.IsCallerDenied(err) || errors.As(err, &passed) {
			return
		}
		pass.run.misses++
		if pass.run.misses > forbiddenRunGap {
			return
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.of == nil {
		r.of = map[types.UID]forbiddenRun{}
	}
	r.of[pass.uid] = pass.run
}

// forget drops uid's run.
func (r *forbiddenRuns) forget(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.of, uid)
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

// forget drops uid's record.
func (r *refusalRecords) forget(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.at, uid)
}
