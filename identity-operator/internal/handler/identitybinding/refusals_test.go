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
// refused after their dry run: it holds for the generation refused at,
// names the refusal, and is dropped by a pass of another generation and
// by forget, one binding apart from another.
func TestARefusalHoldsForItsGenerationOnly(t *testing.T) {
	var r refusalRecords
	a, b := types.UID("a"), types.UID("b")
	if _, ok := r.holds(a, 1); ok {
		t.Fatal("holds before any refusal")
	}
	r.add(a, 3, errors.New("refused by policy"))
	r.add(b, 1, errors.New("forbidden"))
	if msg, ok := r.holds(a, 3); !ok || msg != "refused by policy" {
		t.Fatalf("holds(a, 3) = %q, %v; want the refusal", msg, ok)
	}
	if _, ok := r.holds(a, 4); ok {
		t.Fatal("holds for a generation it was not refused at")
	}
	if _, ok := r.holds(a, 3); ok {
		t.Fatal("a pass of another generation did not drop the record")
	}
	if _, ok := r.holds(b, 1); !ok {
		t.Fatal("one binding's record went with another's")
	}
	r.forget(b)
	if _, ok := r.holds(b, 1); ok {
		t.Fatal("holds after forget")
	}
}

// TestARunEndsOnlyOnWhatShowsTheRefusalDoesNotStand checks what keeps a
// binding's run of Forbidden answers between passes: a pass that met one
// keeps it; a write, a refusal by the operator's own role, a refusal that
// passed on its recheck, or a confirmation ends it; any other failure is
// borne forbiddenRunGap times in a row, and the next ends it.
func TestARunEndsOnlyOnWhatShowsTheRefusalDoesNotStand(t *testing.T) {
	var r forbiddenRuns
	a := types.UID("a")
	// started ends a pass that met a Forbidden answer and kept the outputs.
	started := func() {
		p := r.begin(a)
		p.outcome, p.run = runGoesOn, forbiddenRun{since: time.Unix(1, 0)}
		r.end(p, errors.New("forbidden, outputs kept"))
	}
	if r.begin(a).had {
		t.Fatal("a run before any pass")
	}
	other := errors.New("a 413")
	started()
	for i := 1; i <= forbiddenRunGap; i++ {
		p := r.begin(a)
		if !p.had || p.run.misses != i-1 {
			t.Fatalf("after %d other failures: had %v, misses %d", i-1, p.had, p.run.misses)
		}
		r.end(p, other)
	}
	p := r.begin(a)
	if !p.had || !p.run.since.Equal(time.Unix(1, 0)) {
		t.Fatalf("the run did not bear %d other failures, or lost its start: %+v", forbiddenRunGap, p)
	}
	r.end(p, other)
	if r.begin(a).had {
		t.Fatalf("the run bore %d other failures in a row", forbiddenRunGap+1)
	}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "spiffeentries"}, "x", errors.New("no"))
	for name, err := range map[string]error{
		"a written output":             nil,
		"a refusal by the role":        &access.CallerDeniedError{Verb: "update", Resource: "spiffeentries"},
		"a refusal that did not stand": fmt.Errorf("update: %w", &access.PassedOnRecheckError{Forbidden: forbidden}),
	} {
		started()
		r.end(r.begin(a), err)
		if r.begin(a).had {
			t.Errorf("%s did not end the run", name)
		}
	}
	started()
	p = r.begin(a)
	p.outcome = runConfirmed
	r.end(p, forbidden)
	if r.begin(a).had {
		t.Error("a confirmed refusal did not end the run")
	}
	r.end(&forbiddenPass{uid: "b", outcome: runGoesOn}, forbidden)
	r.forget("b")
	if r.begin("b").had {
		t.Error("forget kept the run")
	}
}
