package spifferegistration

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/trustplane/trustplane/common/ctrlerrors"
	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
	spirefake "github.com/trustplane/trustplane/spiffe-operator/internal/spire/fake"
)

func scheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

func ns(name string, l map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
}

func deploy(namespace, name, sa string, match map[string]string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{"app": name}},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: match},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{ServiceAccountName: sa}},
		},
	}
}

func newPolicy(mut func(*v1alpha1.SpiffeRegistrationSpec)) *v1alpha1.SpiffeRegistration {
	r := &v1alpha1.SpiffeRegistration{
		ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "11111111-2222-3333-4444-555555555555", CreationTimestamp: metav1.Now()},
		Spec: v1alpha1.SpiffeRegistrationSpec{
			TrustDomain:       "example.org",
			ParentID:          "spiffe://example.org/agent",
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"spiffe": "on"}},
		},
	}
	if mut != nil {
		mut(&r.Spec)
	}
	return r
}

type env struct {
	h   *Handler
	api *spirefake.EntryAPI
	c   client.Client
}

func newEnv(t *testing.T, objs ...client.Object) *env {
	c := fake.NewClientBuilder().WithScheme(scheme(t)).WithObjects(objs...).Build()
	api := spirefake.New()
	s := entrysync.New(api, entrysync.Options{IDs: entries.IDScheme{Prefix: "trustplane."}, ResyncInterval: time.Hour})
	return &env{h: &Handler{Reader: c, Syncer: s, TrustDomain: "example.org"}, api: api, c: c}
}

func paths(api *spirefake.EntryAPI) []string {
	var out []string
	for _, e := range api.All() {
		out = append(out, e.SpiffeId.Path)
	}
	return out
}

func TestSharedServiceAccountSharesOneEntry(t *testing.T) {
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), ns("off", nil),
		deploy("a", "web", "shop", map[string]string{"app": "web"}),
		deploy("a", "worker", "shop", map[string]string{"app": "worker"}),
		deploy("off", "x", "shop", map[string]string{"app": "x"}))
	p := newPolicy(nil)
	if err := e.h.CreateOrUpdate(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if got := paths(e.api); len(got) != 1 || got[0] != "/ns/a/sa/shop" {
		t.Fatalf("entries = %v", got)
	}
	st := p.Status
	if st.WorkloadsSelected != 2 || st.EntriesDesired != 1 || st.EntriesRegistered != 1 || st.LastSyncTime == nil {
		t.Errorf("status = %+v", st)
	}
	// One of the two workloads goes: the entry stays for the other.
	if err := e.c.Delete(context.Background(), deploy("a", "web", "", nil)); err != nil {
		t.Fatal(err)
	}
	if err := e.h.CreateOrUpdate(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if got := paths(e.api); len(got) != 1 {
		t.Fatalf("entry gone while a workload still needs it: %v", got)
	}
	if err := e.c.Delete(context.Background(), deploy("a", "worker", "", nil)); err != nil {
		t.Fatal(err)
	}
	if err := e.h.CreateOrUpdate(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if got := paths(e.api); len(got) != 0 {
		t.Errorf("entry kept after the last workload went: %v", got)
	}
}

func TestWorkloadNameTemplateAddsPodLabelSelectors(t *testing.T) {
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}),
		deploy("a", "web", "shop", map[string]string{"app": "web", "tier": "fe"}))
	p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) { s.SpiffeIDTemplate = "ns/{namespace}/w/{name}" })
	if err := e.h.CreateOrUpdate(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	all := e.api.All()
	if len(all) != 1 {
		t.Fatalf("entries = %v", all)
	}
	var sels []string
	for _, s := range all[0].Selectors {
		sels = append(sels, s.Type+":"+s.Value)
	}
	want := "k8s:ns:a,k8s:pod-label:app:web,k8s:pod-label:tier:fe,k8s:sa:shop"
	if strings.Join(sels, ",") != want {
		t.Errorf("selectors = %v, want %s", sels, want)
	}
}

