package controller_test

// Attacks on the Controller's lifecycle (finalizer, environment label,
// children on deletion) by a tenant with full rights in one namespace, and
// by a second operator instance running with another environment name.
// They use controller-runtime's fake client and start no API server:
//
//	go test -run TestAdversarial ./controller/

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/trustplane/trustplane/common/config"
	"github.com/trustplane/trustplane/common/controller"
	"github.com/trustplane/trustplane/common/examples/widget"
	widgetv1 "github.com/trustplane/trustplane/common/examples/widget/api/v1"
	"github.com/trustplane/trustplane/common/labels"
)

func attackScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s, err := widget.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func attackFake(t *testing.T, objs ...client.Object) client.Client {
	t.Helper()
	return fake.NewClientBuilder().WithScheme(attackScheme(t)).
		WithStatusSubresource(&widgetv1.Widget{}).WithObjects(objs...).Build()
}

// attackInstance is one operator instance: the widget Controller with the
// given default environment ("" for strict) that reconciles the given
// environments (every one when none is given).
func attackInstance(c client.Client, name, defaultEnv string, environments ...string) *controller.Controller[*widgetv1.Widget] {
	cfg := config.Default()
	cfg.DefaultEnvironment = defaultEnv
	cfg.Environments = environments
	return controller.New(name, c, &widget.Handler{}, controller.Options{Config: cfg, APIReader: c})
}

func attackPass(t *testing.T, c *controller.Controller[*widgetv1.Widget], key types.NamespacedName) error {
	t.Helper()
	_, err := c.Reconcile(context.Background(), reconcile.Request{NamespacedName: key}, &widgetv1.Widget{})
	return err
}

func attackWidget(ns, name string, envLabel string, children ...string) *widgetv1.Widget {
	w := &widgetv1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name)},
		Spec: widgetv1.WidgetSpec{Children: children, Data: map[string]string{"k": "v"}}}
	if envLabel != "" {
		w.Labels = map[string]string{labels.Environment: envLabel}
	}
	return w
}

// TestAdversarialSecondInstanceOfAnotherEnvironmentLeavesObjectsAlone: Guarantee
// 1 says "environments scope who reconciles". A second operator instance
// started with another environment name (--default-environment=staging)
// next to the prod one must leave an object labelled
// trustplane.dev/environment=prod alone: no finalizer of its own passes, no
// child written, updated or deleted, no status. Safe behaviour: the
// staging instance makes no write at all for the prod object.
func TestAdversarialSecondInstanceOfAnotherEnvironmentLeavesObjectsAlone(t *testing.T) {
	w := attackWidget("team", "w", "prod", "a")
	c := attackFake(t, w)
	key := client.ObjectKeyFromObject(w)
	prod := attackInstance(c, "widget-prod", "prod", "prod")
	if err := attackPass(t, prod, key); err != nil {
		t.Fatal(err)
	}
	// The tenant drops child a and asks for b: only the prod instance
	// should act on it.
	cur := &widgetv1.Widget{}
	if err := c.Get(context.Background(), key, cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec.Children = []string{"b"}
	if err := c.Update(context.Background(), cur); err != nil {
		t.Fatal(err)
	}
	before := &widgetv1.Widget{}
	if err := c.Get(context.Background(), key, before); err != nil {
		t.Fatal(err)
	}
	staging := attackInstance(c, "widget-staging", "staging", "staging")
	if err := attackPass(t, staging, key); err != nil {
		t.Fatalf("staging pass: %v", err)
	}
	after := &widgetv1.Widget{}
	if err := c.Get(context.Background(), key, after); err != nil {
		t.Fatal(err)
	}
	var cms corev1.ConfigMapList
	if err := c.List(context.Background(), &cms, client.InNamespace("team")); err != nil {
		t.Fatal(err)
	}
	names := []string{}
	for _, cm := range cms.Items {
		names = append(names, cm.Name+"(env="+cm.Labels[labels.Environment]+")")
	}
	if after.ResourceVersion != before.ResourceVersion || len(cms.Items) != 1 || cms.Items[0].Name != "a" {
		t.Fatalf("the instance of environment staging reconciled an object of environment prod: widget resourceVersion %s -> %s, "+
			"children now %v (prod's child a deleted and b written by the staging instance)",
			before.ResourceVersion, after.ResourceVersion, names)
	}
}

// TestAdversarialTwoInstancesDoNotPingPongAnUnlabelledObjectsChildren: two
// instances with different default environments (a and b) both run. A
// tenant leaves the environment label off. Failure mode 3 says a steady
// object costs zero writes; safe behaviour: after both instances have had
// a pass, further passes of either write nothing (no child moved back and
// forth between environments a and b).
func TestAdversarialTwoInstancesDoNotPingPongAnUnlabelledObjectsChildren(t *testing.T) {
	w := attackWidget("team", "w", "", "a")
	c := attackFake(t, w)
	key := client.ObjectKeyFromObject(w)
	ia, ib := attackInstance(c, "widget-a", "a", "a"), attackInstance(c, "widget-b", "b", "b")
	for _, i := range []*controller.Controller[*widgetv1.Widget]{ia, ib} {
		if err := attackPass(t, i, key); err != nil {
			t.Fatal(err)
		}
	}
	child := &corev1.ConfigMap{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "team", Name: "a"}, child); err != nil {
		t.Fatal(err)
	}
	rv, envs := child.ResourceVersion, []string{child.Labels[labels.Environment]}
	writes := 0
	for round := 0; round < 3; round++ {
		for _, i := range []*controller.Controller[*widgetv1.Widget]{ia, ib} {
			if err := attackPass(t, i, key); err != nil {
				t.Fatal(err)
			}
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(child), child); err != nil {
				t.Fatal(err)
			}
			if child.ResourceVersion != rv {
				writes++
				rv = child.ResourceVersion
				envs = append(envs, child.Labels[labels.Environment])
			}
		}
	}
	if writes != 0 {
		t.Fatalf("the two instances rewrote the unlabelled widget's child %d times in 6 steady passes; its environment label went %v", writes, envs)
	}
}

