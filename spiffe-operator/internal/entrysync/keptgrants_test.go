package entrysync

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// TestAnEntryWaitingForTheWinnerToTakeItOverKeepsNoWithdrawnGrant: after a
// restart the older claimant of a key passes first and waits, since the
// younger holder is unknown yet. The holder then passes having withdrawn
// admin: its entry stays until the winner takes it over, but without admin
// (on the old code it kept admin until then, and for good if the winner's
// create was refused and the entry put back).
func TestAnEntryWaitingForTheWinnerToTakeItOverKeepsNoWithdrawnGrant(t *testing.T) {
	api := fake.New()
	ctx := context.Background()
	old, young := owner("old", time.Hour), owner("young", 0)
	young.Grants = entries.Grants{Admin: true}
	e := entry("/ns/a/sa/x", 0)
	e.Admin = true
	before, _, _ := newSyncer(api)
	if _, err := before.Sync(ctx, young, ptrs([]entries.Entry{e}), nil); err != nil {
		t.Fatal(err)
	}

	after, _, _ := newSyncer(api)
	plain := e
	plain.Admin = false
	if out, err := after.Sync(ctx, old, ptrs([]entries.Entry{plain}), nil); err != nil || len(out.Masked) != 1 {
		t.Fatalf("the older owner's first pass was to wait: %v, %+v", err, out)
	}
	young.Grants = entries.Grants{}
	if out, err := after.Sync(ctx, young, ptrs([]entries.Entry{plain}), nil); err != nil || len(out.Masked) != 1 {
		t.Fatalf("the holder's pass: %v, %+v", err, out)
	}
	all := api.All()
	if len(all) != 1 || !strings.Contains(all[0].Id, young.Tag()) {
		t.Fatalf("the holder's entry was to stay until the winner takes it over: %v", all)
	}
	if all[0].Admin {
		t.Errorf("the holder withdrew admin; its entry, waiting for the winner, keeps it")
	}
}

// TestAnEntryKeptForItsPodsIsTrimmedOnceAndThenLeftAlone: the trim of a
// kept entry is one update; later passes find nothing to write.
func TestAnEntryKeptForItsPodsIsTrimmedOnceAndThenLeftAlone(t *testing.T) {
	api := fake.New()
	s := withPods(api, podW())
	ctx := context.Background()
	o := owner("policy", time.Hour)
	o.Grants = entries.Grants{Admin: true, FederatesWith: []string{"one.example", "two.example"}}
	e := named("/web", "a", "sa", "app", "web")
	e.Admin, e.FederatesWith = true, []string{"one.example", "two.example"}
	if _, err := s.Sync(ctx, o, ptrs([]entries.Entry{e}), nil); err != nil {
		t.Fatal(err)
	}
	o.Grants = entries.Grants{FederatesWith: []string{"two.example"}}
	writes := len(api.Writes())
	for pass := range 3 {
		out, err := s.Sync(ctx, o, nil, nil)
		if err != nil || out.Retained != 1 || len(out.Registered) != 0 {
			t.Fatalf("pass %d: the entry was to be kept for w, registered as nothing: %v, %+v", pass, err, out)
		}
	}
	all := api.All()
	if len(all) != 1 || all[0].Admin || strings.Join(all[0].FederatesWith, ",") != "two.example" {
		t.Fatalf("kept entry = %v, want it without admin and one.example", all)
	}
	if w := api.Writes()[writes:]; len(w) != 1 {
		t.Errorf("writes after the withdrawal = %v, want the one trim", w)
	}
}
