package spifferegistration

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// TestAStatefulSetAnotherPolicyHoldsKeepsTheFallbacksDeploymentOff: main
// selects StatefulSets only (the fallback Deployments only); the
// StatefulSet db, held by main, runs as shop, as does Deployment web with
// a matchExpressions selector. The fallback's entry for web would select
// db's pods: it must leave web unregistered.
func TestAStatefulSetAnotherPolicyHoldsKeepsTheFallbacksDeploymentOff(t *testing.T) {
	ctx := context.Background()
	dbL := map[string]string{"app": "db"}
	db := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "db", Labels: map[string]string{"app": "db"}},
		Spec: appsv1.StatefulSetSpec{Selector: &metav1.LabelSelector{MatchLabels: dbL},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{ServiceAccountName: "shop"}}},
	}
	web := deploy("a", "web", "shop", nil)
	web.Spec.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"web"}}}}
	e := retainingEnv(t, ns("a", map[string]string{"spiffe": "on"}), db, web,
		runningPod("a", "db-0", "shop", "", dbL), runningPod("a", "web-1", "shop", "", map[string]string{"app": "web"}))
	main := storedMain(ctx, t, e, func(s *v1alpha1.SpiffeRegistrationSpec) {
		s.SpiffeIDTemplate = "ns/{namespace}/w/{name}"
		s.WorkloadKinds = []v1alpha1.WorkloadKind{v1alpha1.WorkloadKindStatefulSet}
	})
	fb := storedFallback(ctx, t, e)
	twoPasses(ctx, e, main, fb)
	if got := selectingPod(e.api.All(), "a", "shop", dbL); len(got) != 1 {
		t.Errorf("db's pods are selected by %v, want main's entry alone", got)
	}
}
