package identitybinding

import (
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trustplane/trustplane/common/access"
)

// refused reports whether err is the API server refusing an output for
// good until someone acts: the object is invalid (a schema, or an
// admission policy's Invalid) or admission forbids it (a denying webhook
// answers 403). Such an output can only be withdrawn. A write the
// operator's own permissions forbid (also 403) is not a refusal of the
// output: it says nothing of the binding's spec (access.ExplainForbidden).
func refused(err error) bool {
	return apierrors.IsInvalid(err) || (apierrors.IsForbidden(err) && !access.IsCallerDenied(err))
}

// refusedAfterDryRun remembers the bindings whose output write the API
// server refused although its dry run had passed (an admission check that
// judges dry runs differently). Their passes do not write again until the
// binding's spec changes (its generation): otherwise each would write one
// kind, be refused the other, withdraw the first, and the withdrawal's
// event would start the same pass again.
type refusedAfterDryRun struct {
	mu sync.Mutex
	// at holds, for each such binding, the generation it was refused at
	// and the refusal.
	at map[types.UID]refusal
}

// refusal is one refused write: at which generation of the binding, and
// what the API server said.
type refusal struct {
	generation int64
	err        string
}

// add records that uid's write was refused at generation with err.
func (r *refusedAfterDryRun) add(uid types.UID, generation int64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at == nil {
		r.at = map[types.UID]refusal{}
	}
	r.at[uid] = refusal{generation: generation, err: err.Error()}
}

// holds returns the refusal of uid's write at generation, if there was
// one; a record of another generation is dropped.
func (r *refusedAfterDryRun) holds(uid types.UID, generation int64) (string, bool) {
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
func (r *refusedAfterDryRun) forget(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.at, uid)
}
