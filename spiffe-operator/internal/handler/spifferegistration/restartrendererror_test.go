package spifferegistration

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
	"github.com/trustplane/trustplane/spiffe-operator/internal/nodes"
	"github.com/trustplane/trustplane/spiffe-operator/internal/pods"
	spirefake "github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
	"github.com/trustplane/trustplane/spiffe-operator/internal/workload"
)

// TestARolloutAfterARestartKeepsTheEntryOfAWorkloadThatFailsToRender: a
// template edit makes a still-selected workload's render fail, and the
// workload keeps the entry of its last good render, so a rollout goes on
// with its identity. The operator then restarts (an upgrade, a leader
// change), which forgets last good renders. The workload's next rollout
// starts a pod that matches the entry and retires the one that ran at the
// restart: the entry stays, since the new process takes the policy's entry
// that serves every pod of the workload as its last good one. On the old
// code the new process kept the entry only for the pods running at its
// first pass, and the rollout deleted it while the new pod ran. With a
// fixed parent and with per-node parents (where the entry found is one
// node's, expanded again for the nodes the workload's pods run on).
func TestARolloutAfterARestartKeepsTheEntryOfAWorkloadThatFailsToRender(t *testing.T) {
	for _, perNode := range []bool{false, true} {
		t.Run(map[bool]string{false: "fixed parent", true: "per-node parents"}[perNode], func(t *testing.T) {
			ctx := context.Background()
			c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(
				ns("a", map[string]string{"spiffe": "on"}), node("n1"), node("n2"),
				deploy("a", "web", "web", map[string]string{"app": "web"}),
				runningPod("a", "web-1", "web", "n1", map[string]string{"app": "web"}),
			).Build()
			api := spirefake.New()
			process := func() *Handler {
				s := entrysync.New(api, entrysync.Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour,
					Pods: pods.Lister(pods.Source{Reader: c})})
				h := &Handler{Reader: c, Syncer: s, TrustDomain: "example.org"}
				if perNode {
					h.Nodes, h.ClusterName = nodes.CacheGetter(c), "c1"
				}
				return h
			}
			// rollout starts pod to (on node n2) and deletes pod from.
			rollout := func(from, to string) {
				t.Helper()
				if err := c.Create(ctx, runningPod("a", to, "web", "n2", map[string]string{"app": "web"})); err != nil {
					t.Fatal(err)
				}
				if err := c.Delete(ctx, runningPod("a", from, "", "", nil)); err != nil {
					t.Fatal(err)
				}
			}
			// held lists the SPIFFE IDs SPIRE holds, and with per-node
			// parents the nodes they are under.
			held := func() []string {
				var out []string
				for _, e := range api.All() {
					out = append(out, e.SpiffeId.Path+" "+e.ParentId.Path)
				}
				slices.Sort(out)
				return out
			}
			wantOn := func(nodeUIDs ...string) []string {
				if !perNode {
					return []string{"/ns/a/sa/web /agent"}
				}
				var out []string
				for _, u := range nodeUIDs {
					out = append(out, "/ns/a/sa/web /spire/agent/k8s_psat/c1/"+u)
				}
				return out
			}

			h := process()
			p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
				if perNode {
					s.ParentID = ""
				}
			})
			p.Generation = 1
			if err := h.CreateOrUpdate(ctx, p); err != nil || !slices.Equal(held(), wantOn("uid-n1")) {
				t.Fatalf("setup: %v, entries %v", err, held())
			}
			// The template edit needs a label web lacks: web keeps its entry.
			p.Spec.SpiffeIDTemplate = "team/{label:team}/{serviceAccount}"
			p.Generation = 2
			if err := h.CreateOrUpdate(ctx, p); err == nil || !slices.Equal(held(), wantOn("uid-n1")) {
				t.Fatalf("setup: the edit that fails web's render: %v, entries %v", err, held())
			}
			// Control: in the same process a rollout keeps it.
			rollout("web-1", "web-2")
			_ = h.CreateOrUpdate(ctx, p)
			if got := held(); !slices.Equal(got, wantOn("uid-n2")) {
				t.Fatalf("setup: a rollout without a restart: entries %v, want %v", got, wantOn("uid-n2"))
			}

			// The operator restarts: the same API server and SPIRE, a new process.
			h = process()
			_ = h.CreateOrUpdate(ctx, p)
			if got := held(); !slices.Equal(got, wantOn("uid-n2")) {
				t.Fatalf("the first pass after the restart: entries %v, want %v", got, wantOn("uid-n2"))
			}
			// web's next rollout: web-3 starts and matches the entry, web-2 goes.
			rollout("web-2", "web-3")
			_ = h.CreateOrUpdate(ctx, p)
			if got := held(); !slices.Equal(got, wantOn("uid-n2")) {
				t.Errorf("Deployment a/web is still selected and keeps its last good entry without a restart, yet after one "+
					"its rollout left entries %v while pod a/web-3 runs and matches the entry (want %v); failures %+v",
					got, wantOn("uid-n2"), p.Status.Failures)
			}
			// The workload leaves the policy's selection: its entry goes
			// once no pod needs it.
			if err := c.Delete(ctx, runningPod("a", "web-3", "", "", nil)); err != nil {
				t.Fatal(err)
			}
			if err := c.Delete(ctx, deploy("a", "web", "", nil)); err != nil {
				t.Fatal(err)
			}
			_ = h.CreateOrUpdate(ctx, p)
			if got := held(); len(got) != 0 {
				t.Errorf("the workload and its pods are gone, yet SPIRE holds %v", got)
			}
		})
	}
}

// TestServingEntryIsTheOneEntryEveryPodOfTheWorkloadMatches checks which
// entry a workload that fails to render after a restart takes as its last
// good one: the one of its namespace and service account whose pod labels
// are among its selector labels, none when two different ones are, and
// none of another account or selecting a label its pods need not carry.
func TestServingEntryIsTheOneEntryEveryPodOfTheWorkloadMatches(t *testing.T) {
	p := &policy{}
	w, ok := workload.FromObject(deploy("a", "web", "web", map[string]string{"app": "web", "tier": "front"}))
	if !ok {
		t.Fatal("setup: not a workload")
	}
	entry := func(path string, sels ...string) entries.Entry {
		e := entries.Entry{SpiffeID: spiffeid.RequireFromString("spiffe://example.org" + path),
			ParentID: spiffeid.RequireFromString("spiffe://example.org/agent")}
		for _, s := range sels {
			e.Selectors = append(e.Selectors, entries.Selector{Type: "k8s", Value: s})
		}
		e.Normalize()
		return e
	}
	own := entry("/web", "ns:a", "sa:web", "pod-label:app:web")
	accountWide := entry("/sa", "ns:a", "sa:web")
	otherAccount := entry("/other", "ns:a", "sa:api", "pod-label:app:web")
	otherLabel := entry("/canary", "ns:a", "sa:web", "pod-label:track:canary")
	for _, tc := range []struct {
		name string
		held []entries.Entry
		want string
	}{
		{"its own entry", []entries.Entry{own, otherAccount, otherLabel}, "/web"},
		{"an entry of its whole account", []entries.Entry{accountWide, otherAccount}, "/sa"},
		{"two different entries serve it", []entries.Entry{own, accountWide}, ""},
		{"none of its account and labels", []entries.Entry{otherAccount, otherLabel}, ""},
	} {
		got := servingEntry(w, baseEntries(p, tc.held))
		gotPath := ""
		if got != nil {
			gotPath = got.SpiffeID.Path()
		}
		if gotPath != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, gotPath, tc.want)
		}
	}
}
