package spiffeentry

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
	spirefake "github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// TestAnEntryKeptForItsPodKeepsTheGrantsTheObjectStillMakes: a SpiffeEntry
// of pods changes its selectors, so its entry under the old ones is no
// longer wanted but stays while a pod it selected runs. Kept, it carries
// only the grants the object makes now: admin withdrawn in the same edit
// goes, downstream still set stays.
func TestAnEntryKeptForItsPodKeepsTheGrantsTheObjectStillMakes(t *testing.T) {
	ctx := context.Background()
	api := spirefake.New()
	running := func(context.Context, string, string) ([]entrysync.Pod, error) {
		return []entrysync.Pod{{UID: "pod-1", Labels: labels.Set{"app": "web"}}}, nil
	}
	h := &Handler{TrustDomain: "example.org", Syncer: entrysync.New(api, entrysync.Options{
		IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour, Pods: running})}
	obj := newEntry("a", 0)
	obj.Spec.SpiffeID = "spiffe://example.org/ns/a/web"
	obj.Spec.Selectors = []string{"k8s:ns:a", "k8s:sa:shop", "k8s:pod-label:app:web"}
	obj.Spec.Admin, obj.Spec.Downstream = true, true
	if err := h.CreateOrUpdate(ctx, obj); err != nil {
		t.Fatal(err)
	}
	obj.Spec.Selectors = []string{"k8s:ns:a", "k8s:sa:shop", "k8s:pod-label:app:web", "k8s:pod-label:tier:front"}
	obj.Spec.Admin = false
	if err := h.CreateOrUpdate(ctx, obj); err != nil {
		t.Fatal(err)
	}
	all := api.All()
	if len(all) != 2 {
		t.Fatalf("want the new entry and the old one kept for pod-1, SPIRE holds %v", all)
	}
	for _, e := range all {
		if e.Admin || !e.Downstream {
			t.Errorf("entry with %d selectors: admin=%t downstream=%t, want admin withdrawn and downstream kept", len(e.Selectors), e.Admin, e.Downstream)
		}
	}
}
