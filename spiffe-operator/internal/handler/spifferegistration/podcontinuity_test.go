package spifferegistration

import (
	"context"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/nodes"
)

// rolePodPolicy selects the pods labelled app=web of namespace a and names
// their role annotation in the SPIFFE ID.
func rolePodPolicy(perNode bool) *v1alpha1.SpiffeRegistration {
	p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
		s.SpiffeIDTemplate = "ns/{namespace}/sa/{serviceAccount}/{annotation:role}"
		if perNode {
			s.ParentID = ""
		}
	})
	p.Generation = 1
	return p
}

func annotatedPod(name, node, role string) *corev1.Pod {
	pod := runningPod("a", name, "web", node, map[string]string{"app": "web"})
	if role != "" {
		pod.Annotations = map[string]string{"role": role}
	}
	return pod
}

// rolePodsPassed starts an environment with namespace a, one running pod
// web-<n> per role (on node n1 with perNode), and rolePodPolicy, and runs
// the policy's first pass.
func rolePodsPassed(ctx context.Context, t *testing.T, perNode bool, roles ...string) (*env, *v1alpha1.SpiffeRegistration, []*corev1.Pod) {
	t.Helper()
	nodeName := ""
	if perNode {
		nodeName = "n1"
	}
	objs := []client.Object{ns("a", map[string]string{"spiffe": "on"})}
	var pods []*corev1.Pod
	for i, role := range roles {
		pod := annotatedPod(fmt.Sprintf("web-%d", i+1), nodeName, role)
		pods = append(pods, pod)
		objs = append(objs, pod)
	}
	if perNode {
		objs = append(objs, node("n1"))
	}
	e := retainingEnv(t, objs...)
	if perNode {
		e.h.Nodes, e.h.AllNodes, e.h.ClusterName = nodes.CacheGetter(e.c), nodes.CacheLister(e.c), "c1"
	}
	p := rolePodPolicy(perNode)
	if err := e.h.CreateOrUpdate(ctx, p); err != nil {
		t.Fatal(err)
	}
	return e, p, pods
}

// A running pod of a policy of pods keeps its entry when, while no
// operator runs, its render starts to fail (its annotation removed) or it
// is relabelled out of the podSelector: the pod runs, the policy exists,
// and the first pass of the new process must not open a window without an
// entry. The entry goes once the pod is gone.
func TestARunningPodKeepsItsPodPolicyEntryAcrossARestartThatFindsItsRenderFailing(t *testing.T) {
	for _, perNode := range []bool{false, true} {
		for _, change := range []string{"annotation removed", "relabelled out of the podSelector"} {
			name := change
			if perNode {
				name += ", per-node parents"
			}
			t.Run(name, func(t *testing.T) {
				ctx := context.Background()
				e, p, pods := rolePodsPassed(ctx, t, perNode, "reader")
				pod := pods[0]
				before := entriesWithParents(e)
				if len(before) != 1 {
					t.Fatalf("setup: entries %v", before)
				}
				// While the operator is down.
				if change == "annotation removed" {
					pod.Annotations = nil
				} else {
					pod.Labels = map[string]string{"app": "other"}
				}
				if err := e.c.Update(ctx, pod); err != nil {
					t.Fatal(err)
				}
				h := restarted(e)
				_ = h.CreateOrUpdate(ctx, p)
				_ = h.CreateOrUpdate(ctx, p)
				if got := entriesWithParents(e); !slices.Equal(got, before) {
					t.Errorf("after the restart the running pod's entries are %v, were %v", got, before)
				}
				if err := e.c.Delete(ctx, pod); err != nil {
					t.Fatal(err)
				}
				_ = h.CreateOrUpdate(ctx, p)
				if got := entriesWithParents(e); len(got) != 0 {
					t.Errorf("the pod is gone and its entries stay: %v", got)
				}
			})
		}
	}
}

// A restart changes nothing in SPIRE for a policy of pods, with a fixed
// parent or per-node parents: no entry is deleted and created again.
func TestARestartWritesNothingForAPolicyOfPods(t *testing.T) {
	for _, perNode := range []bool{false, true} {
		ctx := context.Background()
		e, p, _ := rolePodsPassed(ctx, t, perNode, "reader", "writer")
		writes := len(e.api.Writes())
		h := restarted(e)
		if err := h.CreateOrUpdate(ctx, p); err != nil {
			t.Fatal(err)
		}
		if got := e.api.Writes()[writes:]; len(got) != 0 {
			t.Errorf("per-node %v: the first pass after a restart wrote %v", perNode, got)
		}
	}
}
