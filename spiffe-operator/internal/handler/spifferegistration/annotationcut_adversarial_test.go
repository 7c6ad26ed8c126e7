package spifferegistration

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/pods"
)

// TestAdversarialATruncatedAnnotationNeverRendersAndItsFailureIsValidUTF8: pod
// annotations reach the handler through the pod cache, cut there to 2,049
// bytes, possibly inside a character. Whether the value is used in the
// SPIFFE ID or a DNS name, the pod gets no entry, and the failure message
// (cut to 1 KiB) stays valid UTF-8, so that the status read back equals
// the one written.
func TestAdversarialATruncatedAnnotationNeverRendersAndItsFailureIsValidUTF8(t *testing.T) {
	for _, tc := range []struct {
		name, value, id string
		dns             []string
	}{
		{"id, 2-byte runes", strings.Repeat("é", 3000), "ns/{namespace}/r/{annotation:example.com/role}", nil},
		{"id, ascii", strings.Repeat("a", 5000), "ns/{namespace}/r/{annotation:example.com/role}", nil},
		{"dns, dotted labels", strings.Repeat("ab.", 2000) + "x", "ns/{namespace}/sa/{serviceAccount}", []string{"{annotation:example.com/role}"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := runningPod("a", "a-1", "shop", "", map[string]string{"app": "web"})
			a.Annotations = map[string]string{"example.com/role": tc.value}
			// what the cache would hold
			a.Annotations = pods.FromPod(a).Annotations
			e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), a)
			p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
				s.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
				s.SpiffeIDTemplate = tc.id
				s.DNSNameTemplates = tc.dns
			})
			_ = e.h.CreateOrUpdate(context.Background(), p)
			if p.Status.EntriesRegistered != 0 || p.Status.EntriesFailed != 1 {
				t.Errorf("registered %d, failed %d; want the pod refused", p.Status.EntriesRegistered, p.Status.EntriesFailed)
			}
			for _, f := range p.Status.Failures {
				if !utf8.ValidString(f.Message) || len(f.Message) > maxFailureMessage || f.Reason == "" {
					t.Errorf("failure %q (%d bytes, valid %v)", f.Reason, len(f.Message), utf8.ValidString(f.Message))
				}
			}
		})
	}
}
