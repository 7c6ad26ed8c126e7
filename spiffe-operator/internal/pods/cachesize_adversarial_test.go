package pods

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
)

// TestAdversarialAPodsAnnotationsDoNotGrowTheSharedCacheUnbounded: whoever
// creates pods in one namespace sets their annotations, up to 256 KiB a
// pod, and the operator's pod cache serves every namespace's policies. A
// value longer than any SPIFFE ID can never render into an entry, so the
// cache keeps only one byte more than the longest ID: enough to refuse it
// as too long, never enough to render it. A value that fits is kept whole.
func TestAdversarialAPodsAnnotationsDoNotGrowTheSharedCacheUnbounded(t *testing.T) {
	fits := strings.Repeat("f", entries.MaxIDLength)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "tenant", UID: "u",
		Annotations: map[string]string{"example.com/blob": strings.Repeat("x", 255<<10), "example.com/fits": fits}}}
	o := FromPod(p)
	if got := o.Annotations["example.com/blob"]; len(got) != entries.MaxIDLength+1 || !strings.HasPrefix(p.Annotations["example.com/blob"], got) {
		t.Errorf("a 255 KiB annotation is kept as %d bytes; want its first %d, one over the longest ID", len(got), entries.MaxIDLength+1)
	}
	if got := o.Annotations["example.com/fits"]; got != fits {
		t.Errorf("an annotation of %d bytes was changed to %d bytes", len(fits), len(got))
	}
}