func TestPerWorkloadTemplateWithoutMatchLabelsFails(t *testing.T) {
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), deploy("a", "web", "shop", nil))
	p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) { s.SpiffeIDTemplate = "w/{name}" })
	err := e.h.CreateOrUpdate(context.Background(), p)
	if ctrlerrors.Reason(err, "") != ReasonUnsafePodSelector || len(e.api.All()) != 0 {
		t.Errorf("err = %v, entries = %v", err, e.api.All())
	}
}

func TestTemplateRenderingAnInvalidIDFailsOnlyThatWorkload(t *testing.T) {
	good := deploy("a", "web", "shop", map[string]string{"app": "web"})
	bad := deploy("a", "nolabel", "shop2", map[string]string{"app": "x"})
	bad.Labels = nil
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), good, bad)
	p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) { s.SpiffeIDTemplate = "app/{label:app}" })
	err := e.h.CreateOrUpdate(context.Background(), p)
	if ctrlerrors.Reason(err, "") != ReasonInvalidSpiffeIDTemplate || !strings.Contains(err.Error(), "spec.spiffeIDTemplate") {
		t.Errorf("err = %v", err)
	}
	if got := paths(e.api); len(got) != 1 || got[0] != "/app/web" {
		t.Errorf("entries = %v", got)
	}
	if p.Status.EntriesFailed != 1 || len(p.Status.Failures) != 1 || p.Status.Failures[0].Object != "Deployment a/nolabel" {
		t.Errorf("status = %+v", p.Status)
	}
}

func TestBadSpecIsRefusedNamingTheField(t *testing.T) {
	cases := map[string]struct {
		mut    func(*v1alpha1.SpiffeRegistrationSpec)
		reason string
		field  string
	}{
		"trust domain": {func(s *v1alpha1.SpiffeRegistrationSpec) { s.TrustDomain = "Bad Domain" }, ReasonInvalidTrustDomain, "spec.trustDomain"},
		"other domain": {func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.TrustDomain = "other.org"
			s.ParentID = "spiffe://other.org/a"
		}, ReasonTrustDomainMismatch, "spec.trustDomain"},
		"parent ID":    {func(s *v1alpha1.SpiffeRegistrationSpec) { s.ParentID = "spiffe://elsewhere.org/agent" }, ReasonInvalidParentID, "spec.parentID"},
		"template":     {func(s *v1alpha1.SpiffeRegistrationSpec) { s.SpiffeIDTemplate = "ns/{pod}" }, ReasonInvalidSpiffeIDTemplate, "spec.spiffeIDTemplate"},
		"dns template": {func(s *v1alpha1.SpiffeRegistrationSpec) { s.DNSNameTemplates = []string{"{nme}.svc"} }, ReasonInvalidDNSNameTemplate, "spec.dnsNameTemplates[0]"},
		"federation":   {func(s *v1alpha1.SpiffeRegistrationSpec) { s.FederatesWith = []v1alpha1.TrustDomainName{"Not Valid"} }, ReasonInvalidFederatesWith, "spec.federatesWith[0]"},
		"ttl":          {func(s *v1alpha1.SpiffeRegistrationSpec) { s.X509SVIDTTL = &metav1.Duration{Duration: -time.Second} }, ReasonInvalidTTL, "spec.x509SVIDTTL"},
		"label selector": {func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.WorkloadSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"bad key!": "x"}}
		}, ReasonInvalidWorkloadSelector, "spec.workloadSelector"},
		"default parent without cluster name": {func(s *v1alpha1.SpiffeRegistrationSpec) { s.ParentID = "" },
			ReasonClusterNameUnset, "spec.parentIDTemplate (default spire/agent/k8s_psat/{clusterName}/{nodeUID})"},
		"parent template without node": {func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.ParentID, s.ParentIDTemplate = "", "agents/all"
		}, ReasonInvalidParentIDTemplate, "spec.parentIDTemplate"},
		"admin on labelled namespaces": {func(s *v1alpha1.SpiffeRegistrationSpec) { s.Admin, s.ServiceAccountName = true, "ops" },
			ReasonUnsafeAdmin, "spec.admin"},
		"downstream without a service account": {func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.Downstream = true
			s.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.NamespaceNameLabel: "a"}}
		}, ReasonUnsafeAdmin, "spec.downstream"},
		"both parents": {func(s *v1alpha1.SpiffeRegistrationSpec) { s.ParentIDTemplate = "agents/{nodeName}" },
			ReasonInvalidParentID, "not both"},
		// Admission refuses both since the CEL rule; an object stored before it may hold both.
		"pod and workload selectors": {func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
			s.WorkloadSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
		}, ReasonPodAndWorkloadSelector, "spec.workloadSelector"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), deploy("a", "web", "shop", map[string]string{"app": "web"}))
			err := e.h.CreateOrUpdate(context.Background(), newPolicy(tc.mut))
			if !ctrlerrors.IsBlocked(err) || ctrlerrors.Reason(err, "") != tc.reason || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("err = %v (reason %s), want reason %s naming %s", err, ctrlerrors.Reason(err, ""), tc.reason, tc.field)
			}
			if len(e.api.All()) != 0 {
				t.Errorf("entries written for a bad spec: %v", paths(e.api))
			}
		})
	}
}

