package entrysync

import (
	"context"
	"testing"
	"time"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// TestAReplacementNarrowedByContainerDoesNotCountAsServingARunningPod: pod
// w (app=web) runs under old. The policy's templates change: the entry it
// now wants has another SPIFFE ID and a k8s:container-name selector. The
// pod cache does not know w's containers, so that entry may well not
// serve w (its container is named otherwise); old must stay while w runs,
// and go once w is gone. A pod started after the change keeps nothing.
func TestAReplacementNarrowedByContainerDoesNotCountAsServingARunningPod(t *testing.T) {
	api := fake.New()
	pods := podW()
	s := withPods(api, pods)
	ctx := context.Background()
	o := owner("policy", time.Hour)
	old := named("/old", "a", "sa", "app", "web")
	next := named("/next", "a", "sa", "app", "web")
	next.Selectors = append(next.Selectors, entries.Selector{Type: "k8s", Value: "container-name:sidecar"})
	next.Normalize()
	if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{old}), nil); err != nil {
		t.Fatal(err)
	}
	out, err := s.Sync(ctx, o, ptrs([]entries.Entry{next}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !holdsPath(api, "/old") {
		t.Fatalf("pod w runs, and the only entry now wanted for it also asks for a container named sidecar, which the operator "+
			"cannot see w has; yet old went (retained %d): w may be left with no entry", out.Retained)
	}
	if !holdsPath(api, "/next") {
		t.Errorf("the wanted entry was not created: %v", api.All())
	}

	// w is replaced by a pod started after the change: it keeps nothing.
	pods.mu.Lock()
	pods.uids["a/sa"] = []string{"w2"}
	pods.mu.Unlock()
	if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{next}), nil); err != nil {
		t.Fatal(err)
	}
	if holdsPath(api, "/old") {
		t.Errorf("w is gone and a pod started after the change keeps the withdrawn entry: %v", api.All())
	}
}

// TestAReplacementNarrowedAsTheOldEntryWasServesThePod: when the old entry
// asked for the same container as the one now wanted, every pod the old
// entry served the new one serves too, so the old entry goes at once.
func TestAReplacementNarrowedAsTheOldEntryWasServesThePod(t *testing.T) {
	api := fake.New()
	s := withPods(api, podW())
	ctx := context.Background()
	o := owner("policy", time.Hour)
	sidecar := entries.Selector{Type: "k8s", Value: "container-name:sidecar"}
	old := named("/old", "a", "sa", "app", "web")
	old.Selectors = append(old.Selectors, sidecar, entries.Selector{Type: "k8s", Value: "container-image:img"})
	old.Normalize()
	next := named("/next", "a", "sa", "app", "web")
	next.Selectors = append(next.Selectors, sidecar)
	next.Normalize()
	if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{old}), nil); err != nil {
		t.Fatal(err)
	}
	out, err := s.Sync(ctx, o, ptrs([]entries.Entry{next}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if holdsPath(api, "/old") || out.Retained != 0 {
		t.Errorf("the new entry asks nothing of w that the old one did not, yet the withdrawn entry stayed (retained %d): %v",
			out.Retained, api.All())
	}
}
