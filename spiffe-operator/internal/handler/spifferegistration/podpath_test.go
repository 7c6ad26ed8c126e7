package spifferegistration

import (
	"strings"
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// Whoever creates a pod chooses its name, labels, annotations and owner
// references (an owner reference's name is not validated as a name). With
// a template that starts with ns/{namespace}/sa/{serviceAccount}/, no such
// value may render an ID outside that path, a DNS name outside the
// template's suffix, or an entry without the pod's own selectors.
func TestAPodsOwnValuesNeverLeaveItsNamespaceAndAccountPath(t *testing.T) {
	p, serr := compile(&v1alpha1.SpiffeRegistrationSpec{
		TrustDomain:      "example.org",
		ParentID:         "spiffe://example.org/agent",
		PodSelector:      &metav1.LabelSelector{},
		SpiffeIDTemplate: "ns/{namespace}/sa/{serviceAccount}/{ownerKind}/{ownerName}/{annotation:role}",
		DNSNameTemplates: []string{"{annotation:role}.{namespace}.svc", "*.{ownerName}.{namespace}.svc"},
	}, "example.org", "")
	if serr != nil {
		t.Fatal(serr)
	}
	hostile := []string{
		"..", ".", "a/../../../ns/victim/sa/admin", "%2e%2e", "%2F", `a\b`, "a b", "a\nb", "ns:victim", "*", "*.evil",
		"a..b", "victim.svc.", "ﾠ", "／", "a\x00b", strings.Repeat("a", 300), "UPPER", "a_b", "-", "a.-b",
	}
	parent := spiffeid.RequireFromString("spiffe://example.org/agent")
	for _, v := range hostile {
		for _, field := range []string{"annotation", "owner"} {
			pv := &podView{uid: "11111111-1111-1111-1111-111111111111", namespace: "tenant", name: "p", serviceAccount: "web",
				ownerKind: "ReplicaSet", ownerName: "web-1", annotations: map[string]string{"role": "reader"}}
			if field == "annotation" {
				pv.annotations["role"] = v
			} else {
				pv.ownerName = v
			}
			e, f := p.renderPod(pv, "", parent)
			if f != nil {
				continue
			}
			if !strings.HasPrefix(e.SpiffeID.Path(), "/ns/tenant/sa/web/") {
				t.Errorf("%s %q renders %s, outside /ns/tenant/sa/web/", field, v, e.SpiffeID)
			}
			for _, d := range e.DNSNames {
				if !strings.HasSuffix(d, ".tenant.svc") || strings.Count(d, "*") > 1 || (strings.Contains(d, "*") && !strings.HasPrefix(d, "*.")) {
					t.Errorf("%s %q renders the DNS name %q", field, v, d)
				}
			}
			sels := map[string]bool{}
			for _, s := range e.Selectors {
				sels[s.String()] = true
			}
			for _, want := range []string{"k8s:ns:tenant", "k8s:sa:web", "k8s:pod-uid:" + pv.uid} {
				if !sels[want] {
					t.Errorf("%s %q: the entry lacks %s: %v", field, v, want, e.Selectors)
				}
			}
		}
	}
}
