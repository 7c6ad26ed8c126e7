package trustbundle

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// TestAStaleLeftSourceAtDoesNotShortenTheGraceOfACAThatCameBack: old is
// rotated out at T0 (retainRemovedFor 1h; leftSourceAt T0 recorded), comes
// back to the sources at T0+50m, and leaves again at T0+51m. The pass at
// T0+50m published old as a source CA and the process remembers it so
// (publication.left has no entry for it), but that pass's status write is
// lost (a conflict), so the status still says old left at T0. vouched
// took the earlier of the status's time and the memory's, and with no
// time in memory the status's stale T0: the second leave was retained for
// 9 minutes instead of an hour. A CA the process last published from the
// sources now leaves when the pass finds it gone.
func TestAStaleLeftSourceAtDoesNotShortenTheGraceOfACAThatCameBack(t *testing.T) {
	start := time.Now()
	old := testpki.NewCA("old", start.Add(-time.Hour), start.Add(30*24*time.Hour))
	cur := testpki.NewCA("current", start.Add(-time.Hour), start.Add(30*24*time.Hour))
	h, applied := attackHandler(t)
	now := start
	h.Now = func() time.Time { return now }
	both := []v1alpha1.Source{{Inline: old.PEM() + cur.PEM()}}
	curOnly := []v1alpha1.Source{{Inline: cur.PEM()}}
	tb := &v1alpha1.TrustBundle{
		ObjectMeta: metav1.ObjectMeta{Name: "b", UID: "u-1"},
		Spec: v1alpha1.TrustBundleSpec{
			Sources: both,
			Target:  v1alpha1.Target{ConfigMap: &v1alpha1.ObjectTarget{Name: "ca"}},
			Options: v1alpha1.Options{RetainRemovedFor: &metav1.Duration{Duration: time.Hour}},
		},
	}
	pass := func() {
		t.Helper()
		if err := h.CreateOrUpdate(context.Background(), tb); err != nil {
			t.Fatal(err)
		}
	}
	pass()
	tb.Spec.Sources = curOnly // T0: old leaves
	pass()
	now = now.Add(50 * time.Minute)
	tb.Spec.Sources = both // T0+50m: old is back
	lost := tb.Status.DeepCopy()
	pass()
	tb.Status = *lost // that pass's status write failed
	now = now.Add(time.Minute)
	tb.Spec.Sources = curOnly // T0+51m: old leaves again
	pass()
	now = now.Add(20 * time.Minute) // T0+71m
	pass()
	if s, _ := applied()["team"]["ca.crt"].(string); !strings.Contains(s, strings.TrimSpace(old.PEM())) {
		t.Errorf("old left the sources again 20m ago (grace 1h) and is no longer published: its grace ran from its first leave, 71m ago, though this process last published it as a source CA")
	}
}
