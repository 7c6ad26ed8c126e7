package controller_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	spiffev1alpha1 "github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/output"
)

// entryUID returns the UID of the binding's SpiffeEntry, empty when there
// is none.
func entryUID(ctx context.Context, ns, name string) func() types.UID {
	return func() types.UID {
		e := &spiffev1alpha1.SpiffeEntry{}
		if err := k8s.Get(ctx, client.ObjectKey{Name: output.Name(ns, name)}, e); err != nil {
			return ""
		}
		return e.UID
	}
}

// deletePool deletes the Deployment web of ns, as kubectl delete
// --cascade=orphan does once the garbage collector has orphaned its pods
// (this API server runs none, so the orphan finalizer would hold it).
func deletePool(ctx context.Context, ns string) {
	GinkgoHelper()
	d := &metav1.PartialObjectMetadata{}
	d.SetGroupVersionKind(appsGVK("Deployment"))
	d.SetNamespace(ns)
	d.SetName("web")
	Expect(k8s.Delete(ctx, d)).To(Succeed())
}

var _ = Describe("A pool replaced", func() {
	It("keeps a Ready binding's outputs while its pool is made again within the grace, and withdraws them once the grace has passed", func(ctx context.Context) {
		ns, name := readyWebBinding(ctx)
		uid := entryUID(ctx, ns, name)()
		Expect(uid).NotTo(BeEmpty())

		By("the Deployment is deleted, its pods orphaned: the binding reports it, and its entry stays")
		deletePool(ctx, ns)
		Eventually(readyReason(ctx, ns, name)).Should(Equal(v1alpha1.ReasonTargetPoolNotFound))
		Expect(entryUID(ctx, ns, name)()).To(Equal(uid))

		By("the Deployment is made again: Ready, with the very same entry (never deleted and made again)")
		createDeployment(ctx, ns, "web", webSelector("web"), map[string]string{"app": "web"})
		Eventually(readyReason(ctx, ns, name)).Should(Equal("True"))
		Expect(entryUID(ctx, ns, name)()).To(Equal(uid))

		By("deleted again and not made again: the outputs go once the grace has passed")
		deleted := time.Now()
		deletePool(ctx, ns)
		Eventually(entryExists(ctx, ns, name)).Should(BeFalse())
		Expect(time.Since(deleted)).To(BeNumerically(">=", poolMissingGrace), "withdrawn before the grace had passed")
		Eventually(clusterSPIFFEIDExists(ctx, ns, name)).Should(BeFalse())
		Eventually(func(g Gomega) []v1alpha1.OutputReference { return getBinding(ctx, ns, name)(g).Status.Outputs }).Should(BeEmpty())
		Expect(readyReason(ctx, ns, name)(Default)).To(Equal(v1alpha1.ReasonTargetPoolNotFound))
	}, SpecTimeout(time.Minute))
})
