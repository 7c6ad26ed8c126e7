package controller_test

import (
	"context"
	"fmt"
	"sync/atomic"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	spiffev1alpha1 "github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/output"
	"github.com/trustplane/trustplane/identity-operator/internal/pool"
)

var nsCounter atomic.Int32

func newNamespace(ctx context.Context) string {
	name := fmt.Sprintf("ib-test-%d", nsCounter.Add(1))
	Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	return name
}

func createDeployment(ctx context.Context, ns, name string, sel *metav1.LabelSelector, podLabels map[string]string) {
	createDeploymentAs(ctx, k8s, ns, name, sel, podLabels)
}

// createDeploymentAs is createDeployment written by c (a platform client
// for a pod template that carries the boundary label, which the admission
// policy, once another spec installed it, allows only to its setters).
func createDeploymentAs(ctx context.Context, c client.Client, ns, name string, sel *metav1.LabelSelector, podLabels map[string]string) {
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Selector: sel,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.org/app:1"}}},
			},
		},
	}
	Expect(c.Create(ctx, d)).To(Succeed())
}

func inferencePool(ns, name string, matchLabels map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"selector":          map[string]any{"matchLabels": matchLabels},
			"targetPorts":       []any{map[string]any{"number": int64(8000)}},
			"endpointPickerRef": map[string]any{"name": "epp", "port": map[string]any{"number": int64(9002)}},
		},
	}}
	u.SetGroupVersionKind(pool.InferencePoolGVK())
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

type bindingOpt func(*v1alpha1.IdentityBinding)

func withPool(group, kind, name string) bindingOpt {
	return func(b *v1alpha1.IdentityBinding) {
		b.Spec.PoolRef = v1alpha1.PoolReference{Group: group, Kind: kind, Name: name}
	}
}

func withTemplate(t string) bindingOpt {
	return func(b *v1alpha1.IdentityBinding) { b.Spec.SPIFFEIDPathTemplate = t }
}

func createBinding(ctx context.Context, ns, name, sa, variant string, opts ...bindingOpt) *v1alpha1.IdentityBinding {
	b := &v1alpha1.IdentityBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.IdentityBindingSpec{
			PoolRef:            v1alpha1.PoolReference{Kind: v1alpha1.DeploymentKind, Name: "web"},
			ServiceAccountName: sa,
			IdentityBoundary:   v1alpha1.IdentityBoundary{Variant: variant},
		},
	}
	for _, o := range opts {
		o(b)
	}
	Expect(k8s.Create(ctx, b)).To(Succeed())
	return b
}

func getBinding(ctx context.Context, ns, name string) func(Gomega) *v1alpha1.IdentityBinding {
	return func(g Gomega) *v1alpha1.IdentityBinding {
		b := &v1alpha1.IdentityBinding{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, b)).To(Succeed())
		return b
	}
}

// readyReason returns "True" for a Ready binding of the current generation,
// else the Ready=False reason.
func readyReason(ctx context.Context, ns, name string) func(Gomega) string {
	return func(g Gomega) string { return readyReasonOf(getBinding(ctx, ns, name)(g)) }
}

// readyReasonOf is "True" for a Ready binding of its current generation,
// else the Ready=False reason ("<pending>" before the generation is seen).
func readyReasonOf(b *v1alpha1.IdentityBinding) string {
	c := meta.FindStatusCondition(b.Status.Conditions, "Ready")
	if c == nil || c.ObservedGeneration != b.Generation {
		return "<pending>"
	}
	if c.Status == metav1.ConditionTrue {
		return "True"
	}
	return c.Reason
}

// failures returns the failure conditions of a binding as type=reason.
func failures(b *v1alpha1.IdentityBinding) []string {
	var out []string
	for _, c := range b.Status.Conditions {
		switch c.Type {
		case v1alpha1.ConditionInvalidRef, v1alpha1.ConditionUnsafeSelector, v1alpha1.ConditionConflict, v1alpha1.ConditionRenderFailure:
			out = append(out, c.Type+"="+c.Reason)
		}
	}
	return out
}

func entryExists(ctx context.Context, ns, name string) func() bool {
	return func() bool {
		err := k8s.Get(ctx, client.ObjectKey{Name: output.Name(ns, name)}, &spiffev1alpha1.SpiffeEntry{})
		return !apierrors.IsNotFound(err)
	}
}

func clusterSPIFFEIDExists(ctx context.Context, ns, name string) func() bool {
	return func() bool {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(output.ClusterSPIFFEIDGVK())
		err := k8s.Get(ctx, client.ObjectKey{Name: output.Name(ns, name)}, u)
		return !apierrors.IsNotFound(err)
	}
}

func getEntry(ctx context.Context, ns, name string) func(Gomega) *spiffev1alpha1.SpiffeEntry {
	return func(g Gomega) *spiffev1alpha1.SpiffeEntry {
		e := &spiffev1alpha1.SpiffeEntry{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Name: output.Name(ns, name)}, e)).To(Succeed())
		return e
	}
}

func webSelector(app string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
}

func appsGVK(kind string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: kind}
}

// deleteBinding deletes a binding and waits until it is gone, that is until
// its finalizer has run.
func deleteBinding(ctx context.Context, ns, name string) {
	Expect(k8s.Delete(ctx, getBinding(ctx, ns, name)(Default))).To(Succeed())
	Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &v1alpha1.IdentityBinding{}))
	}).Should(BeTrue(), "binding %s/%s still exists", ns, name)
}

// readyWebBinding creates a namespace with the Deployment "web" and a
// binding "web" to it (service account serving, variant v1), waits until it
// is Ready and returns the namespace and binding name.
func readyWebBinding(ctx context.Context) (string, string) {
	ns := newNamespace(ctx)
	createDeployment(ctx, ns, "web", webSelector("web"), map[string]string{"app": "web"})
	b := createBinding(ctx, ns, "web", "serving", "v1")
	Eventually(readyReason(ctx, ns, b.Name)).Should(Equal("True"))
	Expect(entryExists(ctx, ns, b.Name)()).To(BeTrue())
	return ns, b.Name
}
