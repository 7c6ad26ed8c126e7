package controller_test

// The deletion of an owner by a tenant of another namespace,
// against a real API server (its own control plane, not the suite's):

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/common/controller"
	"github.com/trustplane/trustplane/common/examples/widget"
	widgetv1 "github.com/trustplane/trustplane/common/examples/widget/api/v1"
	"github.com/trustplane/trustplane/common/internal/testapi"
	"github.com/trustplane/trustplane/common/labels"
)

// TestForgedChildHeldByOurFinalizerNameCannotBlockOwnerDeletion: the
// fix behind TestAdversarialForgedChildInAnotherNamespaceCannotBlockOwnerDeletion
// stops waiting for a forged child in another namespace that "only others'
// finalizers hold", but still waits while the finalizer named
// trustplane.dev/finalizer holds it. A finalizer is a free-form string: the
// tenant puts that very name on the ConfigMap they forged in their own
// namespace (owner labels naming victim/w). Safe behaviour: victim/w's
// deletion still completes; nothing of ours will ever take that finalizer
// off a tenant's ConfigMap, so waiting for it holds the victim forever.
//
// Seen failing: the owner stayed "Retrying: delete children: waiting for the children of w to be deleted", the forged child held by trustplane.dev/finalizer.
func TestForgedChildHeldByOurFinalizerNameCannotBlockOwnerDeletion(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	c, victim := testapi.PlaneForTest(t, "victim-")
	tenant, err := testapi.NewNamespace(ctx, c, "tenant-")
	g.Expect(err).NotTo(HaveOccurred())

	w := &widgetv1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: victim, Name: "w", Labels: map[string]string{labels.Environment: "prod"}},
		Spec: widgetv1.WidgetSpec{Children: []string{"a"}, Data: map[string]string{"k": "v"}}}
	g.Expect(c.Create(ctx, w)).To(Succeed())

	cfg := config.Default()
	ctrl := controller.New("widget-forged", c, &widget.Handler{}, controller.Options{Config: cfg, APIReader: c})
	key := client.ObjectKeyFromObject(w)
	pass := func() error {
		_, err := ctrl.Reconcile(ctx, reconcile.Request{NamespacedName: key}, &widgetv1.Widget{})
		return err
	}
	g.Expect(pass()).To(Succeed())
	g.Expect(c.Get(ctx, key, w)).To(Succeed())
	g.Expect(controllerutil.ContainsFinalizer(w, labels.Finalizer)).To(BeTrue(), "precondition: the first pass added the finalizer")

	// The tenant, in their own namespace, forges a child of victim/w and
	// holds it with a finalizer that merely has our finalizer's name.
	forged := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: tenant, Name: "hold",
		Finalizers: []string{labels.Finalizer},
		Labels: map[string]string{labels.OwnerUID: string(w.UID), labels.OwnerKind: "Widget",
			labels.OwnerNamespace: w.Namespace, labels.OwnerName: w.Name, labels.Environment: "prod"}}}
	g.Expect(c.Create(ctx, forged)).To(Succeed())
	t.Cleanup(func() {
		// Let the namespace go: take the tenant's finalizer off.
		cur := &corev1.ConfigMap{}
		if c.Get(context.Background(), client.ObjectKeyFromObject(forged), cur) == nil {
			cur.Finalizers = nil
			_ = c.Update(context.Background(), cur)
		}
	})

	g.Expect(c.Delete(ctx, w)).To(Succeed())
	var lastErr error
	g.Eventually(func() error {
		lastErr = pass()
		return c.Get(ctx, key, &widgetv1.Widget{})
	}).WithTimeout(20*time.Second).WithPolling(500*time.Millisecond).Should(
		WithTransform(apierrors.IsNotFound, BeTrue()),
		func() string {
			held := &corev1.ConfigMap{}
			_ = c.Get(ctx, client.ObjectKeyFromObject(forged), held)
			cur := &widgetv1.Widget{}
			_ = c.Get(ctx, key, cur)
			ready := ""
			for _, cd := range cur.Status.Conditions {
				if cd.Type == "Ready" {
					ready = cd.Reason + ": " + cd.Message
				}
			}
			return fmt.Sprintf("victim/w is still not deleted (Ready %q); last pass: %v; the tenant's %s/%s (deletionTimestamp %v, finalizers %v) holds it",
				ready, lastErr, held.Namespace, held.Name, held.DeletionTimestamp, held.Finalizers)
		})
}
