package spifferegistration

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
)

// TestAdversarialAPodWhoseAnnotationGrowsOverTheIDLimitKeepsItsEntry: a policy
// of pods renders the pod's annotation into its SPIFFE ID. web-1 runs with
// a short value and gets its entry; then whoever may edit the pod (or a
// mutating controller) grows the annotation to 2,100 bytes. Guarantee 3: a
// running pod that matches an entry keeps it; render errors never open a
// window without an entry. Expected: the pod's entry stays in SPIRE, the
// failure is reported, and no entry over 2048 bytes reaches SPIRE.
func TestAdversarialAPodWhoseAnnotationGrowsOverTheIDLimitKeepsItsEntry(t *testing.T) {
	ctx := context.Background()
	pod := runningPod("a", "web-1", "shop", "", map[string]string{"app": "web"})
	pod.Annotations = map[string]string{"example.com/v": "short"}
	e := retainingEnv(t, ns("a", map[string]string{"spiffe": "on"}), pod)
	p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
		s.SpiffeIDTemplate = "ns/{namespace}/pod/{podName}/{annotation:example.com/v}"
	})
	if err := e.h.CreateOrUpdate(ctx, p); err != nil || !slices.Equal(paths(e.api), []string{"/ns/a/pod/web-1/short"}) {
		t.Fatalf("setup: %v, entries %v", err, paths(e.api))
	}
	if err := e.c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
		t.Fatal(err)
	}
	pod.Annotations["example.com/v"] = strings.Repeat("a", 2100)
	if err := e.c.Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		_ = e.h.CreateOrUpdate(ctx, p)
	}
	for _, x := range e.api.All() {
		if n := len("spiffe://" + x.SpiffeId.TrustDomain + x.SpiffeId.Path); n > entries.MaxIDLength {
			t.Errorf("an entry of %d bytes reached SPIRE", n)
		}
	}
	if got := paths(e.api); !slices.Equal(got, []string{"/ns/a/pod/web-1/short"}) {
		t.Errorf("entries after the annotation grew = %v: the running pod lost its entry", got)
	}
	if !slices.ContainsFunc(p.Status.Failures, func(f v1alpha1.Failure) bool { return f.Reason == ReasonInvalidSpiffeIDTemplate }) {
		t.Errorf("the failure is not reported: %+v", p.Status.Failures)
	}
}

// TestAdversarialAWorkloadWhoseLabelRendersAnOverlongSelectorKeepsItsLastGoodEntry:
// a policy of workloads whose selector template repeats a workload label.
// The tenant who owns Deployment web grows the label to 63 characters, so
// the selector renders over 1024 bytes. Expected: web fails alone, keeps
// the entry of its last good render, and nothing over the limit reaches
// SPIRE.
func TestAdversarialAWorkloadWhoseLabelRendersAnOverlongSelectorKeepsItsLastGoodEntry(t *testing.T) {
	ctx := context.Background()
	web := deploy("a", "web", "web", map[string]string{"app": "web"})
	web.Labels["v"] = "x"
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), web)
	p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.SpiffeIDTemplate = "ns/{namespace}/w/{name}"
		s.WorkloadSelectorTemplates = []string{"k8s:container-image:registry.example.com/" + strings.Repeat("{label:v}", 20)}
	})
	p.Generation = 1
	if err := e.h.CreateOrUpdate(ctx, p); err != nil || len(e.api.All()) != 1 {
		t.Fatalf("setup: %v, entries %v", err, paths(e.api))
	}
	before := e.api.All()[0]
	web.Labels["v"] = strings.Repeat("a", 63)
	if err := e.c.Update(ctx, web); err != nil {
		t.Fatal(err)
	}
	_ = e.h.CreateOrUpdate(ctx, p)
	all := e.api.All()
	for _, x := range all {
		if n := longestSelector(x.Selectors); n > entries.MaxSelectorLength {
			t.Errorf("a selector of %d bytes reached SPIRE", n)
		}
	}
	if len(all) != 1 || all[0].Id != before.Id {
		t.Errorf("entries after the label grew = %v: web lost its last good entry", paths(e.api))
	}
	if !slices.ContainsFunc(p.Status.Failures, func(f v1alpha1.Failure) bool { return f.Reason == ReasonInvalidWorkloadSelectorTemplate }) {
		t.Errorf("the failure is not reported: %+v", p.Status.Failures)
	}
}

