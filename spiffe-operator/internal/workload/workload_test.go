package workload

import (
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
	d, ok := out.(*Object)
	if !ok {
		t.Fatalf("transform returned %T, want *Object", out)
	}
	if d.Annotations != nil {
		t.Errorf("annotations kept: %+v", d)
	}
	w, ok := FromObject(d)
	want, _ := FromObject(deployment())
	if !ok || !reflect.DeepEqual(w, want) {
		t.Errorf("workload after transform = %+v, want %+v", w, want)
	}
}

func TestTransformKeepsEveryFieldFromObjectReads(t *testing.T) {
	for name, obj := range map[string]client.Object{
		"deployment without service account": func() client.Object {
			d := deployment()
			d.Spec.Template.Spec.ServiceAccountName = ""
			return d
		}(),
		"statefulset with expressions and other labels": &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "prod", ResourceVersion: "7", Labels: map[string]string{"tier": "db"}},
			Spec: appsv1.StatefulSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"},
					MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "x", Operator: metav1.LabelSelectorOpExists}}},
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{ServiceAccountName: "db"}},
			}},
		"daemonset without selector": &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "sys"}},
	} {
		out, err := Transform(obj)
		if err != nil {
			t.Fatal(err)
		}
		got, okGot := FromObject(out.(client.Object))
		want, okWant := FromObject(obj)
		if !okGot || !okWant || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: after transform %+v, before %+v", name, got, want)
		}
		c := out.(*Object).DeepCopyObject().(*Object)
		if again, _ := FromObject(c); !reflect.DeepEqual(again, want) {
			t.Errorf("%s: deep copy %+v, want %+v", name, again, want)
		}
	}
}

func TestChangedSeesChangesOfCachedObjects(t *testing.T) {
	a, _ := Transform(deployment())
	d := deployment()
	d.Spec.Template.Spec.ServiceAccountName = "other"
	b, _ := Transform(d)
	if !Changed(a.(client.Object), b.(client.Object)) {
		t.Error("service account change between cached objects not reported")
	}
	if Changed(a.(client.Object), a.(client.Object)) {
		t.Error("no change reported as a change")
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
