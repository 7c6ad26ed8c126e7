package operator_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/operator"
)

// Instances given their environments (--environments) share a
// cluster, a SPIRE server and an entry-ID prefix, and each reconciles only
// its environments' objects. The docs say a fallback policy yields only to
// another policy "taken by the same instance". Whoever may create a
// SpiffeRegistration of another environment (the team of that
// environment, or anyone leaving an object in an environment no instance
// runs) writes one that selects the fallback's namespaces. That policy is
// never reconciled by this instance (it registers nothing here), yet the
// fallback policy of this instance yields the workloads to it and deletes
// their entries: the workloads of environment "test" lose their identity
// because of an object of environment "other", while the fallback reports
// Ready. Now a fallback yields only to policies this instance reconciles
// (config.Config.ReconcilesObject).
var _ = Describe("A fallback policy and a policy of another environment", func() {
	It("keeps registering a workload that only a policy of an environment the instance does not take selects", func() {
		stopOperator()
		_, stopOwn := launch(operatorConfig, func(o *operator.Options) { o.Config.Environments = []string{"test"} })
		DeferCleanup(func() {
			stopOwn()
			startOperator()
		})

		namespace("fbenv-a", map[string]string{"test": "fbenv"})
		deployment("fbenv-a", "web", "web", map[string]string{"app": "web"})
		fb := policyFor("fbenv", func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.Fallback = true
			s.SpiffeIDTemplate = "fallback/ns/{namespace}/sa/{serviceAccount}"
		})
		fb.Labels = map[string]string{labels.Environment: "test"}
		Expect(k8s.Create(ctx, fb)).To(Succeed())
		Eventually(paths(parentOf("fbenv"))).Should(Equal([]string{"/fallback/ns/fbenv-a/sa/web"}))

		// A policy of environment "other", which no running instance takes.
		other := policyFor("fbenv-other", func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.NamespaceSelector.MatchLabels["test"] = "fbenv"
		})
		other.Labels = map[string]string{labels.Environment: "other"}
		Expect(k8s.Create(ctx, other)).To(Succeed())

		// This instance never takes it: no finalizer, no entry.
		Consistently(func() []string {
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(other), other)).To(Succeed())
			return other.Finalizers
		}, time.Second).Should(BeEmpty())

		// The fallback's entry for web must stay: nothing this instance
		// runs registers web otherwise.
		Consistently(paths(parentOf("fbenv")), 2*resync).Should(Equal([]string{"/fallback/ns/fbenv-a/sa/web"}),
			"the fallback policy yielded web to a policy of an environment no running instance takes")
		Expect(entriesUnder(parentOf("fbenv-other"))).To(BeEmpty())

		Expect(k8s.Delete(ctx, other)).To(Succeed())
		Expect(k8s.Delete(ctx, fb)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(fb), &v1alpha1.SpiffeRegistration{}))
		}).Should(BeTrue())
	})
})
