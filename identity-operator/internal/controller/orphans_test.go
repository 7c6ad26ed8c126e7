package controller_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/labels"
	spiffev1alpha1 "github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"

	"github.com/trustplane/trustplane/identity-operator/internal/output"
)

func ownerLabelsOf(ns, name, uid string) map[string]string {
	return map[string]string{labels.OwnerKind: "IdentityBinding", labels.OwnerNamespace: ns, labels.OwnerName: name,
		labels.OwnerUID: uid, labels.Environment: environment}
}

func orphanEntry(name string, l map[string]string) *spiffev1alpha1.SpiffeEntry {
	return &spiffev1alpha1.SpiffeEntry{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l},
		Spec:       spiffev1alpha1.SpiffeEntrySpec{SpiffeID: "spiffe://example.org/ns/x/sa/y/z", ParentID: parentID, Selectors: []string{"k8s:ns:x"}},
	}
}

func gone(ctx context.Context, obj client.Object) func() bool {
	return func() bool {
		got := obj.DeepCopyObject().(client.Object)
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(obj), got))
	}
}

var _ = Describe("Outputs whose binding is gone", func() {
	It("are swept, of every served kind; outputs of live bindings and foreign objects stay", func(ctx context.Context) {
		ns, name := readyWebBinding(ctx)
		live := getBinding(ctx, ns, name)(Default)

		By("a binding deleted behind the operator's back, and an output of an earlier binding of the same name")
		deleted := orphanEntry("orphan-"+ns, ownerLabelsOf(ns, "gone", "uid-of-a-deleted-binding"))
		earlier := orphanEntry("earlier-"+ns, ownerLabelsOf(ns, name, "uid-of-an-earlier-binding"))
		csid := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"spiffeIDTemplate": "spiffe://example.org/ns/x/sa/y/z"}}}
		csid.SetGroupVersionKind(output.ClusterSPIFFEIDGVK())
		csid.SetName("orphan-" + ns)
		csid.SetLabels(ownerLabelsOf(ns, "gone", "uid-of-a-deleted-binding"))
		foreignEntry := orphanEntry("foreign-"+ns, map[string]string{labels.OwnerUID: "uid-of-a-deleted-binding", labels.OwnerName: "gone", labels.OwnerNamespace: ns})
		for _, o := range []client.Object{deleted, earlier, csid, foreignEntry} {
			Expect(k8s.Create(ctx, o)).To(Succeed())
		}
		for _, o := range []client.Object{deleted, earlier, csid} {
			Eventually(gone(ctx, o)).Should(BeTrue(), "%s was not swept", o.GetName())
		}
		Consistently(func(g Gomega) {
			g.Expect(gone(ctx, foreignEntry)()).To(BeFalse(), "an object without the owner-kind label is not the operator's")
			g.Expect(entryExists(ctx, ns, name)()).To(BeTrue())
			g.Expect(getBinding(ctx, ns, name)(g).UID).To(Equal(live.UID))
		}, time.Second, 100*time.Millisecond).Should(Succeed())
		Expect(k8s.Delete(ctx, foreignEntry)).To(Succeed())
	}, SpecTimeout(time.Minute))

	It("never include a live binding's outputs because another object names its UID under another namespace and name", func(ctx context.Context) {
		ns, name := readyWebBinding(ctx)
		live := getBinding(ctx, ns, name)(Default)
		real := getEntry(ctx, ns, name)(Default)

		By("an object labelled with the live binding's UID, under a namespace and name where no binding exists")
		// A ClusterSPIFFEID, the kind listed last, named to come after the
		// real output, so that a sweep keying the owner by UID meets the
		// forged labels last.
		forged := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"spiffeIDTemplate": "spiffe://example.org/ns/x/sa/y/z"}}}
		forged.SetGroupVersionKind(output.ClusterSPIFFEIDGVK())
		forged.SetName("zz-forged-" + ns)
		forged.SetLabels(ownerLabelsOf(ns+"-attacker", "nobody", string(live.UID)))
		Expect(k8s.Create(ctx, forged)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { _ = k8s.Delete(ctx, forged) })
		Consistently(func(g Gomega) {
			e := getEntry(ctx, ns, name)(g)
			g.Expect(e.UID).To(Equal(real.UID), "the live binding's SpiffeEntry was deleted (and written again)")
			g.Expect(gone(ctx, forged)()).To(BeFalse(), "the forged object names a live UID: it is no orphan to sweep")
		}, 2*time.Second, 100*time.Millisecond).Should(Succeed(), "several sweeps (every 300ms in this suite)")
	}, SpecTimeout(time.Minute))
})
