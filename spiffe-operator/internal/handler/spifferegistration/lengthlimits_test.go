package spifferegistration

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/nodes"
	"github.com/trustplane/trustplane/spiffe-operator/internal/template"
)

// A pod's annotations may hold up to 256 KiB, and whoever may create a pod
// sets them. A pod policy that renders an annotation into an entry must
// not register what SPIRE cannot hold or should not issue: a SPIFFE ID
// over the 2048 bytes the SPIFFE spec allows (SPIRE on PostgreSQL fails
// to index one past about 2690 bytes, answering Internal, which a pass
// takes for SPIRE being down), a selector over 1024 bytes (what the
// SpiffeEntry API allows; PostgreSQL's cap is about 2680), or a DNS name
// with a label over 63 characters (SPIRE refuses it). Each such pod fails
// alone, named with the reason, and the policy's other pods get their
// entries.
func TestAnAnnotationCannotRenderAnEntryOverSPIREsLimits(t *testing.T) {
	// annotate gives the long pod the annotation longValue, the other pod
	// shortValue.
	annotate := func(longValue, shortValue string) func(*corev1.Pod, bool) {
		return func(pod *corev1.Pod, long bool) {
			pod.Annotations = map[string]string{"example.com/v": map[bool]string{true: longValue, false: shortValue}[long]}
		}
	}
	for name, c := range map[string]struct {
		value  func(pod *corev1.Pod, long bool)
		mut    func(*v1alpha1.SpiffeRegistrationSpec)
		reason string
	}{
		"a SPIFFE ID over 2048 bytes": {annotate(strings.Repeat("a", 2100), "web"), func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.SpiffeIDTemplate = "ns/{namespace}/pod/{podName}/{annotation:example.com/v}"
		}, ReasonInvalidSpiffeIDTemplate},
		// Selector templates take no annotation; a label value (63
		// characters at most) rendered many times makes a long one.
		"a selector over 1024 bytes": {func(pod *corev1.Pod, long bool) {
			pod.Labels["example.com/v"] = map[bool]string{true: strings.Repeat("a", 63), false: "web"}[long]
		}, func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.WorkloadSelectorTemplates = []string{"k8s:container-image:registry.example.com/" + strings.Repeat("{label:example.com/v}", 20)}
		}, ReasonInvalidWorkloadSelectorTemplate},
		"a DNS label over 63 characters": {annotate(strings.Repeat("a", 64), "web"), func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.DNSNameTemplates = []string{"{annotation:example.com/v}.apps.example.com"}
		}, ReasonInvalidDNSNameTemplate},
	} {
		t.Run(name, func(t *testing.T) {
			long := runningPod("a", "long-1", "shop", "", map[string]string{"app": "web"})
			c.value(long, true)
			short := runningPod("a", "short-1", "shop", "", map[string]string{"app": "web"})
			c.value(short, false)
			e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), long, short)
			p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
				s.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
				s.SpiffeIDTemplate = "ns/{namespace}/pod/{podName}"
				c.mut(s)
			})
			_ = e.h.CreateOrUpdate(context.Background(), p)
			paths := sortedPaths(e.api)
			for _, x := range e.api.All() {
				if strings.Contains(x.SpiffeId.Path, "long-1") {
					t.Errorf("registered the long pod's entry (%d-byte ID, selectors of up to %d bytes, DNS names %v)",
						len(x.SpiffeId.Path), longestSelector(x.Selectors), x.DnsNames)
				}
			}
			if !slices.ContainsFunc(paths, func(p string) bool { return strings.Contains(p, "short-1") }) {
				t.Errorf("the other pod's entry is missing (%d entries)", len(paths))
			}
			if !slices.ContainsFunc(p.Status.Failures, func(f v1alpha1.Failure) bool {
				return f.Reason == c.reason && strings.Contains(f.Object, "long-1")
			}) {
				t.Errorf("the long pod's failure is not reported with reason %s: %+v", c.reason, p.Status.Failures)
			}
		})
	}
}

// TestANodeParentOverTheIDLimitIsRefused: a parent ID template renders
// node names (up to 253 characters each); its result is held to the same
// limit as a SPIFFE ID.
func TestANodeParentOverTheIDLimitIsRefused(t *testing.T) {
	p := &policy{trustDomain: spiffeid.RequireTrustDomainFromString("example.org")}
	var err error
	if p.parentTemplate, err = template.ParseParent(strings.Repeat("{nodeName}/", 9) + "end"); err != nil {
		t.Fatal(err)
	}
	node := nodes.Node{Name: strings.Repeat("n", 250), UID: "u"}
	if id, err := p.nodeParent(node); err == nil {
		t.Errorf("rendered a parent ID of %d bytes, want a refusal over 2048", len(id.String()))
	}
}

// longestSelector returns the length of the longest of sels, type:value.
func longestSelector(sels []*types.Selector) int {
	n := 0
	for _, s := range sels {
		n = max(n, len(s.Type)+1+len(s.Value))
	}
	return n
}
