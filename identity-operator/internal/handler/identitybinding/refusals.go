package identitybinding

import (
	"errors"
	"strings"
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
// after the review, was refused too) and the run of such answers, worded
// by the same party, started less than WithdrawalRetry ago: then it
// returns a retryable error that is no refusal, so the outputs stay until
// the refusal has stood that long. Within one API server the recheck
// tells a permission granted between the write and its review from
// admission; the run's age covers API servers whose authorizers disagree
// for a moment, however many passes (events) come meanwhile; and a
// refusal worded by the authorizer (the role's, misread) after one worded
// by admission, or the reverse, starts a run of its own.
func (h *Handler) confirmForbidden(pass *forbiddenPass, err error) error {
	if !forbiddenByAdmission(err) {
		return err
	}
	now := time.Now()
	by := refusedBy(err)
	if !pass.had || pass.run.by != by {
		pass.run = forbiddenRun{uid: pass.run.uid, since: now, by: by}
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

// Who worded a Forbidden answer: the API server's authorizer or admission.
const (
	byAuthorizer = "authorizer"
	byAdmission  = "admission"
)

// refusedBy tells from its wording who refused the write err answers. The
// API server words the start of the message ("<resource> \"<name>\" is
// forbidden: " and then, for its authorizer, "User \"<name>\" cannot");
// what admission says, which may quote the object or the request, only
// follows, so it cannot pass for the authorizer's.
func refusedBy(err error) string {
	msg := err.Error()
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		msg = status.Status().Message
	}
	if _, after, ok := strings.Cut(msg, " is forbidden: "); ok && strings.HasPrefix(after, `User "`) {
		return byAuthorizer
	}
	return byAdmission
}

// forbiddenRun is a run of Forbidden answers admission gave one binding's
// output writes: since when, worded by whom (refusedBy), and how many
// passes in a row since the last one met neither such an answer nor a
// written output.
type forbiddenRun struct {
	uid    types.UID
	since  time.Time
	by     string
	misses int
}

// errPassPanicked is what a pass that panicked did, for its binding's
// run: it failed, and not with a refusal.
var errPassPanicked = errors.New("the pass panicked")

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
	key     types.NamespacedName
	run     forbiddenRun
	had     bool
	outcome runOutcome
}

// forbiddenRuns hold each binding's run of Forbidden answers between its
// passes, by the binding's key (a binding of the same name but another UID
// has none): a pass takes its binding's run out (begin) and puts it back
// (end) unless the pass ended it.
type forbiddenRuns struct {
	mu sync.Mutex
	of map[types.NamespacedName]forbiddenRun
}

// begin takes the run of b's key out for a pass, if it is b's.
func (r *forbiddenRuns) begin(key types.NamespacedName, uid types.UID) *forbiddenPass {
	r.mu.Lock()
	defer r.mu.Unlock()
	run, had := r.of[key]
	delete(r.of, key)
	if run.uid != uid {
		run, had = forbiddenRun{}, false
	}
	run.uid = uid
	return &forbiddenPass{key: key, run: run, had: had}
}

// end puts the pass's run back, unless the pass ended it: it confirmed the
// refusal, wrote the outputs (err nil), met a refusal by the operator's
// own role, or was the forbiddenRunGap+1st pass in a row to meet nothing
// of the kind.
func (r *forbiddenRuns) end(pass *forbiddenPass, err error) {
	switch pass.outcome {
	case runConfirmed:
		return
	case runUnmet:
		if !pass.had || err == nil || access.IsCallerDenied(err) {
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
		r.of = map[types.NamespacedName]forbiddenRun{}
	}
	r.of[pass.key] = pass.run
}

// forget drops key's run.
func (r *forbiddenRuns) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.of, key)
}

// held is how many bindings have a run.
func (r *forbiddenRuns) held() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.of)
}

// refusalRecords remember, for each binding (by key), one refusal of its
// output write at one generation of its spec; a record of another
// generation, or of another binding of the same name, is dropped when
// read.
type refusalRecords struct {
	mu sync.Mutex
	// at holds, for each binding, its UID, the generation it was refused
	// at, and the refusal.
	at map[types.NamespacedName]refusal
}

// refusal is one refused write: of which binding, at which generation of
// it, and what the API server said.
type refusal struct {
	uid        types.UID
	generation int64
	err        string
}

// add records that the write of b (key, uid) was refused at generation
// with err.
func (r *refusalRecords) add(key types.NamespacedName, uid types.UID, generation int64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at == nil {
		r.at = map[types.NamespacedName]refusal{}
	}
	r.at[key] = refusal{uid: uid, generation: generation, err: err.Error()}
}

// holds returns the refusal of the write of b (key, uid) at generation,
// if there was one; a record of another generation or UID is dropped.
func (r *refusalRecords) holds(key types.NamespacedName, uid types.UID, generation int64) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	got, ok := r.at[key]
	if ok && (got.uid != uid || got.generation != generation) {
		delete(r.at, key)
		return "", false
	}
	return got.err, ok
}

// forget drops key's record.
func (r *refusalRecords) forget(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.at, key)
}

// held is how many bindings have a record.
func (r *refusalRecords) held() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.at)
}
