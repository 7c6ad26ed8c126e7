package operator_test

import (
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
)

// Two policies render one entry; the oldest holds it, the other is masked.
// The holder goes without its Delete pass (its finalizer removed by hand,
// then deleted, while the operator runs). The live policy's running pod
// must keep an entry: the holder's entry until orphan collection deletes
// it, then the live policy's, handed over in the same call. Before, the
// gone policy's claim stayed in memory and kept the live one masked after
// its entry was collected, until the operator restarted.
var _ = Describe("A holder gone without its Delete pass", func() {
	It("must not leave the next policy's running pod without an entry", func() {
		namespace("ghost-a", map[string]string{"test": "ghost"})
		deployment("ghost-a", "web", "web", nil)
		pod("ghost-a", "web-1", "web", map[string]string{"app": "web"})
		sameParent := func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.ParentID = parentOf("ghost")
			s.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"test": "ghost"}}
		}
		var winner, loser *v1alpha1.SpiffeRegistration
		ghosted := false
		for try := 0; try < 5 && !ghosted; try++ {
			first := policyFor(fmt.Sprintf("ghost-first-%d", try), sameParent)
			Expect(k8s.Create(ctx, first)).To(Succeed())
			Eventually(policyReady(first)).Should(Equal("True/Ready"))
			second := policyFor(fmt.Sprintf("ghost-second-%d", try), sameParent)
			Expect(k8s.Create(ctx, second)).To(Succeed())
			winner, loser = first, second
			if second.CreationTimestamp.Equal(&first.CreationTimestamp) && second.UID < first.UID {
				winner, loser = second, first
			}
			Eventually(func() int32 { _ = policyReady(loser)(); return loser.Status.EntriesMasked }).Should(Equal(int32(1)))
			Eventually(func() string {
				l := entriesUnder(parentOf("ghost"))
				if len(l) != 1 {
					return ""
				}
				return l[0].Id
			}).Should(ContainSubstring(entries.OwnerTag(winner.UID)))

			// The holder's finalizer is removed by hand, and the object is
			// deleted at that very resourceVersion (so a finalizer the
			// operator added back in between makes the delete fail instead).
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(winner), winner)).To(Succeed())
			patch := client.MergeFrom(winner.DeepCopy())
			winner.Finalizers = nil
			Expect(k8s.Patch(ctx, winner, patch)).To(Succeed())
			rv := winner.ResourceVersion
			err := k8s.Delete(ctx, winner, client.Preconditions{ResourceVersion: &rv})
			if err == nil {
				ghosted = true
				break
			}
			// The operator re-added its finalizer first: clean up, try again.
			Expect(apierrors.IsConflict(err)).To(BeTrue(), "delete: %v", err)
			Expect(k8s.Delete(ctx, winner)).To(Succeed())
			Expect(k8s.Delete(ctx, loser)).To(Succeed())
			Eventually(func() int { return len(entriesUnder(parentOf("ghost"))) }).Should(BeZero())
		}
		Expect(ghosted).To(BeTrue(), "could not remove the finalizer without the operator adding it back")
		Eventually(func() bool { return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(winner), winner)) }).Should(BeTrue())

		// The holder's entry is an orphan now and goes at the next read of
		// the parent (resync); the live policy must then hold the entry.
		loserTag := entries.OwnerTag(loser.UID)
		Eventually(func() string {
			var ids []string
			for _, e := range entriesUnder(parentOf("ghost")) {
				ids = append(ids, e.Id)
			}
			return strings.Join(ids, ",")
		}, 6*resync).Should(ContainSubstring(loserTag),
			"the live policy %s wants the entry its running pod ghost-a/web-1 matches; its holder is gone, yet no entry holds it", loser.Name)
	})
})
