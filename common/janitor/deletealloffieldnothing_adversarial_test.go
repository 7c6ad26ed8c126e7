package janitor_test

import (
	"context"
	"strings"
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

// TestDeleteAllOfWithAFieldSelectorOfNothingDeletesNoChild: an empty
// MatchingFieldsSelector is fields.Nothing(), which selects nothing and is
// sent as "" (no field selector). scoped.SelectsNothing looked only at the
// label selector, so the janitor added the owner's labels and every child
// of the owner was deleted (short name: one deletecollection; long name:
// the listed children one by one; seen failing), although the docs promise
// "of those only what the caller's options select". It looks at both now.
func TestDeleteAllOfWithAFieldSelectorOfNothingDeletesNoChild(t *testing.T) {
	ctx := context.Background()
	c, ns := plane.For(t, "j-fields-")
	for _, tc := range []struct{ what, owner, prefix string }{
		{"an owner whose name a label holds", "w", "short"},
		{"an owner whose name no label holds", "w-" + strings.Repeat("x", 70), "long"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			g := NewWithT(t)
			w := &widgetv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: tc.owner, Namespace: ns, Labels: map[string]string{labels.Environment: "dev"}}}
			g.Expect(c.Create(ctx, w)).To(Succeed())
			j, err := janitor.New(scoped.New(c, "dev"), w)
			g.Expect(err).NotTo(HaveOccurred())
			prefix := tc.prefix
			for _, name := range []string{prefix + "-cache", prefix + "-config"} {
				_, err := j.CreateOrUpdate(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}, func() error { return nil })
				g.Expect(err).NotTo(HaveOccurred())
			}

			g.Expect(j.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns), client.MatchingFieldsSelector{})).To(Succeed())

			left, err := testapi.LiveConfigMaps(ctx, c, ns, client.MatchingLabels{labels.OwnerUID: string(w.UID)})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(left).To(Equal([]string{prefix + "-cache", prefix + "-config"}),
				"the caller's field selector selects nothing (fields.Nothing()), yet the janitor's DeleteAllOf deleted the owner's children")
		})
	}
}
