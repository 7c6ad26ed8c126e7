package workload

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func deployment() *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod", Labels: map[string]string{"app": "web"},
			Annotations: map[string]string{"big": "x"}},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{ServiceAccountName: "checkout",
					Containers: []corev1.Container{{Name: "c", Image: "img"}}},
			},
		},
	}
}

func TestTransformKeepsOnlyWhatSelectionNeeds(t *testing.T) {
	out, err := Transform(deployment())
	if err != nil {
		t.Fatal(err)
	}
	d := out.(*appsv1.Deployment)
	if len(d.Spec.Template.Spec.Containers) != 0 || d.Annotations != nil || d.Spec.Template.Labels != nil {
		t.Errorf("pod template or annotations kept: %+v", d)
	}
	w, ok := FromObject(d)
	if !ok || w.ServiceAccount != "checkout" || w.MatchLabels["app"] != "web" || w.Labels["app"] != "web" {
		t.Errorf("workload after transform = %+v", w)
	}
}

func TestDefaultServiceAccount(t *testing.T) {
	d := deployment()
	d.Spec.Template.Spec.ServiceAccountName = ""
	if w, _ := FromObject(d); w.ServiceAccount != "default" {
		t.Errorf("service account = %q", w.ServiceAccount)
	}
}

func TestChangedIgnoresTemplateAndStatusChanges(t *testing.T) {
	a, b := deployment(), deployment()
	b.Spec.Template.Spec.Containers[0].Image = "img:2"
	b.Status.Replicas = 3
	if Changed(a, b) {
		t.Error("image or status change reported as relevant")
	}
	b.Spec.Template.Spec.ServiceAccountName = "other"
	if !Changed(a, b) {
		t.Error("service account change not reported")
	}
	c := deployment()
	c.Labels = map[string]string{"app": "web", "tier": "x"}
	if !Changed(a, c) {
		t.Error("label change not reported")
	}
}
