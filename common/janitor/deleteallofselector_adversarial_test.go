package janitor_test

// A careless but natural use of the janitor's DeleteAllOf, against a real
// API server (its own control plane, not the suite's):

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	widgetv1 "github.com/trustplane/trustplane/common/examples/widget/api/v1"
	"github.com/trustplane/trustplane/common/internal/testapi"
	"github.com/trustplane/trustplane/common/janitor"
	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/common/scoped"
)

// TestDeleteAllOfDeletesOnlyWhatTheCallerSelected: docs/framework.md
// says the janitor's DeleteAllOf deletes, "of the objects of this
// environment that opts select, only the owner's children". A handler that
// keeps two tiers of children and withdraws one tier calls
// j.DeleteAllOf(ctx, &ConfigMap{}, InNamespace(ns), MatchingLabels{"tier": "cache"}).
// Safe behaviour: the owner's "tier=cache" children go and its
// "tier=config" child stays (as a plain client's DeleteAllOf would do).
//
// Seen failing: the owner's tier=config child went too (the owner selector replaced the caller's).
func TestDeleteAllOfDeletesOnlyWhatTheCallerSelected(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	c, ns := plane.For(t, "j-sel-")
	w := &widgetv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: ns, Labels: map[string]string{labels.Environment: "dev"}}}
	g.Expect(c.Create(ctx, w)).To(Succeed())
	j, err := janitor.New(scoped.New(c, "dev"), w)
	g.Expect(err).NotTo(HaveOccurred())

	for name, tier := range map[string]string{"cache-1": "cache", "cache-2": "cache", "config": "config"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		_, err := j.CreateOrUpdate(ctx, cm, func() error {
			if cm.Labels == nil {
				cm.Labels = map[string]string{}
			}
			cm.Labels["tier"] = tier
			return nil
		})
		g.Expect(err).NotTo(HaveOccurred())
	}

	g.Expect(j.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns), client.MatchingLabels{"tier": "cache"})).To(Succeed())

	left := func() ([]string, error) { return testapi.LiveConfigMaps(ctx, c, ns, client.HasLabels{labels.OwnerUID}) }
	g.Eventually(left).Should(Equal([]string{"config"}),
		"DeleteAllOf with MatchingLabels{tier: cache} must delete the cache tier only and keep the owner's tier=config child")
}
