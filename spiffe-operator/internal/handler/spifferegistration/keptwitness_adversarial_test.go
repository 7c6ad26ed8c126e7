package spifferegistration

import (
	"context"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// A forged status record gives web (render failing) the genuine SPIRE entry
// of another workload of the same namespace and service account (api).
// SPIRE holding it proves the operator registered it for the policy, not
// that it was web's.
//   - On the first version of that check the pod-label selectors were not
//     held to web's, and after api was deleted its identity stayed
//     registered, kept by web (and witnessed again at every restart).
//   - With api selecting its pods by the same matchLabels as web (app=web;
//     Kubernetes allows overlapping Deployment selectors, and a tenant
//     chooses them) the pod-label check held, and web kept api's identity
//     after api and every pod it selected were gone. A record SPIRE holds
//     whose SPIFFE ID the policy's template renders for some workload of
//     the account must now be one it renders for this workload.
func TestAKeptRecordTakesNoOtherWorkloadsEntry(t *testing.T) {
	for name, apiLabels := range map[string]map[string]string{
		"other matchLabels": {"app": "api"},
		"same matchLabels":  {"app": "web"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			e, p, _ := failingWeb(ctx, t, nil)
			api := forgeWebsRecordAsAPIs(ctx, t, e, p, apiLabels)
			e.h = restarted(e)
			_ = e.h.CreateOrUpdate(ctx, p)
			if recordsAPIsIdentity(p) {
				t.Errorf("after a restart the status records api's identity as web's: %+v", p.Status.KeptEntries)
			}
			// api goes, and so does the pod web's selector matches (while
			// it runs, an entry that selects it stays for it, as any entry
			// a running pod needs does).
			if err := e.c.Delete(ctx, api); err != nil {
				t.Fatal(err)
			}
			if err := e.c.Delete(ctx, runningPod("a", "web-1", "web", "", nil)); err != nil {
				t.Fatal(err)
			}
			_ = e.h.CreateOrUpdate(ctx, p)
			if got := paths(e.api); slices.Contains(got, "/a/api/pay") {
				t.Errorf("api and its pods are gone, yet SPIRE holds %v: web keeps api's identity from a forged record (status %+v)", got, p.Status.KeptEntries)
			}
		})
	}
}

// forgeWebsRecordAsAPIs creates api, of web's namespace and account,
// labelled app=web and selecting its pods by match, has the policy register it (/a/api/pay),
// and forges web's record in p's status (a status write only) as api's
// entry, which SPIRE holds under the policy's ID.
func forgeWebsRecordAsAPIs(ctx context.Context, t *testing.T, e *env, p *v1alpha1.SpiffeRegistration, match map[string]string) *appsv1.Deployment {
	t.Helper()
	api := deploy("a", "api", "web", match)
	api.UID, api.Labels["team"], api.Labels["app"] = "uid-api", "pay", "web"
	if err := e.c.Create(ctx, api); err != nil {
		t.Fatal(err)
	}
	_ = e.h.CreateOrUpdate(ctx, p)
	forgeWebAs(t, e, p, "/a/api/pay")
	return api
}

// recordsAPIsIdentity reports whether p's status records /a/api/pay.
func recordsAPIsIdentity(p *v1alpha1.SpiffeRegistration) bool {
	return slices.ContainsFunc(p.Status.KeptEntries, func(k v1alpha1.KeptEntry) bool { return k.SpiffeID == "spiffe://example.org/a/api/pay" })
}

// The same with a template that names the workload's kind, not its name:
// web (a Deployment) and api (a DaemonSet) of one service account select
// the same pods, and a forged record gives web api's /a/DaemonSet/pay. The
// first version of the check of the policy's workloads looked only at
// those whose name the SPIFFE ID holds, so it let this through.
func TestAKeptRecordTakesNoOtherKindsEntry(t *testing.T) {
	ctx := context.Background()
	e, p := failingWebBesidesAPI(ctx, t, v1alpha1.WorkloadKindDaemonSet, "{namespace}/{kind}/{label:team}")
	forgeWebAs(t, e, p, "/a/DaemonSet/pay")
	e.h = restarted(e)
	_ = e.h.CreateOrUpdate(ctx, p)
	if slices.ContainsFunc(p.Status.KeptEntries, func(k v1alpha1.KeptEntry) bool { return k.SpiffeID == "spiffe://example.org/a/DaemonSet/pay" }) {
		t.Errorf("after a restart the status records api's identity as web's: %+v", p.Status.KeptEntries)
	}
}

// failingWebBesidesAPI is failingWeb with api, a workload of kind (a
// StatefulSet or a DaemonSet) of web's account selecting the same pods,
// under a policy of template tmpl that selects Deployments and kind: api
// is registered, and web's render fails and keeps its last good entry.
func failingWebBesidesAPI(ctx context.Context, t *testing.T, kind v1alpha1.WorkloadKind, tmpl string) (*env, *v1alpha1.SpiffeRegistration) {
	t.Helper()
	web := deploy("a", "web", "web", map[string]string{"app": "web"})
	web.UID, web.Labels["team"] = "uid-web", "pay"
	meta := metav1.ObjectMeta{Namespace: "a", Name: "api", UID: "uid-api", Labels: map[string]string{"team": "pay"}}
	selector := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	pods := corev1.PodTemplateSpec{Spec: corev1.PodSpec{ServiceAccountName: "web"}}
	var api client.Object = &appsv1.DaemonSet{ObjectMeta: meta, Spec: appsv1.DaemonSetSpec{Selector: selector, Template: pods}}
	if kind == v1alpha1.WorkloadKindStatefulSet {
		api = &appsv1.StatefulSet{ObjectMeta: meta, Spec: appsv1.StatefulSetSpec{Selector: selector, Template: pods}}
	}
	e := retainingEnv(t, ns("a", map[string]string{"spiffe": "on", "kubernetes.io/metadata.name": "a"}), web, api,
		runningPod("a", "web-1", "web", "", map[string]string{"app": "web"}))
	p := newPolicy(func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.SpiffeIDTemplate = tmpl
		s.WorkloadKinds = []v1alpha1.WorkloadKind{v1alpha1.WorkloadKindDeployment, kind}
	})
	p.Generation = 1
	if err := e.h.CreateOrUpdate(ctx, p); err != nil || len(paths(e.api)) != 2 {
		t.Fatalf("setup: %v, entries %v", err, paths(e.api))
	}
	delete(web.Labels, "team")
	if err := e.c.Update(ctx, web); err != nil {
		t.Fatal(err)
	}
	if err := e.h.CreateOrUpdate(ctx, p); err == nil || len(p.Status.KeptEntries) != 1 {
		t.Fatalf("setup: web's render was to fail and keep its entry: %v, %+v", err, p.Status.KeptEntries)
	}
	return e, p
}
