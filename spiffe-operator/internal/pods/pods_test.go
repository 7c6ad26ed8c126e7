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
		got := out.(*corev1.Pod)
		// The index reads the transformed pod, as the cache does.
		if got.Spec.ServiceAccountName != tc.want || IndexServiceAccount(got)[0] != tc.want {
			t.Errorf("%s: service account %q, index %v; want %q", tc.name, got.Spec.ServiceAccountName, IndexServiceAccount(got), tc.want)
		}
	}
}

func TestTransformDropsKubectlsLastAppliedConfiguration(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{lastApplied: "{...}", "example.com/role": "reader"}}}
	out, _ := Transform(p)
	if a := out.(*corev1.Pod).Annotations; len(a) != 1 || a["example.com/role"] != "reader" {
		t.Errorf("annotations = %v", a)
	}
}
