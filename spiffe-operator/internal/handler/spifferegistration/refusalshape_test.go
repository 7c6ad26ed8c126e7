package spifferegistration

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
)

// podTable is a pod cache for the syncer: pods by "namespace/serviceAccount".
type podTable struct {
	mu   sync.Mutex
	pods map[string][]entrysync.Pod
}

func (p *podTable) list(_ context.Context, namespace, sa string) ([]entrysync.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.pods[namespace+"/"+sa]), nil
}

func (p *podTable) set(namespace, sa string, pods ...entrysync.Pod) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pods[namespace+"/"+sa] = pods
}

// labelledDeploy is a Deployment whose object labels and
// spec.selector.matchLabels are set apart.
func labelledDeploy(namespace, name, sa string, labels, match map[string]string) *appsv1.Deployment {
	d := deploy(namespace, name, sa, match)
	d.Labels = labels
	return d
}

// perWorkloadIdentities gives each workload an identity and a DNS name of
// its own.
func perWorkloadIdentities(s *v1alpha1.SpiffeRegistrationSpec) {
	s.SpiffeIDTemplate = "ns/{namespace}/sa/{serviceAccount}/{name}"
	s.DNSNameTemplates = []string{"{name}.{namespace}.svc"}
}

// passes runs n passes of p; some fail while SPIRE refuses an entry.
func passes(ctx context.Context, h *Handler, p *v1alpha1.SpiffeRegistration, n int) {
	for range n {
		_ = h.CreateOrUpdate(ctx, p)
	}
}

// abxUnderTheAccountsEntry is a policy with one identity per service
// account, after its first pass: the Deployment "ab--x" (a name SPIRE
// refuses in a DNS name) runs its pod abx-1 under the account's entry.
func abxUnderTheAccountsEntry(ctx context.Context, t *testing.T) (*env, *v1alpha1.SpiffeRegistration) {
	t.Helper()
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}),
		deploy("a", "ab--x", "shop", map[string]string{"app": "ab--x"}))
	pods := &podTable{pods: map[string][]entrysync.Pod{}}
	pods.set("a", "shop", entrysync.Pod{UID: "abx-1", Labels: labels.Set{"app": "ab--x"}})
	e.h.Syncer = entrysync.New(spireDNSRules(e.api), entrysync.Options{IDs: entries.IDScheme{Prefix: "trustplane."},
		ResyncInterval: time.Hour, Pods: pods.list})
	p := newPolicy(nil)
	if err := e.h.CreateOrUpdate(ctx, p); err != nil {
		t.Fatal(err)
	}
	if got := paths(e.api); !slices.Equal(got, []string{"/ns/a/sa/shop"}) {
		t.Fatalf("first pass: entries = %v", got)
	}
	return e, p
}

func withdrawWeb(p *v1alpha1.SpiffeRegistration) {
	p.Spec.WorkloadSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "app", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"web"}}}}
	p.Generation++
}

// TestARefusalKeepsAWithdrawnIdentityOnlyForPodsThatRanAtTheWithdrawal:
// per-workload identities; the admin withdraws web. A tenant of the
// namespace created, under web's service account, a Deployment "ab--x"
// (its DNS name SPIRE refuses) whose spec.selector.matchLabels are web's
// (app=web) while its own object labels are not, so the admin's
// workloadSelector still selects it. Its pod, running when web was
// withdrawn, matched web's entry then and is still served by no entry
// SPIRE holds: like any pod that needed a withdrawn entry, it keeps it
// while it runs (a documented limit). A pod the tenant starts after the
// withdrawal keeps nothing: once the first one is gone, web's entry goes,
// though SPIRE still refuses the tenant's.
func TestARefusalKeepsAWithdrawnIdentityOnlyForPodsThatRanAtTheWithdrawal(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}),
		deploy("a", "web", "shop", map[string]string{"app": "web"}))
	pods := &podTable{pods: map[string][]entrysync.Pod{}}
	e.h.Syncer = entrysync.New(spireDNSRules(e.api), entrysync.Options{IDs: entries.IDScheme{Prefix: "trustplane."},
		ResyncInterval: time.Hour, Pods: pods.list})
	p := newPolicy(perWorkloadIdentities)
	if err := e.h.CreateOrUpdate(ctx, p); err != nil {
		t.Fatal(err)
	}
	if got := paths(e.api); !slices.Equal(got, []string{"/ns/a/sa/shop/web"}) {
		t.Fatalf("first pass: entries = %v", got)
	}
	// The tenant's Deployment: object label app=ab--x, matchLabels app=web.
	if err := e.c.Create(ctx, labelledDeploy("a", "ab--x", "shop", map[string]string{"app": "ab--x"},
		map[string]string{"app": "web"})); err != nil {
		t.Fatal(err)
	}
	pods.set("a", "shop", entrysync.Pod{UID: "tenant-1", Labels: labels.Set{"app": "web"}})
	if err := e.h.CreateOrUpdate(ctx, p); err == nil {
		t.Fatal("SPIRE refused nothing")
	}
	// The admin withdraws web; none of web's own pods runs.
	withdrawWeb(p)
	passes(ctx, e.h, p, 3)
	if got := paths(e.api); !slices.Contains(got, "/ns/a/sa/shop/web") {
		t.Errorf("the pod that matched web's entry when it was withdrawn runs, served by no other entry, yet web's entry went: %v", got)
	}
	// That pod goes; a pod the tenant starts after the withdrawal runs.
	pods.set("a", "shop", entrysync.Pod{UID: "tenant-2", Labels: labels.Set{"app": "web"}})
	passes(ctx, e.h, p, 3)
	if got := paths(e.api); slices.Contains(got, "/ns/a/sa/shop/web") {
		t.Errorf("web is withdrawn, yet a pod started after the withdrawal keeps its entry: %v", got)
	}
}

