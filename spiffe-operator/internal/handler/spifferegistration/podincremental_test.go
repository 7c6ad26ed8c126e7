package spifferegistration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/controller"
	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/nodes"
	"github.com/trustplane/trustplane/spiffe-operator/internal/workload"
)

func node(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: k8stypes.UID("uid-" + name)}}
}

func runningPod(namespace, name, sa, nodeName string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: k8stypes.UID("pod-" + name), Labels: labels},
		Spec:       corev1.PodSpec{ServiceAccountName: sa, NodeName: nodeName},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// entriesWithParents lists "<path> <parent path>" of every entry in SPIRE, sorted.
func entriesWithParents(e *env) []string {
	var out []string
	for _, x := range e.api.All() {
		out = append(out, x.SpiffeId.Path+" "+x.ParentId.Path)
	}
	slices.Sort(out)
	return out
}

// TestIncrementalPodPassesMatchFullPasses drives a policy whose entries
// follow pods (per-node parents, then per-pod entries) through pod and
// workload changes with incremental passes for the changed service
// accounts, and checks after each that the pass listed no workloads, and
// that a full pass then finds nothing to write and reports the same
// status: the full pass is the oracle.
func TestIncrementalPodPassesMatchFullPasses(t *testing.T) {
	for i, mode := range []struct {
		name string
		spec func(*v1alpha1.SpiffeRegistrationSpec)
	}{
		{"per-node parents", func(s *v1alpha1.SpiffeRegistrationSpec) { s.ParentID = "" }},
		{"per-pod entries", func(s *v1alpha1.SpiffeRegistrationSpec) { s.EntryGranularity = v1alpha1.EntryPerPod }},
	} {
		t.Run(mode.name, func(t *testing.T) { testIncrementalPodPasses(t, i, mode.spec) })
	}
}

