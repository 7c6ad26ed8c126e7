package spifferegistration

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	"google.golang.org/grpc/codes"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
	spirefake "github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

// A variable renders one value, never template syntax: a DNS name template
// with a variable in its first label gives a name for that one host, and a
// pod annotation "*" must not turn it into a wildcard covering every host
// under the template's suffix (names of other namespaces' services included).
func TestAnAnnotationValueDoesNotRenderAWildcardDNSName(t *testing.T) {
	pod := runningPod("a", "web-1", "shop", "", map[string]string{"app": "web"})
	pod.Annotations = map[string]string{"example.com/host": "*"}
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), pod)
	p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
		s.SpiffeIDTemplate = "ns/{namespace}/pod/{podName}"
		s.DNSNameTemplates = []string{"{annotation:example.com/host}.apps.example.com"}
	})
	_ = e.h.CreateOrUpdate(context.Background(), p)
	for _, x := range e.api.All() {
		for _, d := range x.DnsNames {
			if strings.Contains(d, "*") {
				t.Errorf("entry %s carries the DNS name %q: the pod's annotation made a wildcard", x.SpiffeId.Path, d)
			}
		}
	}
	if !slices.ContainsFunc(p.Status.Failures, func(f v1alpha1.Failure) bool { return f.Reason == ReasonInvalidDNSNameTemplate }) {
		t.Errorf("the pod's render failure is not reported: %+v", p.Status.Failures)
	}
}

// TestAWildcardWrittenInTheTemplateStaysAWildcard: the policy's own "*."
// still renders a wildcard DNS name, whatever the variables after it.
func TestAWildcardWrittenInTheTemplateStaysAWildcard(t *testing.T) {
	pod := runningPod("a", "web-1", "shop", "", map[string]string{"app": "web"})
	pod.Annotations = map[string]string{"example.com/host": "web"}
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), pod)
	p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
		s.SpiffeIDTemplate = "ns/{namespace}/pod/{podName}"
		s.DNSNameTemplates = []string{"*.{annotation:example.com/host}.apps.example.com"}
	})
	if err := e.h.CreateOrUpdate(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	all := e.api.All()
	if len(all) != 1 || !slices.Equal(all[0].DnsNames, []string{"*.web.apps.example.com"}) {
		t.Errorf("entries = %v, want one with the DNS name *.web.apps.example.com", all)
	}
}

// mysqlColumns is SPIRE on MySQL: registered_entries.spiffe_id is a
// varchar(255) (gorm's default string size), so a create whose SPIFFE ID is
// longer fails in the datastore ("Error 1406: Data too long for column
// 'spiffe_id'"), which SPIRE's entry API answers with the per-entry code
// Internal.
func mysqlColumns(api *spirefake.EntryAPI) perEntryRule {
	return perEntryRule{api, func(e *types.Entry) (codes.Code, string, bool) {
		return codes.Internal, "failed to create entry: datastore-sql: Error 1406: Data too long for column 'spiffe_id' at row 1",
			len("spiffe://"+e.SpiffeId.TrustDomain+e.SpiffeId.Path) > 255
	}}
}

// One namespace's entry whose create SPIRE keeps failing must not stop the
// policy from withdrawing the identities of other namespaces: namespace b's
// Deployment is deleted, and its entry must go, while a tenant of
// namespace a runs a Deployment under a service account whose (valid,
// 253-character) name makes the default SPIFFE ID longer than SPIRE's
// MySQL column.
func TestAnotherNamespacesFailingCreateDoesNotKeepAWithdrawnIdentity(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), ns("b", map[string]string{"spiffe": "on"}),
		deploy("a", "web", "web", map[string]string{"app": "web"}),
		deploy("b", "api", "api", map[string]string{"app": "api"}))
	e.h.Syncer = entrysync.New(mysqlColumns(e.api), entrysync.Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour,
		Pods: func(context.Context, string, string) ([]entrysync.Pod, error) { return nil, nil }})
	p := newPolicy(nil)
	if err := e.h.CreateOrUpdate(ctx, p); err != nil {
		t.Fatal(err)
	}
	if got := sortedPaths(e.api); strings.Join(got, ",") != "/ns/a/sa/web,/ns/b/sa/api" {
		t.Fatalf("entries = %v", got)
	}
	// Namespace b's owner deletes its Deployment (no pod runs): its
	// identity is withdrawn.
	if err := e.c.Delete(ctx, deploy("b", "api", "", nil)); err != nil {
		t.Fatal(err)
	}
	// A tenant of namespace a adds a Deployment under a service account
	// with a long, valid name.
	long := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61)
	if err := e.c.Create(ctx, deploy("a", "batch", long, map[string]string{"app": "batch"})); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		// The pass fails, to be retried, and says which entry and why.
		if err := e.h.CreateOrUpdate(ctx, p); err == nil || !strings.Contains(err.Error(), "Data too long") {
			t.Errorf("pass %d: error %v, want one naming SPIRE's message", i+1, err)
		}
	}
	for _, path := range sortedPaths(e.api) {
		if path == "/ns/b/sa/api" {
			t.Errorf("namespace b's withdrawn identity is still registered after 3 passes: %v", sortedPaths(e.api))
		}
	}
}