// TestARefusedDeploymentWhosePodShapeCannotBeJudgedDoesNotKeepWithdrawnIdentitiesElsewhere:
// the policy carries a selector template from a workload label (the one
// the documentation gives as an example) and per-workload identities, so
// its entries also carry the matchLabels. A tenant of namespace a
// creates a Deployment "ab--x" (SPIRE refuses its DNS name) whose object
// label tier differs from its matchLabels' tier: its entry selects no pod
// and has no pod shape, and a refused entry without one holds back every
// stale entry of the policy, in any namespace, with no pod needed. The
// admin then withdraws web in namespace b, where the tenant has no rights
// and no pod of web runs: its entry must go.
func TestARefusedDeploymentWhosePodShapeCannotBeJudgedDoesNotKeepWithdrawnIdentitiesElsewhere(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), ns("b", map[string]string{"spiffe": "on"}),
		labelledDeploy("b", "web", "shop", map[string]string{"app": "web", "tier": "fe"},
			map[string]string{"app": "web", "tier": "fe"}))
	pods := &podTable{pods: map[string][]entrysync.Pod{}}
	e.h.Syncer = entrysync.New(spireDNSRules(e.api), entrysync.Options{IDs: entries.IDScheme{Prefix: "trustplane."},
		ResyncInterval: time.Hour, Pods: pods.list})
	p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
		perWorkloadIdentities(s)
		s.WorkloadSelectorTemplates = []string{"k8s:pod-label:tier:{label:tier}"}
	})
	if err := e.h.CreateOrUpdate(ctx, p); err != nil {
		t.Fatal(err)
	}
	if got := paths(e.api); !slices.Equal(got, []string{"/ns/b/sa/shop/web"}) {
		t.Fatalf("first pass: entries = %v", got)
	}
	if err := e.c.Create(ctx, labelledDeploy("a", "ab--x", "t", map[string]string{"app": "ab--x", "tier": "one"},
		map[string]string{"app": "ab--x", "tier": "two"})); err != nil {
		t.Fatal(err)
	}
	if err := e.h.CreateOrUpdate(ctx, p); err == nil {
		t.Fatal("SPIRE refused nothing")
	}
	withdrawWeb(p)
	passes(ctx, e.h, p, 3)
	if got := paths(e.api); slices.Contains(got, "/ns/b/sa/shop/web") {
		t.Errorf("web (namespace b) is withdrawn and no pod runs, yet a refusal provoked in namespace a keeps its entry: %v", got)
	}
}

// TestATemplateChangeWhoseNewEntryIsRefusedLeavesTheRunningPodItsEntry:
// the policy gives each service account one identity; the admin moves it
// to per-workload identities with a DNS name per workload, so the new
// entries also select the workload's matchLabels. SPIRE refuses the new
// entry of the Deployment "ab--x" (a name Kubernetes allows). Its running
// pod had the account's entry; the one meant to follow it could not be
// created, so the old one must stay while the pod runs. The old entry's
// pod shape (no labels) is not the refused one's (app=ab--x), and it is
// deleted: the pod goes without any entry while SPIRE refuses.
func TestATemplateChangeWhoseNewEntryIsRefusedLeavesTheRunningPodItsEntry(t *testing.T) {
	ctx := context.Background()
	e, p := abxUnderTheAccountsEntry(ctx, t)
	perWorkloadIdentities(&p.Spec)
	p.Generation++
	for i := 0; i < 2; i++ {
		if err := e.h.CreateOrUpdate(ctx, p); err == nil {
			t.Fatal("SPIRE refused nothing")
		}
	}
	if got := paths(e.api); len(got) == 0 {
		t.Errorf("the pod of ab--x runs and its new entry is refused, yet SPIRE holds no entry for it: %v (failures %+v)",
			got, p.Status.Failures)
	}
}