// TestAdversarialAParentTemplateEditOverTheIDLimitKeepsRunningPodsEntries:
// per-node parents; web-1 runs on a node whose name is 250 characters and
// has its entry under the node's agent. An admin edits parentIDTemplate
// so that it names the node nine times: for that node the parent renders
// over 2048 bytes and the node now fails. Expected (guarantee 3): web-1
// keeps its entry under the old parent while it runs; the node's failure
// is reported; nothing over the limit reaches SPIRE.
func TestAdversarialAParentTemplateEditOverTheIDLimitKeepsRunningPodsEntries(t *testing.T) {
	ctx := context.Background()
	long := strings.Repeat("n", 250)
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: long, UID: k8stypes.UID("uid-long")}}
	e, p := perNodeEnv(t, ns("a", map[string]string{"spiffe": "on"}), n,
		deploy("a", "web", "shop", map[string]string{"app": "web"}),
		runningPod("a", "web-1", "shop", long, map[string]string{"app": "web"}))
	before := entriesWithParents(e)
	if len(before) != 1 {
		t.Fatalf("setup: entries %v", before)
	}
	p.Spec.ParentIDTemplate = strings.Repeat("{nodeName}/", 9) + "end"
	p.Generation++
	for i := 0; i < 2; i++ {
		_ = e.h.CreateOrUpdate(ctx, p)
	}
	for _, x := range e.api.All() {
		if n := len("spiffe://" + x.ParentId.TrustDomain + x.ParentId.Path); n > entries.MaxIDLength {
			t.Errorf("a parent ID of %d bytes reached SPIRE", n)
		}
	}
	if got := entriesWithParents(e); !slices.Equal(got, before) {
		t.Errorf("entries after the edit = %v, want %v: the running pod lost its entry", got, before)
	}
	if !slices.ContainsFunc(p.Status.Failures, func(f v1alpha1.Failure) bool { return f.Reason == ReasonInvalidParentIDTemplate }) {
		t.Errorf("the node's failure is not reported: %+v", p.Status.Failures)
	}
}

// TestAdversarialAFixedParentOverTheIDLimitIsRefusedByTheOperator: spec.parentID
// is capped at 2048 characters by the CRD only. The operator re-checks
// what admission checks elsewhere (a SpiffeRegistration stored under an
// older or hand-edited CRD, as compile's comments say of the CEL rules).
// Expected: a fixed parent over 2048 bytes is refused at compile with
// InvalidParentID, so no entry under it reaches SPIRE. A hole (low,
// defence in depth): it compiles and every entry of the policy carries it.
func TestAdversarialAFixedParentOverTheIDLimitIsRefusedByTheOperator(t *testing.T) {
	spec := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.ParentID = "spiffe://example.org/" + strings.Repeat("p", 2100)
	}).Spec
	if _, err := compile(&spec, "example.org", ""); err == nil {
		t.Errorf("compile accepted a fixed parentID of %d bytes", len(spec.ParentID))
	}
}

// TestAdversarialAnEntryOverTheLimitRegisteredBeforeTheUpgradeStaysForItsRunningPod:
// SPIRE on SQLite held a 2,100-byte SPIFFE ID that the operator of before
// the render limits registered for the running pod web-1 (a policy of pods rendering
// its annotation). The operator is upgraded (a restart: no memory of
// renders); the pod now fails the limit. Guarantee 3 (restarts and render
// errors never open a window without an entry). Expected: the running
// pod's existing entry stays while it runs; no new over-limit entry is
// created.
func TestAdversarialAnEntryOverTheLimitRegisteredBeforeTheUpgradeStaysForItsRunningPod(t *testing.T) {
	ctx := context.Background()
	pod := runningPod("a", "web-1", "shop", "", map[string]string{"app": "web"})
	value := strings.Repeat("a", 2100)
	pod.Annotations = map[string]string{"example.com/v": value}
	e := retainingEnv(t, ns("a", map[string]string{"spiffe": "on"}), pod)
	p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
		s.SpiffeIDTemplate = "ns/{namespace}/pod/{podName}/{annotation:example.com/v}"
	})
	// What the operator of before registered (the same entry the render
	// gave without the limit).
	old := &entries.Entry{
		SpiffeID: spiffeid.RequireFromPath(spiffeid.RequireTrustDomainFromString("example.org"), "/ns/a/pod/web-1/"+value),
		ParentID: spiffeid.RequireFromString("spiffe://example.org/agent"),
		Selectors: []entries.Selector{{Type: "k8s", Value: "ns:a"}, {Type: "k8s", Value: "sa:shop"},
			{Type: "k8s", Value: "pod-uid:pod-web-1"}},
		X509SVIDTTL: 3600,
	}
	old.Normalize()
	if _, err := e.h.Syncer.Sync(ctx, OwnerOf(p), []*entries.Entry{old}, nil); err != nil || len(e.api.All()) != 1 {
		t.Fatalf("setup: %v, entries %d", err, len(e.api.All()))
	}
	h := restarted(e)
	for i := 0; i < 2; i++ {
		_ = h.CreateOrUpdate(ctx, p)
	}
	if got := len(e.api.All()); got != 1 {
		t.Errorf("after the upgrade, entries = %d: the running pod lost the entry it had", got)
	}
}
