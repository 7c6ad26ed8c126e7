package spifferegistration

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entrysync"
	"github.com/trustplane/trustplane/spiffe-operator/internal/pods"
)

// retainingEnv is an env whose syncer reads the pods, so that an entry no
// longer wanted stays while a pod still runs under it.
func retainingEnv(t *testing.T, objs ...client.Object) *env {
	t.Helper()
	e := newEnv(t, objs...)
	e.h.Syncer = entrysync.New(e.api, entrysync.Options{IDs: entries.IDScheme{Prefix: "trustplane."},
		ResyncInterval: time.Hour, Pods: pods.Lister(pods.Source{Reader: e.c})})
	return e
}

// adminPodPolicy is a policy of pods labelled app=web, with SPIRE admin,
// whose SPIFFE ID names the pod's tier label.
func adminPodPolicy() *v1alpha1.SpiffeRegistration {
	p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
		s.SpiffeIDTemplate = "ns/{namespace}/tier/{label:tier}"
		s.Admin = true
		s.NamespaceSelector.MatchLabels = map[string]string{"kubernetes.io/metadata.name": "a"}
		s.ServiceAccountName = "shop"
	})
	p.Generation = 1
	return p
}

// TestAnEntryKeptForARunningPodLosesAWithdrawnGrant: an entry the policy no
// longer wants stays while the pod using it runs, so that the pod keeps its
// identity. It must not keep a grant the policy has withdrawn since: on the
// old code it kept admin for as long as the pod ran, and a tenant who may
// label and run pods in its namespace could hold it open.
func TestAnEntryKeptForARunningPodLosesAWithdrawnGrant(t *testing.T) {
	ctx := context.Background()
	webPod := func() *corev1.Pod {
		return runningPod("a", "web-1", "shop", "", map[string]string{"app": "web", "tier": "front"})
	}

	t.Run("the edit that withdraws admin also makes the pod's render fail", func(t *testing.T) {
		pod := webPod()
		e := retainingEnv(t, ns("a", map[string]string{"kubernetes.io/metadata.name": "a"}), pod)
		p := adminPodPolicy()
		if err := e.h.CreateOrUpdate(ctx, p); err != nil || !slices.Equal(grantsOf(e), []string{"/ns/a/tier/front admin=true downstream=false federatesWith=[]"}) {
			t.Fatalf("setup: %v, entries %v", err, grantsOf(e))
		}
		p.Spec.Admin = false
		p.Spec.SpiffeIDTemplate = "ns/{namespace}/zone/{label:zone}"
		p.Generation = 2
		_ = e.h.CreateOrUpdate(ctx, p)
		if got := grantsOf(e); !slices.Equal(got, []string{"/ns/a/tier/front admin=false downstream=false federatesWith=[]"}) {
			t.Errorf("admin was withdrawn; the pod keeps its identity while it runs, yet SPIRE holds %v", got)
		}
	})

	t.Run("a tenant makes the render fail before admin is withdrawn", func(t *testing.T) {
		pod := webPod()
		e := retainingEnv(t, ns("a", map[string]string{"kubernetes.io/metadata.name": "a"}), pod)
		p := adminPodPolicy()
		if err := e.h.CreateOrUpdate(ctx, p); err != nil {
			t.Fatalf("setup: %v", err)
		}
		// The tenant removes the label the template names: the pod's render
		// fails and its entry is kept for it, admin included.
		delete(pod.Labels, "tier")
		if err := e.c.Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
		_ = e.h.CreateOrUpdate(ctx, p)
		if got := grantsOf(e); !slices.Equal(got, []string{"/ns/a/tier/front admin=true downstream=false federatesWith=[]"}) {
			t.Fatalf("setup: the pod's entry was to stay while it runs: %v", got)
		}
		p.Spec.Admin = false
		p.Generation = 2
		_ = e.h.CreateOrUpdate(ctx, p)
		if got := grantsOf(e); !slices.Equal(got, []string{"/ns/a/tier/front admin=false downstream=false federatesWith=[]"}) {
			t.Errorf("admin was withdrawn while the tenant kept the pod's render failing; SPIRE holds %v", got)
		}
	})

	t.Run("after a restart, a Deployment's entry kept for its pods", func(t *testing.T) {
		web := deploy("a", "web", "shop", map[string]string{"app": "web"})
		web.Labels["tier"] = "front"
		pod := runningPod("a", "web-1", "shop", "", map[string]string{"app": "web"})
		e := retainingEnv(t, ns("a", map[string]string{"kubernetes.io/metadata.name": "a"}), web, pod)
		p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.SpiffeIDTemplate = "ns/{namespace}/tier/{label:tier}"
			s.Downstream = true
			s.NamespaceSelector.MatchLabels = map[string]string{"kubernetes.io/metadata.name": "a"}
			s.ServiceAccountName = "shop"
			s.FederatesWith = []v1alpha1.TrustDomainName{"one.example", "two.example"}
		})
		p.Generation = 1
		if err := e.h.CreateOrUpdate(ctx, p); err != nil {
			t.Fatalf("setup: %v", err)
		}
		// A new process (no last good render) meets a Deployment whose
		// render fails: its entry is kept for the pod that runs.
		restarted := retainingEnv(t)
		restarted.api, restarted.c = e.api, e.c
		restarted.h.Reader = e.c
		restarted.h.Syncer = entrysync.New(e.api, entrysync.Options{IDs: entries.IDScheme{Prefix: "trustplane."},
			ResyncInterval: time.Hour, Pods: pods.Lister(pods.Source{Reader: e.c})})
		delete(web.Labels, "tier")
		if err := e.c.Update(ctx, web); err != nil {
			t.Fatal(err)
		}
		p.Spec.Downstream = false
		p.Spec.FederatesWith = []v1alpha1.TrustDomainName{"two.example"}
		p.Generation = 2
		_ = restarted.h.CreateOrUpdate(ctx, p)
		if got := grantsOf(e); !slices.Equal(got, []string{"/ns/a/tier/front admin=false downstream=false federatesWith=[two.example]"}) {
			t.Errorf("downstream and one.example were withdrawn; SPIRE holds %v", got)
		}
	})
}

