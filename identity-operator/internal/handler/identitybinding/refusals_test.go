package identitybinding

import (
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/types"
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

// TestTakeDropsTheRecordWhateverItHolds: take reports a record of the
// generation asked for, and drops the record of any generation, so a
// second take finds nothing.
func TestTakeDropsTheRecordWhateverItHolds(t *testing.T) {
	var r refusalRecords
	a := types.UID("a")
	if r.take(a, 1) {
		t.Fatal("take found a record before any refusal")
	}
	r.add(a, 2, errors.New("forbidden"))
	if !r.take(a, 2) {
		t.Fatal("take missed the record of its generation")
	}
	if r.take(a, 2) {
		t.Fatal("a second take found the record the first took")
	}
	r.add(a, 2, errors.New("forbidden"))
	if r.take(a, 3) {
		t.Fatal("take found a record of another generation")
	}
	if r.take(a, 2) {
		t.Fatal("a take of another generation kept the record")
	}
}
