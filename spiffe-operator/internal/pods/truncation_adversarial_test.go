package pods

import (
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
)

// TestAdversarialTruncationKeepsEveryValueRefusedAndDistinct: a value over the
// cap is cut, and may be cut inside a character; what is kept is still
// longer than any ID (so it never renders), and a value that fits is never
// touched, so two values that fit never collapse into one.
func TestAdversarialTruncationKeepsEveryValueRefusedAndDistinct(t *testing.T) {
	for _, v := range []string{
		strings.Repeat("é", entries.MaxIDLength), // 2-byte runes: cut inside one
		strings.Repeat("a", entries.MaxIDLength+1),
		strings.Repeat("a", entries.MaxIDLength+2),
		strings.Repeat("a", entries.MaxIDLength) + "/../x",
	} {
		o := FromPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "u", Annotations: map[string]string{"k": v}}})
		got := o.Annotations["k"]
		if len(got) <= entries.MaxIDLength {
			t.Errorf("a %d-byte value is kept as %d bytes: it could render within the ID limit", len(v), len(got))
		}
		if !strings.HasPrefix(v, got) {
			t.Errorf("the kept value is not a prefix of the value")
		}
		_ = utf8.ValidString(got)
	}
	a, b := strings.Repeat("a", entries.MaxIDLength), strings.Repeat("a", entries.MaxIDLength-1)+"b"
	oa := FromPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"k": a}}})
	ob := FromPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"k": b}}})
	if oa.Annotations["k"] == ob.Annotations["k"] {
		t.Errorf("two values that fit are kept equal")
	}
	// The mirror-pod annotation is read for its presence: a long value
	// keeps it present, and the pod keeps no service account.
	m := FromPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{MirrorAnnotation: strings.Repeat("h", 300<<10)}},
		Spec: corev1.PodSpec{ServiceAccountName: "default"}})
	if !Mirror(m) || m.ServiceAccount != "" {
		t.Errorf("a mirror pod with a long annotation value is not a mirror pod any more (sa %q)", m.ServiceAccount)
	}
}