// TestAdversarialRelabelledOwnerKeepsItsChildInPlace: a tenant moves their
// widget from prod to staging and then removes the label (the instance has
// default environment prod) while it has a child. Safe behaviour
// (continuity): the child is moved by update, never deleted and created
// again (same UID all along), and ends with the label of the environment
// the owner is in.
func TestAdversarialRelabelledOwnerKeepsItsChildInPlace(t *testing.T) {
	ctx := context.Background()
	w := attackWidget("team", "w", "prod", "a")
	c := attackFake(t, w)
	key := client.ObjectKeyFromObject(w)
	inst := attackInstance(c, "widget", "prod")
	if err := attackPass(t, inst, key); err != nil {
		t.Fatal(err)
	}
	child := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "team", Name: "a"}, child); err != nil {
		t.Fatal(err)
	}
	uid := child.UID
	for _, next := range []string{"staging", "", "prod"} {
		cur := &widgetv1.Widget{}
		if err := c.Get(ctx, key, cur); err != nil {
			t.Fatal(err)
		}
		if cur.Labels == nil {
			cur.Labels = map[string]string{}
		}
		if next == "" {
			delete(cur.Labels, labels.Environment)
		} else {
			cur.Labels[labels.Environment] = next
		}
		if err := c.Update(ctx, cur); err != nil {
			t.Fatal(err)
		}
		if err := attackPass(t, inst, key); err != nil {
			t.Fatalf("pass after relabelling to %q: %v", next, err)
		}
		got := &corev1.ConfigMap{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "team", Name: "a"}, got); err != nil {
			t.Fatalf("after relabelling to %q the child is gone: %v", next, err)
		}
		want := next
		if want == "" {
			want = "prod"
		}
		if got.UID != uid || got.Labels[labels.Environment] != want {
			t.Fatalf("after relabelling to %q: child UID %s (was %s), environment %q", next, got.UID, uid, got.Labels[labels.Environment])
		}
	}
}

// TestAdversarialForgedChildInAnotherNamespaceCannotBlockOwnerDeletion: a tenant
// in namespace "tenant" who learned the UID of widget victim/w creates, in
// their own namespace, a ConfigMap marked as w's child (the owner labels
// naming victim/w, or only a controller owner reference with w's UID, which
// no Kubernetes owner reference can mean across namespaces) and holds it
// with a finalizer of their own. Safe behaviour: deleting victim/w still
// completes (its finalizer goes once its real children are gone); the
// tenant's object in another namespace cannot hold the victim's deletion.
func TestAdversarialForgedChildInAnotherNamespaceCannotBlockOwnerDeletion(t *testing.T) {
	for _, tc := range []struct {
		name string
		mark func(cm *corev1.ConfigMap, w *widgetv1.Widget)
	}{
		{"owner labels", func(cm *corev1.ConfigMap, w *widgetv1.Widget) {
			cm.Labels = map[string]string{labels.OwnerUID: string(w.UID), labels.OwnerKind: "Widget",
				labels.OwnerNamespace: w.Namespace, labels.OwnerName: w.Name, labels.Environment: "prod"}
		}},
		{"controller reference and owner-uid label only", func(cm *corev1.ConfigMap, w *widgetv1.Widget) {
			cm.Labels = map[string]string{labels.OwnerUID: string(w.UID)}
			yes := true
			cm.OwnerReferences = []metav1.OwnerReference{{APIVersion: widgetv1.GroupVersion.String(), Kind: "Widget",
				Name: w.Name, UID: w.UID, Controller: &yes}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			w := attackWidget("victim", "w", "prod", "a")
			forged := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "hold",
				Finalizers: []string{"tenant.example/hold"}}}
			tc.mark(forged, w)
			c := attackFake(t, w, forged)
			key := client.ObjectKeyFromObject(w)
			prod := attackInstance(c, "widget", "prod")
			if err := attackPass(t, prod, key); err != nil {
				t.Fatal(err)
			}
			cur := &widgetv1.Widget{}
			if err := c.Get(ctx, key, cur); err != nil {
				t.Fatal(err)
			}
			if !controllerutil.ContainsFinalizer(cur, labels.Finalizer) {
				t.Fatal("precondition: no finalizer after the first pass")
			}
			if err := c.Delete(ctx, cur); err != nil {
				t.Fatal(err)
			}
			var lastErr error
			for i := 0; i < 5; i++ {
				lastErr = attackPass(t, prod, key)
			}
			err := c.Get(ctx, key, &widgetv1.Widget{})
			if !apierrors.IsNotFound(err) {
				held := &corev1.ConfigMap{}
				_ = c.Get(ctx, client.ObjectKeyFromObject(forged), held)
				t.Fatalf("victim/w is still not deleted after 5 passes (get: %v); last pass: %v; the tenant's %s/%s (deletionTimestamp %v, finalizers %v) holds it",
					err, lastErr, held.Namespace, held.Name, held.DeletionTimestamp, held.Finalizers)
			}
		})
	}
}