func testIncrementalPodPasses(t *testing.T, mode int, spec func(*v1alpha1.SpiffeRegistrationSpec)) {
	ctx := context.Background()
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), ns("off", nil), node("n1"), node("n2"),
		deploy("a", "web", "shop", map[string]string{"app": "web"}),
		deploy("a", "worker", "shop", map[string]string{"app": "worker"}),
		deploy("a", "solo", "solo", map[string]string{"app": "solo"}),
		runningPod("a", "web-1", "shop", "n1", map[string]string{"app": "web"}),
		runningPod("a", "solo-1", "solo", "n2", map[string]string{"app": "solo"}))
	l := &countingLister{ReaderLister: workload.ReaderLister{Reader: e.c}}
	e.h.Lister, e.h.Dirty, e.h.Nodes, e.h.ClusterName = l, NewDirty(), nodes.CacheGetter(e.c), "c1"
	p := newPolicy(spec)
	if err := e.h.CreateOrUpdate(ctx, p); err != nil {
		t.Fatal(err)
	}
	if got := len(e.api.All()); got != 2 {
		t.Fatalf("first pass: entries = %v", entriesWithParents(e))
	}
	update := func(obj client.Object, change func()) error {
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		change()
		return e.c.Update(ctx, obj)
	}
	account := func(namespace, sa string) func() {
		return func() { e.h.Dirty.Account(p.Name, namespace, sa) }
	}
	steps := []struct {
		name   string
		do     func() error
		record func()
		// writes is whether SPIRE must change, with per-node parents and
		// with per-pod entries (under the policy's fixed parent).
		writes [2]bool
	}{
		{"a pod on another node", func() error {
			return e.c.Create(ctx, runningPod("a", "web-2", "shop", "n2", map[string]string{"app": "web"}))
		}, account("a", "shop"), [2]bool{true, true}},
		{"a second pod of the account on a node that has one", func() error {
			return e.c.Create(ctx, runningPod("a", "worker-1", "shop", "n2", map[string]string{"app": "worker"}))
		}, account("a", "shop"), [2]bool{false, true}},
		{"a pod deleted", func() error {
			return e.c.Delete(ctx, runningPod("a", "web-1", "", "", nil))
		}, account("a", "shop"), [2]bool{true, true}},
		{"a pod finished", func() error {
			pod := &corev1.Pod{}
			if err := e.c.Get(ctx, client.ObjectKey{Namespace: "a", Name: "solo-1"}, pod); err != nil {
				return err
			}
			pod.Status.Phase = corev1.PodSucceeded
			return e.c.Status().Update(ctx, pod)
		}, account("a", "solo"), [2]bool{true, true}},
		{"a pod not scheduled yet", func() error {
			return e.c.Create(ctx, runningPod("a", "solo-2", "solo", "", map[string]string{"app": "solo"}))
		}, account("a", "solo"), [2]bool{false, true}},
		{"a pod on a node no Node object has", func() error {
			return e.c.Create(ctx, runningPod("a", "solo-3", "solo", "ghost", map[string]string{"app": "solo"}))
		}, account("a", "solo"), [2]bool{false, true}},
		{"a pod bound to its node", func() error {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "solo-2"}}
			return update(pod, func() { pod.Spec.NodeName = "n1" })
		}, account("a", "solo"), [2]bool{true, false}},
		{"a pod's annotations changed", func() error {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "solo-2"}}
			return update(pod, func() { pod.Annotations = map[string]string{"touched": "yes"} })
		}, account("a", "solo"), [2]bool{false, false}},
		{"a pod in an unselected namespace", func() error {
			return e.c.Create(ctx, runningPod("off", "x-1", "x", "n1", nil))
		}, account("off", "x"), [2]bool{false, false}},
		{"a new workload with its pod", func() error {
			if err := e.c.Create(ctx, deploy("a", "fresh", "fresh", map[string]string{"app": "fresh"})); err != nil {
				return err
			}
			return e.c.Create(ctx, runningPod("a", "fresh-1", "fresh", "n1", map[string]string{"app": "fresh"}))
		}, func() {
			e.h.Dirty.Workload(p.Name, v1alpha1.WorkloadKindDeployment, "a", "fresh")
			e.h.Dirty.Account(p.Name, "a", "fresh")
		}, [2]bool{true, true}},
		{"a workload deleted while its pod runs on", func() error {
			return e.c.Delete(ctx, deploy("a", "solo", "", nil))
		}, func() { e.h.Dirty.Workload(p.Name, v1alpha1.WorkloadKindDeployment, "a", "solo") }, [2]bool{true, true}},
		{"a workload moved to another account, its old pod still running", func() error {
			d := deploy("a", "fresh", "", nil)
			return update(d, func() { d.Spec.Template.Spec.ServiceAccountName = "moved" })
		}, func() { e.h.Dirty.Workload(p.Name, v1alpha1.WorkloadKindDeployment, "a", "fresh") }, [2]bool{true, true}},
		{"the moved workload's new pod", func() error {
			return e.c.Create(ctx, runningPod("a", "fresh-2", "moved", "n2", map[string]string{"app": "fresh"}))
		}, account("a", "moved"), [2]bool{true, true}},
	}
	for i, s := range steps {
		t.Run(fmt.Sprintf("%d %s", i, s.name), func(t *testing.T) {
			if err := s.do(); err != nil {
				t.Fatal(err)
			}
			s.record()
			lists, before, parents := l.lists, writes(e), slices.Clone(p.Status.ParentIDs)
			passCtx, notes := controller.WithPassNotes(ctx)
			if err := e.h.CreateOrUpdate(passCtx, p); err != nil {
				t.Fatal(err)
			}
			if l.lists != lists {
				t.Errorf("the pass listed workloads: not incremental")
			}
			wrote := writes(e) != before
			if wrote != s.writes[mode] {
				t.Errorf("wrote to SPIRE: %v, want %v; writes %v", wrote, s.writes[mode], e.api.Writes())
			}
			// A status that records new parents the policy holds entries
			// under must never wait for a later pass; one that changes by
			// counts and conditions only may, whether the pass wrote to
			// SPIRE or not.
			if same := slices.Equal(parents, p.Status.ParentIDs); notes.StatusMayWait() != same {
				t.Errorf("the pass let its status wait: %v; the parents it records went from %v to %v (wrote to SPIRE: %v)",
					notes.StatusMayWait(), parents, p.Status.ParentIDs, wrote)
			}
			expectFullPassAgrees(ctx, t, e, l, p)
		})
	}
}

