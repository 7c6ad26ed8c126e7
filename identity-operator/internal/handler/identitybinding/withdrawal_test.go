package identitybinding_test

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/janitor"
	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/common/scoped"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/handler/identitybinding"
	"github.com/trustplane/trustplane/identity-operator/internal/output"
)

// leftoverClusterSPIFFEID creates a ClusterSPIFFEID owned by b, as an
// operator started with --output=clusterspiffeid would have left it while b
// was labelled with environment environment.
func leftoverClusterSPIFFEID(t *testing.T, b *v1alpha1.IdentityBinding, environment string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"spiffeIDTemplate": "spiffe://example.org/ns/" + b.Namespace + "/sa/serving/old",
	}}}
	u.SetGroupVersionKind(output.ClusterSPIFFEIDGVK())
	u.SetName(output.Name(b.Namespace, b.Name))
	u.SetLabels(map[string]string{
		labels.OwnerUID: string(b.UID), labels.OwnerKind: "IdentityBinding", labels.OwnerName: b.Name,
		labels.OwnerNamespace: b.Namespace, labels.Environment: environment,
	})
	if err := cp.Client.Create(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	return u
}

// TestWithdrawalCoversOutputKindsNoLongerConfigured: the operator now writes
// only SpiffeEntries, but a ClusterSPIFFEID of an earlier --output is still
// there. A failing binding, a Ready one and a deleted one lose it all the
// same.
func TestWithdrawalCoversOutputKindsNoLongerConfigured(t *testing.T) {
	g := NewWithT(t)
	c := cachedClient(t)
	h, err := identitybinding.New(c, identitybinding.Options{
		TrustDomain: td, ParentID: "spiffe://example.org/nodes", WithdrawalRetry: 100 * time.Millisecond,
		Outputs:       []output.Kind{output.KindSpiffeEntry},
		ServedOutputs: []output.Kind{output.KindSpiffeEntry, output.KindClusterSPIFFEID},
	})
	g.Expect(err).NotTo(HaveOccurred())
	gone := func(u *unstructured.Unstructured) func() bool {
		return func() bool {
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(output.ClusterSPIFFEIDGVK())
			return apierrors.IsNotFound(cp.Client.Get(context.Background(), client.ObjectKeyFromObject(u), got))
		}
	}

	t.Run("a failing binding", func(t *testing.T) {
		b := createBinding(t, c, newNamespace(t))
		u := leftoverClusterSPIFFEID(t, b, env)
		b.Spec.IdentityBoundary.Variant = ""
		NewWithT(t).Eventually(func() error {
			err := reconcile(t, h, c, b)
			if !gone(u)() {
				return err
			}
			return nil
		}, 10*time.Second, 100*time.Millisecond).Should(Succeed())
		NewWithT(t).Expect(gone(u)()).To(BeTrue())
	})

	readyBinding := func(t *testing.T) *v1alpha1.IdentityBinding {
		namespace := newNamespace(t)
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "web"},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.org/app:1"}}},
				},
			},
		}
		if err := cp.Client.Create(context.Background(), d); err != nil {
			t.Fatal(err)
		}
		b := createBinding(t, c, namespace)
		b.Spec.PoolRef = v1alpha1.PoolReference{Kind: v1alpha1.DeploymentKind, Name: "web"}
		return b
	}
	readyLosesLeftover := func(t *testing.T, b *v1alpha1.IdentityBinding, u *unstructured.Unstructured) {
		NewWithT(t).Eventually(func() error {
			if err := reconcile(t, h, c, b); err != nil {
				return err
			}
			if !gone(u)() {
				return errors.New("the ClusterSPIFFEID is still there")
			}
			return nil
		}, 10*time.Second, 100*time.Millisecond).Should(Succeed())
		NewWithT(t).Expect(entriesOf(t, b)).To(Equal(1), "the configured SpiffeEntry is written")
	}

	t.Run("a Ready binding", func(t *testing.T) {
		b := readyBinding(t)
		readyLosesLeftover(t, b, leftoverClusterSPIFFEID(t, b, env))
	})

	// The janitor's cleanup sees only the binding's current environment; a
	// leftover written while the binding was labelled with another one must
	// go all the same, or it keeps selecting pods with a spec no binding
	// describes any more.
	t.Run("a Ready binding whose leftover is of the environment it was in before", func(t *testing.T) {
		b := readyBinding(t)
		readyLosesLeftover(t, b, leftoverClusterSPIFFEID(t, b, "an-earlier-environment"))
	})

	t.Run("a deleted binding", func(t *testing.T) {
		b := createBinding(t, c, newNamespace(t))
		u := leftoverClusterSPIFFEID(t, b, env)
		j, err := janitor.New(scoped.New(c, env), b, janitor.WithLiveReader(cp.Client))
		if err != nil {
			t.Fatal(err)
		}
		NewWithT(t).Eventually(func() error {
			return h.Delete(janitor.IntoContext(context.Background(), j), b)
		}, 10*time.Second, 100*time.Millisecond).Should(Succeed())
		NewWithT(t).Expect(gone(u)()).To(BeTrue())
	})
}
