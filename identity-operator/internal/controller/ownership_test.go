package controller_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/labels"
	spiffev1alpha1 "github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/output"
)

var _ = Describe("Ownership: an object the operator did not create is never adopted, changed or deleted", func() {
	It("reports ManagedOutputApplyFailed and leaves the foreign SpiffeEntry alone", func(ctx context.Context) {
		ns := newNamespace(ctx)
		createDeployment(ctx, ns, "web", webSelector("web"), map[string]string{"app": "web"})
		foreign := &spiffev1alpha1.SpiffeEntry{
			ObjectMeta: metav1.ObjectMeta{Name: output.Name(ns, "web"), Labels: map[string]string{labels.Environment: environment, "team": "someone-else"}},
			Spec: spiffev1alpha1.SpiffeEntrySpec{
				SpiffeID:  "spiffe://example.org/someone/else",
				ParentID:  parentID,
				Selectors: []string{"k8s:ns:elsewhere"},
			},
		}
		Expect(k8s.Create(ctx, foreign)).To(Succeed())
		rv := foreign.ResourceVersion

		b := createBinding(ctx, ns, "web", "serving", "v1")
		Eventually(readyReason(ctx, ns, b.Name)).Should(Equal(v1alpha1.ReasonManagedOutputApplyFailed))
		Expect(failures(getBinding(ctx, ns, b.Name)(Default))).To(Equal([]string{"RenderFailure=ManagedOutputApplyFailed"}))
		staysUntouched(ctx, foreign, rv)

		By("deleting the binding does not delete the foreign object either")
		deleteBinding(ctx, ns, b.Name)
		Expect(resourceVersion(ctx, foreign)).To(Equal(rv))
	}, SpecTimeout(time.Minute))
})

var _ = Describe("Ownership across output kinds", func() {
	It("a foreign ClusterSPIFFEID stops the SpiffeEntry too, so no pass writes one kind and withdraws it", func(ctx context.Context) {
		ns := newNamespace(ctx)
		createDeployment(ctx, ns, "web", webSelector("web"), map[string]string{"app": "web"})
		foreign := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"spiffeIDTemplate": "spiffe://example.org/someone/else"}}}
		foreign.SetGroupVersionKind(output.ClusterSPIFFEIDGVK())
		foreign.SetName(output.Name(ns, "web"))
		Expect(k8s.Create(ctx, foreign)).To(Succeed())
		rv := foreign.GetResourceVersion()

		b := createBinding(ctx, ns, "web", "serving", "v1")
		Eventually(readyReason(ctx, ns, b.Name)).Should(Equal(v1alpha1.ReasonManagedOutputApplyFailed))
		Expect(failures(getBinding(ctx, ns, b.Name)(Default))).To(Equal([]string{"RenderFailure=ManagedOutputApplyFailed"}))
		Consistently(entryExists(ctx, ns, b.Name), time.Second, 100*time.Millisecond).Should(BeFalse())
		cur := &unstructured.Unstructured{}
		cur.SetGroupVersionKind(output.ClusterSPIFFEIDGVK())
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(foreign), cur)).To(Succeed())
		Expect(cur.GetResourceVersion()).To(Equal(rv))
	}, SpecTimeout(time.Minute))
})

var _ = Describe("Deletion: a deleted binding's outputs are deleted before it goes", func() {
	It("removes the SpiffeEntry and ClusterSPIFFEID, then the binding", func(ctx context.Context) {
		ns, name := readyWebBinding(ctx)
		Expect(clusterSPIFFEIDExists(ctx, ns, name)()).To(BeTrue())

		deleteBinding(ctx, ns, name)
		Expect(entryExists(ctx, ns, name)()).To(BeFalse())
		Expect(clusterSPIFFEIDExists(ctx, ns, name)()).To(BeFalse())
	}, SpecTimeout(time.Minute))
})

var _ = Describe("Ownership by copied labels", func() {
	It("an object of the output's name that copies the binding's owner-uid label without its kind is never adopted, changed or deleted", func(ctx context.Context) {
		ns := newNamespace(ctx)
		// The Deployment comes only once the copy exists: until then the
		// binding writes no output, so the object is in place first.
		b := createBinding(ctx, ns, "web", "serving", "v1")
		Eventually(readyReason(ctx, ns, b.Name)).Should(Equal(v1alpha1.ReasonTargetPoolNotFound))
		copied := &spiffev1alpha1.SpiffeEntry{
			ObjectMeta: metav1.ObjectMeta{Name: output.Name(ns, b.Name), Labels: map[string]string{
				labels.Environment: environment, labels.OwnerUID: string(b.UID),
				labels.OwnerName: b.Name, labels.OwnerNamespace: ns,
			}},
			Spec: spiffev1alpha1.SpiffeEntrySpec{SpiffeID: "spiffe://example.org/someone/else", ParentID: parentID, Selectors: []string{"k8s:ns:elsewhere"}},
		}
		Expect(k8s.Create(ctx, copied)).To(Succeed())
		rv := copied.ResourceVersion
		createDeployment(ctx, ns, "web", webSelector("web"), map[string]string{"app": "web"})

		Eventually(readyReason(ctx, ns, b.Name)).Should(Equal(v1alpha1.ReasonManagedOutputApplyFailed))
		staysUntouched(ctx, copied, rv)

		By("deleting the binding leaves it too")
		deleteBinding(ctx, ns, b.Name)
		Expect(resourceVersion(ctx, copied)).To(Equal(rv))
		Expect(k8s.Delete(ctx, copied)).To(Succeed())
	}, SpecTimeout(time.Minute))
})

// resourceVersion reads obj's current resourceVersion.
func resourceVersion(ctx context.Context, obj client.Object) string {
	cur := obj.DeepCopyObject().(client.Object)
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), cur)).To(Succeed())
	return cur.GetResourceVersion()
}

// staysUntouched checks that obj keeps resourceVersion rv for two seconds
// of passes.
func staysUntouched(ctx context.Context, obj client.Object, rv string) {
	Consistently(func(g Gomega) string {
		cur := obj.DeepCopyObject().(client.Object)
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), cur)).To(Succeed())
		return cur.GetResourceVersion()
	}, 2*time.Second, 200*time.Millisecond).Should(Equal(rv))
}