// TestARefusalOfWhatATenantRendersDoesNotKeepAWithdrawnGrant: a policy gives
// one account of namespace a admin, with a DNS name from a label the
// tenant sets. The tenant sets it to a name SPIRE refuses ("ab--x", valid
// in Kubernetes) and the admin then withdraws admin. SPIRE refuses the
// update that carries both changes and keeps the entry as it was; on the
// old code that left admin in place for as long as the tenant kept the
// label. The entry stays (the workload keeps its identity) without admin.
// The same holds when the tenant's edit also changes the SPIFFE ID: the
// refused create holds back the entry it replaces, which keeps no
// withdrawn grant either.
func TestARefusalOfWhatATenantRendersDoesNotKeepAWithdrawnGrant(t *testing.T) {
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   []string
	}{
		{"a refused update", map[string]string{"host": "ab--x"},
			[]string{"/ns/a/w/web/v1 admin=false downstream=false federatesWith=[]"}},
		{"a refused create holding back what it replaces", map[string]string{"host": "ab--x", "ver": "v2"},
			[]string{"/ns/a/w/web/v1 admin=false downstream=false federatesWith=[]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			web := deploy("a", "web", "shop", map[string]string{"app": "web"})
			web.Labels = map[string]string{"app": "web", "host": "web", "ver": "v1"}
			e := newEnv(t, ns("a", map[string]string{"kubernetes.io/metadata.name": "a"}), web)
			e.h.Syncer = entrysync.New(spireDNSRules(e.api), entrysync.Options{IDs: entries.IDScheme{Prefix: "trustplane."},
				ResyncInterval: time.Hour})
			p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
				s.NamespaceSelector.MatchLabels = map[string]string{"kubernetes.io/metadata.name": "a"}
				s.ServiceAccountName = "shop"
				s.SpiffeIDTemplate = "ns/{namespace}/w/{name}/{label:ver}"
				s.DNSNameTemplates = []string{"{label:host}.apps.example.com"}
				s.Admin = true
			})
			p.Generation = 1
			if err := e.h.CreateOrUpdate(ctx, p); err != nil ||
				!slices.Equal(grantsOf(e), []string{"/ns/a/w/web/v1 admin=true downstream=false federatesWith=[]"}) {
				t.Fatalf("setup: %v, entries %v", err, grantsOf(e))
			}
			for k, v := range tc.labels {
				web.Labels[k] = v
			}
			if err := e.c.Update(ctx, web); err != nil {
				t.Fatal(err)
			}
			p.Spec.Admin = false
			p.Generation = 2
			_ = e.h.CreateOrUpdate(ctx, p)
			if got := grantsOf(e); !slices.Equal(got, tc.want) {
				t.Errorf("admin was withdrawn while SPIRE refused what the tenant's label renders; SPIRE holds %v, want %v", got, tc.want)
			}
			if len(p.Status.Failures) == 0 {
				t.Errorf("the refusal is not reported: %+v", p.Status.Failures)
			}
		})
	}
}