// TestRefusedEntryOnANewNodeHoldsTheOldOneOnlyWhileRefused moves an
// account's only pod from one node to another while SPIRE refuses the
// entry for the new node: the entry under the node the pod left stays while
// the refusal lasts (the replacement could as well be for a re-created node
// whose agent still runs under the old entry's parent), the refusal is
// reported, and the pass after SPIRE accepts creates the new entry and
// deletes the old one. That pass is a full one, since the held entry is in
// no render; with an incremental one the old entry would stay until the
// resync. A full pass is the oracle at the end.
func TestRefusedEntryOnANewNodeHoldsTheOldOneOnlyWhileRefused(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), node("n1"), node("n2"),
		deploy("a", "web", "shop", map[string]string{"app": "web"}),
		deploy("a", "solo", "solo", map[string]string{"app": "solo"}),
		runningPod("a", "web-1", "shop", "n1", map[string]string{"app": "web"}),
		// Another account's pod on n2, so the pass of the move finds n2's
		// entries read and can be an incremental one.
		runningPod("a", "solo-1", "solo", "n2", map[string]string{"app": "solo"}))
	l := &countingLister{ReaderLister: workload.ReaderLister{Reader: e.c}}
	e.h.Lister, e.h.Dirty, e.h.Nodes, e.h.ClusterName = l, NewDirty(), nodes.CacheGetter(e.c), "c1"
	p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) { s.ParentID = "" })
	if err := e.h.CreateOrUpdate(ctx, p); err != nil {
		t.Fatal(err)
	}
	before := entriesWithParents(e)
	if len(before) != 2 {
		t.Fatalf("first pass: entries = %v", before)
	}
	id, onN1, solo := "spiffe://example.org/ns/a/sa/shop", before[0], before[1]
	if !strings.HasPrefix(onN1, "/ns/a/sa/shop ") || !strings.HasSuffix(onN1, "/uid-n1") {
		t.Fatalf("first pass: entries = %v", before)
	}

	e.api.Reject[id] = true
	if err := e.c.Create(ctx, runningPod("a", "web-2", "shop", "n2", map[string]string{"app": "web"})); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Delete(ctx, runningPod("a", "web-1", "", "", nil)); err != nil {
		t.Fatal(err)
	}
	e.h.Dirty.Account(p.Name, "a", "shop")
	lists := l.lists
	if err := e.h.CreateOrUpdate(ctx, p); err == nil {
		t.Fatal("a pass whose create SPIRE refused reported no error")
	}
	if l.lists != lists {
		t.Errorf("the pod event's pass listed workloads: not incremental")
	}
	if got := entriesWithParents(e); !slices.Equal(got, []string{onN1, solo}) {
		t.Errorf("while SPIRE refuses the new node's entry: entries = %v, want the old one held", got)
	}

	// SPIRE accepts it now; the next event of the account gives a full
	// pass, which moves the entry.
	delete(e.api.Reject, id)
	pod := &corev1.Pod{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: "a", Name: "web-2"}, pod); err != nil {
		t.Fatal(err)
	}
	pod.Annotations = map[string]string{"touched": "yes"}
	if err := e.c.Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	e.h.Dirty.Account(p.Name, "a", "shop")
	lists = l.lists
	if err := e.h.CreateOrUpdate(ctx, p); err != nil {
		t.Fatal(err)
	}
	if l.lists == lists {
		t.Errorf("the pass after one that held an entry back was incremental")
	}
	if got := entriesWithParents(e); len(got) != 2 || slices.Contains(got, onN1) || !slices.Contains(got, solo) {
		t.Errorf("after SPIRE accepts: entries = %v, want only the new node's", got)
	}
	expectFullPassAgrees(ctx, t, e, l, p)
}

// TestAPassThatWritesNothingCompletesTheRecordedParents: a status write
// refused after a pass wrote to SPIRE leaves a parent out of the recorded
// ones, and only the record lets a restarted operator find that parent's
// entries. A later pass that writes nothing to SPIRE must put the parent
// back and write its status, not let it wait.
func TestAPassThatWritesNothingCompletesTheRecordedParents(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), node("n1"), node("n2"),
		deploy("a", "web", "shop", map[string]string{"app": "web"}),
		runningPod("a", "web-1", "shop", "n1", map[string]string{"app": "web"}),
		runningPod("a", "web-2", "shop", "n2", map[string]string{"app": "web"}))
	e.h.Lister, e.h.Dirty, e.h.Nodes, e.h.ClusterName = workload.ReaderLister{Reader: e.c}, NewDirty(), nodes.CacheGetter(e.c), "c1"
	p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) { s.ParentID = "" })
	if err := e.h.CreateOrUpdate(ctx, p); err != nil {
		t.Fatal(err)
	}
	recorded := slices.Clone(p.Status.ParentIDs)
	if len(recorded) != 2 {
		t.Fatalf("first pass recorded parents %v; want one per node", recorded)
	}
	p.Status.ParentIDs = recorded[:1] // the write that recorded the second was refused

	pod := &corev1.Pod{}
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: "a", Name: "web-1"}, pod); err != nil {
		t.Fatal(err)
	}
	pod.Annotations = map[string]string{"touched": "yes"}
	if err := e.c.Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	e.h.Dirty.Account(p.Name, "a", "shop")
	before := writes(e)
	passCtx, notes := controller.WithPassNotes(ctx)
	if err := e.h.CreateOrUpdate(passCtx, p); err != nil {
		t.Fatal(err)
	}
	if writes(e) != before {
		t.Fatalf("the pass wrote to SPIRE: %v", e.api.Writes())
	}
	if !slices.Equal(p.Status.ParentIDs, recorded) {
		t.Errorf("recorded parents after the pass: %v; want %v", p.Status.ParentIDs, recorded)
	}
	if notes.StatusMayWait() {
		t.Errorf("the pass let a status that completes the recorded parents wait")
	}
}
