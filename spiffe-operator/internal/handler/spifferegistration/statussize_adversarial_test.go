package spifferegistration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// TestAdversarialAnAnnotationCannotInflateThePolicysStatus: a pod policy that
// renders {annotation:<key>} reports a pod whose render fails in
// status.failures, and the message quotes the rendered value. A pod's
// annotations may hold 256 KiB, and %q writes each control byte as four
// characters: a few pods of one tenant's namespace would make the status of
// a policy shared by every namespace larger than etcd holds (1.5 MiB), so
// that no status of that policy (parentIDs, keptEntries of every
// namespace, Ready) could be written any more.
func TestAdversarialAnAnnotationCannotInflateThePolicysStatus(t *testing.T) {
	huge := strings.Repeat("\x01", 200<<10) // 200 KiB, under the 256 KiB annotation cap
	a := runningPod("a", "a-1", "shop", "", map[string]string{"app": "web"})
	a.Annotations = map[string]string{"example.com/role": huge}
	b := runningPod("a", "a-2", "shop", "", map[string]string{"app": "web"})
	b.Annotations = map[string]string{"example.com/role": huge}
	ok := runningPod("b", "victim-1", "shop", "", map[string]string{"app": "web"})
	ok.Annotations = map[string]string{"example.com/role": "reader"}
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), ns("b", map[string]string{"spiffe": "on"}), a, b, ok)
	p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
		s.SpiffeIDTemplate = "ns/{namespace}/sa/{serviceAccount}/role/{annotation:example.com/role}"
	})
	_ = e.h.CreateOrUpdate(context.Background(), p)
	raw, err := json.Marshal(p.Status)
	if err != nil {
		t.Fatal(err)
	}
	longest := 0
	for _, f := range p.Status.Failures {
		longest = max(longest, len(f.Message))
	}
	t.Logf("status: %d bytes, %d failures, longest message %d bytes", len(raw), len(p.Status.Failures), longest)
	if longest > maxFailureMessage {
		t.Errorf("a failure message of %d bytes, over the %d kept", longest, maxFailureMessage)
	}
	if len(raw) > 64<<10 {
		t.Errorf("two pods' annotations grew the policy's status to %d bytes (longest failure message %d bytes): "+
			"past etcd's 1.5 MiB, no status of the policy can be written", len(raw), longest)
	}
}