func TestSpireDownIsRetryableSpireUnavailable(t *testing.T) {
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), deploy("a", "web", "shop", map[string]string{"app": "web"}))
	e.api.SetUnavailable(true)
	err := e.h.CreateOrUpdate(context.Background(), newPolicy(nil))
	if _, ok := ctrlerrors.AsRetryable(err); !ok || ctrlerrors.Reason(err, "") != ReasonSpireUnavailable {
		t.Errorf("err = %v", err)
	}
}

// SPIRE failing one workload's entry every time (an Internal answer for a
// datastore error, such as a lookup too large for its database) was
// reported as SPIRE being unavailable, though SPIRE answered and
// registered the other workloads.
func TestAnEntrySPIREFailsIsReportedAsSuchNotAsSPIREDown(t *testing.T) {
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}),
		deploy("a", "web", "web", map[string]string{"app": "web"}), deploy("a", "api", "api", map[string]string{"app": "api"}))
	const failing = "spiffe://example.org/ns/a/sa/api"
	e.api.Fail[failing] = codes.Internal
	err := e.h.CreateOrUpdate(context.Background(), newPolicy(nil))
	if _, ok := ctrlerrors.AsRetryable(err); !ok || ctrlerrors.Reason(err, "") != ReasonSpireFailedEntries ||
		!strings.Contains(err.Error(), failing) || !strings.Contains(err.Error(), "datastore error") {
		t.Errorf("err = %v (reason %s), want a retryable %s naming %s and SPIRE's message", err, ctrlerrors.Reason(err, ""), ReasonSpireFailedEntries, failing)
	}
	if got := paths(e.api); !slices.Equal(got, []string{"/ns/a/sa/web"}) {
		t.Errorf("SPIRE holds %v, want the other workload's entry", got)
	}
}

