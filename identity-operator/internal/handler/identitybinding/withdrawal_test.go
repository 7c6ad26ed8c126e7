package identitybinding_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
// operator started with --output=clusterspiffeid would have left it.
func leftoverClusterSPIFFEID(t *testing.T, b *v1alpha1.IdentityBinding) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"spiffeIDTemplate": "spiffe://example.org/ns/" + b.Namespace + "/sa/serving/old",
	}}}
	u.SetGroupVersionKind(output.ClusterSPIFFEIDGVK())
	u.SetName(output.Name(b.Namespace, b.Name))
	u.SetLabels(map[string]string{
		labels.OwnerUID: string(b.UID), labels.OwnerKind: "IdentityBinding", labels.OwnerName: b.Name,
		labels.OwnerNamespace: b.Namespace, labels.Environment: env,
	})
	if err := cp.Client.Create(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	return u
}

// TestWithdrawalCoversOutputKindsNoLongerConfigured: the operator now writes
// only SpiffeEntries, but a ClusterSPIFFEID of an earlier --output is still
// there. A failing binding and a deleted one lose it all the same.
func TestWithdrawalCoversOutputKindsNoLongerConfigured(t *testing.T) {
	g := NewWithT(t)
	c := cachedClient(t)
	h, err := identitybinding.New(c, cp.Client, identitybinding.Options{
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
		u := leftoverClusterSPIFFEID(t, b)
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

	t.Run("a deleted binding", func(t *testing.T) {
		b := createBinding(t, c, newNamespace(t))
		u := leftoverClusterSPIFFEID(t, b)
		j, err := janitor.New(scoped.New(c, env), b)
		if err != nil {
			t.Fatal(err)
		}
		NewWithT(t).Eventually(func() error {
			return h.Delete(janitor.IntoContext(context.Background(), j), b)
		}, 10*time.Second, 100*time.Millisecond).Should(Succeed())
		NewWithT(t).Expect(gone(u)()).To(BeTrue())
	})
}
