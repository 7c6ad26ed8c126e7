package identitybinding

import (
	"errors"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"k8s.io/apimachinery/pkg/types"

	"github.com/trustplane/trustplane/common/access"
)

// TestARefusalHoldsForItsGenerationOnly checks the memory of writes
// refused after their dry run: it holds for the binding and generation
// refused at, names the refusal, and is dropped by a pass of another
// generation, by a binding of the same name and another UID, and by
// forget, one binding apart from another.
func TestARefusalHoldsForItsGenerationOnly(t *testing.T) {
	var r refusalRecords
	a, b := types.NamespacedName{Namespace: "n", Name: "a"}, types.NamespacedName{Namespace: "n", Name: "b"}
	if _, ok := r.holds(a, "a1", 1); ok {
		t.Fatal("holds before any refusal")
	}
	r.add(a, "a1", 3, errors.New("refused by policy"))
	r.add(b, "b1", 1, errors.New("forbidden"))
	if msg, ok := r.holds(a, "a1", 3); !ok || msg != "refused by policy" {
		t.Fatalf("holds(a, 3) = %q, %v; want the refusal", msg, ok)
	}
	if _, ok := r.holds(a, "a1", 4); ok {
		t.Fatal("holds for a generation it was not refused at")
	}
	if _, ok := r.holds(a, "a1", 3); ok {
		t.Fatal("a pass of another generation did not drop the record")
	}
	r.add(a, "a1", 3, errors.New("refused by policy"))
	if _, ok := r.holds(a, "a2", 3); ok {
		t.Fatal("holds for a binding of the same name and another UID")
	}
	if _, ok := r.holds(b, "b1", 1); !ok {
		t.Fatal("one binding's record went with another's")
	}
	r.forget(b)
	if _, ok := r.holds(b, "b1", 1); ok || r.held() != 0 {
		t.Fatalf("holds after forget, or %d records held", r.held())
	}
}

// TestARunEndsOnlyOnWhatShowsTheRefusalDoesNotStand checks what keeps a
// binding's run of Forbidden answers between passes: a pass that met one
// keeps it; a write, a refusal by the operator's own role, or a
// confirmation ends it; any other failure is borne forbiddenRunGap times
// in a row, and the next ends it. A binding of the same name and another
// UID has no run.
func TestARunEndsOnlyOnWhatShowsTheRefusalDoesNotStand(t *testing.T) {
	var r forbiddenRuns
	a := types.NamespacedName{Namespace: "n", Name: "a"}
	const uid = types.UID("a1")
	since := time.Unix(1, 0)
	// started ends a pass that met a Forbidden answer and kept the outputs.
	started := func() {
		p := r.begin(a, uid)
		p.outcome, p.run = runGoesOn, forbiddenRun{uid: uid, since: since}
		r.end(p, errors.New("forbidden, outputs kept"))
	}
	if r.begin(a, uid).had {
		t.Fatal("a run before any pass")
	}
	other := errors.New("a 413")
	started()
	for i := 1; i <= forbiddenRunGap; i++ {
		p := r.begin(a, uid)
		if !p.had || p.run.misses != i-1 {
			t.Fatalf("after %d other failures: had %v, misses %d", i-1, p.had, p.run.misses)
		}
		r.end(p, other)
	}
	p := r.begin(a, uid)
	if !p.had || !p.run.since.Equal(since) {
		t.Fatalf("the run did not bear %d other failures, or lost its start: %+v", forbiddenRunGap, p)
	}
	r.end(p, other)
	if r.begin(a, uid).had {
		t.Fatalf("the run bore %d other failures in a row", forbiddenRunGap+1)
	}
	for name, err := range map[string]error{
		"a written output":      nil,
		"a refusal by the role": &access.CallerDeniedError{Verb: "update", Resource: "spiffeentries"},
	} {
		started()
		r.end(r.begin(a, uid), err)
		if r.begin(a, uid).had {
			t.Errorf("%s did not end the run", name)
		}
	}
	started()
	p = r.begin(a, uid)
	p.outcome = runConfirmed
	r.end(p, errors.New("forbidden"))
	if r.begin(a, uid).had {
		t.Error("a confirmed refusal did not end the run")
	}
	started()
	if r.begin(a, "a2").had {
		t.Error("a binding of the same name and another UID has the run")
	}
	started()
	r.forget(a)
	if r.begin(a, uid).had || r.held() != 0 {
		t.Errorf("forget kept the run, or %d runs held", r.held())
	}
}

// TestARefusalIsTheAuthorizersOnlyWhenTheAPIServerWordsItSo checks
// refusedBy against the wording of the API server's answers: its
// authorizer's refusal, and admission's, whose message (which may quote
// the object or the request) comes after the API server's own words and
// cannot pass for the authorizer's.
func TestARefusalIsTheAuthorizersOnlyWhenTheAPIServerWordsItSo(t *testing.T) {
	gr := schema.GroupResource{Group: "spiffe.trustplane.dev", Resource: "spiffeentries"}
	for _, c := range []struct {
		name, inner, want string
	}{
		{"the authorizer", `User "system:serviceaccount:ops:op" cannot update resource "spiffeentries" in API group "spiffe.trustplane.dev" at the cluster scope`, byAuthorizer},
		{"a policy", `ValidatingAdmissionPolicy 'p' with binding 'p' denied request: no change`, byAdmission},
		{"a webhook", `admission webhook "deny.example.org" denied the request: no`, byAdmission},
		{"a policy quoting a hint worded as the authorizer", `ValidatingAdmissionPolicy 'p' with binding 'p' denied request: is forbidden: User "x" cannot update`, byAdmission},
	} {
		err := fmt.Errorf("update SpiffeEntry e: %w", apierrors.NewForbidden(gr, "e", errors.New(c.inner)))
		if got := refusedBy(err); got != c.want {
			t.Errorf("%s: refusedBy = %s, want %s", c.name, got, c.want)
		}
	}
}
