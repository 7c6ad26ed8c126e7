package spifferegistration

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
	"github.com/trustplane/trustplane/spiffe-operator/internal/nodes"
	"github.com/trustplane/trustplane/spiffe-operator/internal/pods"
)

// TestAParentIDTemplateEditDeletesTheOldTemplatesEntriesOnceTheNewOnesExist:
// an admin edits spec.parentIDTemplate while no node changes; the entries
// under the old template's parents go once the new ones exist, as a parent
// change does. Only a parent whose node is gone or has a new UID keeps its
// entries for the pods that ran there (the agent keeps its old ID until it
// attests again): a template edit changes no agent's ID.
func TestAParentIDTemplateEditDeletesTheOldTemplatesEntriesOnceTheNewOnesExist(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), node("n1"),
		deploy("a", "web", "shop", map[string]string{"app": "web"}),
		runningPod("a", "web-1", "shop", "n1", map[string]string{"app": "web"}))
	e.h.Syncer = entrysync.New(e.api, entrysync.Options{IDs: entries.IDScheme{Prefix: "trustplane."},
		ResyncInterval: time.Hour, Pods: pods.Lister(pods.Source{Reader: e.c})})
	e.h.Nodes, e.h.AllNodes, e.h.ClusterName = nodes.CacheGetter(e.c), nodes.CacheLister(e.c), "c1"
	p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.ParentID, s.ParentIDTemplate = "", "spire/agent/byname/{nodeName}"
	})
	if err := e.h.CreateOrUpdate(ctx, p); err != nil {
		t.Fatal(err)
	}
	if got, want := entriesWithParents(e), []string{"/ns/a/sa/shop /spire/agent/byname/n1"}; !slices.Equal(got, want) {
		t.Fatalf("setup: entries = %v, want %v", got, want)
	}
	// The admin hardens the template; n1 is not re-created, its agent's ID
	// is whatever it was before the edit.
	p.Spec.ParentIDTemplate = ""
	p.Generation++
	for i := 0; i < 2; i++ {
		if err := e.h.CreateOrUpdate(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"/ns/a/sa/shop /spire/agent/k8s_psat/c1/uid-n1"}
	if got := entriesWithParents(e); !slices.Equal(got, want) {
		t.Errorf("after a parentIDTemplate edit (no node re-created) the entry under the old template's parent stays "+
			"for web-1's lifetime: entries = %v, want %v", got, want)
	}
}

// TestANodeListingErrorDoesNotDeleteTheEntryARecreatedNodesAgentServes: in
// the pass after n1 is re-created under a new UID, the nodes cannot be
// read. The entry under n1's old agent ID, the only one its agent can
// serve until it attests again, must stay while web-1 runs there: not
// knowing the nodes, a remembered parent is judged as replaced.
func TestANodeListingErrorDoesNotDeleteTheEntryARecreatedNodesAgentServes(t *testing.T) {
	ctx := context.Background()
	e, p := perNodeEnv(t, ns("a", map[string]string{"spiffe": "on"}), node("n1"),
		deploy("a", "web", "shop", map[string]string{"app": "web"}),
		runningPod("a", "web-1", "shop", "n1", map[string]string{"app": "web"}))
	if got, want := entriesWithParents(e), []string{"/ns/a/sa/shop /spire/agent/k8s_psat/c1/uid-n1"}; !slices.Equal(got, want) {
		t.Fatalf("setup: entries = %v, want %v", got, want)
	}
	// n1 is re-created under a new UID (the kubelet re-registers it); its
	// agent keeps the old ID until it attests again.
	if err := e.c.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-n1-b"}}); err != nil {
		t.Fatal(err)
	}
	// The pass after the re-creation cannot list the nodes (looking up
	// one by name, for the render, still works).
	e.h.AllNodes = func(context.Context) ([]nodes.Node, error) { return nil, errors.New("node cache not synced") }
	if err := e.h.CreateOrUpdate(ctx, p); err != nil {
		t.Fatal(err)
	}
	got := entriesWithParents(e)
	if !slices.Contains(got, "/ns/a/sa/shop /spire/agent/k8s_psat/c1/uid-n1") {
		t.Errorf("a node list error deleted the entry under n1's old agent ID while web-1 runs there: entries = %v", got)
	}
}