// SPIRE refusing to delete an entry the policy no longer wants (a code
// retrying does not mend, such as FailedPrecondition) was reported as
// SPIRE being unavailable, though it answered and named the entry.
func TestADeleteSPIRERefusesIsReportedAsSuchNotAsSPIREDown(t *testing.T) {
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}),
		deploy("a", "web", "web", map[string]string{"app": "web"}), deploy("a", "api", "api", map[string]string{"app": "api"}))
	ctx := context.Background()
	p := newPolicy(nil)
	if err := e.h.CreateOrUpdate(ctx, p); err != nil {
		t.Fatal(err)
	}
	const refused = "spiffe://example.org/ns/a/sa/api"
	e.api.FailDelete[refused] = codes.FailedPrecondition
	if err := e.c.Delete(ctx, deploy("a", "api", "", nil)); err != nil {
		t.Fatal(err)
	}
	err := e.h.CreateOrUpdate(ctx, p)
	if _, ok := ctrlerrors.AsRetryable(err); !ok || ctrlerrors.Reason(err, "") != ReasonSpireRefusedDeletes ||
		!strings.Contains(err.Error(), "FailedPrecondition") || !strings.Contains(err.Error(), "refuses to delete it") {
		t.Errorf("err = %v (reason %s), want a retryable %s with SPIRE's code and message", err, ctrlerrors.Reason(err, ""), ReasonSpireRefusedDeletes)
	}
	delete(e.api.FailDelete, refused)
	if err := e.h.CreateOrUpdate(ctx, p); err != nil {
		t.Fatalf("once SPIRE deletes it: %v", err)
	}
	if got := paths(e.api); !slices.Equal(got, []string{"/ns/a/sa/web"}) {
		t.Errorf("SPIRE holds %v, want only web's entry", got)
	}
}

func TestDeleteRemovesExactlyThePolicysEntries(t *testing.T) {
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), deploy("a", "web", "shop", map[string]string{"app": "web"}))
	p := newPolicy(nil)
	if err := e.h.CreateOrUpdate(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	other := e.api.All()[0]
	other.Id = ""
	other.SpiffeId.Path = "/hand/made"
	fid := e.api.Put(other)
	if err := e.h.Delete(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if all := e.api.All(); len(all) != 1 || all[0].Id != fid {
		t.Errorf("after delete: %v", all)
	}
}

func TestAWorkloadWhoseRenderFailsKeepsItsLastGoodEntry(t *testing.T) {
	web := deploy("a", "web", "web", map[string]string{"app": "web"})
	team := deploy("a", "api", "api", map[string]string{"app": "api"})
	team.Labels["team"] = "pay"
	e := newEnv(t, ns("a", map[string]string{"spiffe": "on"}), web, team)
	ctx := context.Background()
	p := newPolicy(nil)
	p.Generation = 1
	if err := e.h.CreateOrUpdate(ctx, p); err != nil {
		t.Fatal(err)
	}
	// The edit needs a label web lacks: web keeps its entry, api moves.
	p.Spec.SpiffeIDTemplate = "team/{label:team}/{serviceAccount}"
	p.Generation = 2
	err := e.h.CreateOrUpdate(ctx, p)
	if ctrlerrors.Reason(err, "") != ReasonInvalidSpiffeIDTemplate || len(p.Status.Failures) != 1 || p.Status.Failures[0].Object != "Deployment a/web" {
		t.Fatalf("err = %v, failures %+v", err, p.Status.Failures)
	}
	if got := strings.Join(sortedPaths(e.api), ","); got != "/ns/a/sa/web,/team/pay/api" {
		t.Fatalf("entries after the edit = %s", got)
	}
	// Passes that follow, full or for web alone, keep it too.
	e.h.Dirty = NewDirty()
	e.h.Dirty.Workload(p.Name, v1alpha1.WorkloadKindDeployment, "a", "web")
	_ = e.h.CreateOrUpdate(ctx, p)
	_ = e.h.CreateOrUpdate(ctx, p)
	if got := strings.Join(sortedPaths(e.api), ","); got != "/ns/a/sa/web,/team/pay/api" {
		t.Fatalf("entries after later passes = %s", got)
	}
	// Once web renders again, its entry follows the template.
	web.Labels["team"] = "shop"
	if err := e.c.Update(ctx, web); err != nil {
		t.Fatal(err)
	}
	if err := e.h.CreateOrUpdate(ctx, p); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(sortedPaths(e.api), ","); got != "/team/pay/api,/team/shop/web" {
		t.Errorf("entries after the fix = %s", got)
	}
}

func sortedPaths(api *spirefake.EntryAPI) []string {
	out := paths(api)
	slices.Sort(out)
	return out
}
