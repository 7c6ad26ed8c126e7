package pods

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestTransformKeepsAMirrorPodWithoutServiceAccount(t *testing.T) {
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		sa, want    string
	}{
		{"plain pod without account", nil, "", "default"},
		{"plain pod", nil, "web", "web"},
		{"mirror pod", map[string]string{MirrorAnnotation: "h"}, "", ""},
	} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: tc.annotations}, Spec: corev1.PodSpec{ServiceAccountName: tc.sa}}
		out, err := Transform(p)
		if err != nil {
			t.Fatal(err)
		}
		got := out.(*Object)
		// The index reads the transformed pod, as the cache does.
		idx, err := IndexServiceAccount(got)
		if err != nil || got.ServiceAccount != tc.want || len(idx) != 1 || idx[0] != "/"+tc.want {
			t.Errorf("%s: service account %q, index %v (%v); want %q", tc.name, got.ServiceAccount, idx, err, tc.want)
		}
	}
}

func TestTransformDropsKubectlsLastAppliedConfiguration(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{lastApplied: "{...}", "example.com/role": "reader"}}}
	out, _ := Transform(p)
	if a := out.(*Object).Annotations; len(a) != 1 || a["example.com/role"] != "reader" {
		t.Errorf("annotations = %v", a)
	}
}

func TestTransformKeepsWhatTheOperatorReads(t *testing.T) {
	yes := true
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "prod", UID: "u1", ResourceVersion: "9",
			Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"example.com/role": "reader"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-x", Controller: &yes}}},
		Spec:   corev1.PodSpec{ServiceAccountName: "web", NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "img"}}},
		Status: corev1.PodStatus{Phase: corev1.PodSucceeded},
	}
	out, _ := Transform(p)
	o := out.(*Object)
	if o.Name != "web-1" || o.Namespace != "prod" || o.UID != "u1" || o.ResourceVersion != "9" || o.LabelSet.Get("app") != "web" || o.Labels != nil ||
		o.ServiceAccount != "web" || o.NodeName != "n1" || o.Annotations["example.com/role"] != "reader" {
		t.Errorf("object = %+v", o)
	}
	if kind, name := Owner(o); kind != "ReplicaSet" || name != "web-x" {
		t.Errorf("owner = %s %s", kind, name)
	}
	if Running(o) {
		t.Error("a succeeded pod counts as running")
	}
	c := o.DeepCopyObject().(*Object)
	c.SetLabels(map[string]string{"app": "changed"})
	if o.LabelSet.Get("app") != "web" || c.GetLabels()["app"] != "changed" {
		t.Error("a copy's labels are not its own")
	}
	got := o.GetLabels()
	got["app"] = "changed"
	if o.LabelSet.Get("app") != "web" {
		t.Error("GetLabels hands out the cached labels")
	}
}
