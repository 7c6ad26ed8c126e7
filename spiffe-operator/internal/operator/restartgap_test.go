package operator_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/entries"
	"github.com/trustplane/trustplane/spiffe-operator/internal/operator"
	"github.com/trustplane/trustplane/spiffe-operator/internal/spire"
)

// Two policies render one entry: the older holds it, the younger is
// masked, and a running pod matches it. The holder is deleted while the
// operator is down. After the restart both are in the startup queue, the
// holder first, with other policies between them whose first passes write
// to SPIRE. The new process must not delete the holder's entry before the
// younger policy has had its first pass: its pod would have no entry while
// the passes between them ran. The entry goes when the holder's deletion
// hands it over, and no other write falls while the key has no entry.
//
// The spec runs its own instance of a class of its own, one worker per
// controller, so that only its objects write through the instance and the
// queue runs them in the order of their names.
var _ = Describe("A holder deleted while the operator is down", func() {
	It("keeps its entry until the policy that wants it next has had its first pass, then hands it over", func() {
		const class, shared, fillers = "rgap", "rgap-shared", 12
		namespace("rgap-a", map[string]string{"test": "rgap"})
		deployment("rgap-a", "web", "web", nil)
		pod("rgap-a", "web-1", "web", map[string]string{"app": "web"})
		inClass := func(parent string) func(*v1alpha1.SpiffeRegistrationSpec) {
			return func(s *v1alpha1.SpiffeRegistrationSpec) {
				s.ClassName, s.ParentID = class, parentOf(parent)
				s.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"test": "rgap"}}
			}
		}
		holder := policyFor("rgap-a-holder", inClass(shared))
		Expect(k8s.Create(ctx, holder)).To(Succeed())
		var between []*v1alpha1.SpiffeRegistration
		for i := range fillers {
			p := policyFor(fmt.Sprintf("rgap-m-%02d", i), inClass(fmt.Sprintf("rgap-filler-%02d", i)))
			Expect(k8s.Create(ctx, p)).To(Succeed())
			between = append(between, p)
		}
		// Created after the holder, in a later second, so that it is younger.
		Eventually(func() time.Duration { return time.Since(holder.CreationTimestamp.Time) }).Should(BeNumerically(">", time.Second))
		next := policyFor("rgap-z-next", inClass(shared))
		Expect(k8s.Create(ctx, next)).To(Succeed())
		DeferCleanup(func() {
			for _, p := range append(between, next, holder) {
				_ = k8s.Delete(ctx, p)
			}
		})

		launchInClass := func(guard spire.WriteGuard) func() {
			_, stop := launch(cp.Config, func(o *operator.Options) {
				o.ClassName, o.EntryIDPrefix, o.WriteGuard = class, "rgap.", guard
				o.Config.MaxConcurrentReconciles = 1
			})
			return stop
		}
		stop := launchInClass(nil)
		Eventually(entryIDsAt(parentOf(shared))).Should(ConsistOf(ContainSubstring(entries.OwnerTag(holder.UID))))
		Eventually(func() int32 { _ = policyReady(next)(); return next.Status.EntriesMasked }).Should(Equal(int32(1)))
		for _, p := range between {
			Eventually(policyReady(p)).Should(Equal("True/Ready"), p.Name)
		}
		stop()

		By("while the operator is down: the holder is deleted, and the policies between change")
		Expect(k8s.Delete(ctx, holder)).To(Succeed())
		for _, p := range between {
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
			patch := client.MergeFrom(p.DeepCopy())
			p.Spec.X509SVIDTTL = &metav1.Duration{Duration: 2 * time.Hour}
			Expect(k8s.Patch(ctx, p, patch)).To(Succeed())
		}

		By("restarting: every SPIRE write notes whether the shared key had an entry then")
		var (
			mu               sync.Mutex
			writes, withNone int
		)
		sharedParent := spiffeid.RequireFromString(parentOf(shared))
		stop = launchInClass(func() (time.Time, error) {
			l, err := spireAPI.ListByParent(context.Background(), sharedParent)
			mu.Lock()
			defer mu.Unlock()
			writes++
			if err == nil && len(l) == 0 {
				withNone++
			}
			return time.Now().Add(time.Minute), nil
		})
		defer stop()
		Eventually(func() bool { return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(holder), holder)) }).
			Should(BeTrue(), "the holder's deletion did not complete")
		Eventually(entryIDsAt(parentOf(shared))).Should(ConsistOf(ContainSubstring(entries.OwnerTag(next.UID))))
		for _, p := range between {
			Eventually(policyReady(p)).Should(Equal("True/Ready"), p.Name)
		}
		mu.Lock()
		defer mu.Unlock()
		Expect(writes).To(BeNumerically(">=", fillers+2), "the writes of the restart: the policies between, the hand-over")
		Expect(withNone).To(BeNumerically("<=", 1),
			"%d of the %d SPIRE writes after the restart came while the key the running pod rgap-a/web-1 needs had no entry: "+
				"the holder's entry was deleted before the policy that wants it next had its first pass", withNone, writes)
	})
})
