package scoped_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/internal/testapi"
	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/common/scoped"
)

// TestSelectorsOfNothingNeverReachBeyondWhatTheySelect: selectors
// that select nothing but serialise to "" (sent as no selector at all),
// other than the label selector SelectsNothing first knew: a field
// selector of nothing made DeleteAllOf delete every object of the
// environment, and a label selector of nothing made List return other
// environments' objects (both seen failing). Both now select nothing.
func TestSelectorsOfNothingNeverReachBeyondWhatTheySelect(t *testing.T) {
	ctx := context.Background()
	c, ns := testapi.PlaneForTest(t, "s-nothing-")
	dev := scoped.New(c, "dev")
	mk := func(name, env string) {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{labels.Environment: env}}}
		if err := c.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	mk("dev-a", "dev")
	mk("dev-b", "dev")
	mk("prod-a", "prod")

	// List with the selector an unset spec selector gives
	// (metav1.LabelSelectorAsSelector(nil) is labels.Nothing()): the
	// environment requirement added to Nothing is swallowed, the request
	// carries no label selector, and the list holds other environments'
	// objects, which "List sees only objects of that environment" forbids.
	t.Run("List with a label selector of nothing stays in the environment", func(t *testing.T) {
		g := NewWithT(t)
		sel, err := metav1.LabelSelectorAsSelector(nil)
		g.Expect(err).NotTo(HaveOccurred())
		list := &corev1.ConfigMapList{}
		g.Expect(dev.List(ctx, list, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel})).To(Succeed())
		var foreign []string
		for _, cm := range list.Items {
			if !dev.InScope(&cm) {
				foreign = append(foreign, cm.Name)
			}
		}
		g.Expect(foreign).To(BeEmpty(),
			"scoped.Client(dev).List with labels.Nothing() returned objects of another environment")
	})

	// DeleteAllOf with a field selector of nothing (an empty
	// MatchingFieldsSelector becomes fields.Nothing(), whose String() is
	// ""): SelectsNothing looks at the label selector only, so the
	// deletecollection carries the environment label and no field
	// selector, and every object of the environment goes.
	t.Run("DeleteAllOf with a field selector of nothing deletes nothing", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(dev.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns), client.MatchingFieldsSelector{})).To(Succeed())
		left, err := testapi.LiveConfigMaps(ctx, c, ns, client.HasLabels{labels.Environment})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(left).To(Equal([]string{"dev-a", "dev-b", "prod-a"}),
			"the caller's field selector selects nothing (fields.Nothing()), yet DeleteAllOf deleted objects")
	})
}
