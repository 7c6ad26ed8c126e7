package operator_test

import (
	"time"

	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/spiffe-operator/internal/handler/spiffefederation"
	"github.com/trustplane/trustplane/spiffe-operator/internal/operator"
)

// entryIDsAt returns the IDs of the entries under parent.
func entryIDsAt(parent string) func() []string {
	return func() []string {
		var out []string
		for _, e := range entriesUnder(parent) {
			out = append(out, e.Id)
		}
		return out
	}
}

var _ = Describe("Classes of instances", func() {
	It("let each instance take only the policies and entries of its class, and the classless ones only "+
		"the classless instance or one told to watch them", func() {
		namespace("class-a", map[string]string{"test": "class"})
		deployment("class-a", "web", "web", nil)
		blue := policyFor("class", func(s *v1alpha1.SpiffeRegistrationSpec) { s.ClassName = "blue" })
		Expect(k8s.Create(ctx, blue)).To(Succeed())
		blueEntry := &v1alpha1.SpiffeEntry{Spec: v1alpha1.SpiffeEntrySpec{ClassName: "blue",
			SpiffeID: "spiffe://example.org/vm/class-blue", ParentID: parentOf("class-entry"), Selectors: []string{"unix:uid:1000"}}}
		blueEntry.Name = "class-blue"
		Expect(k8s.Create(ctx, blueEntry)).To(Succeed())
		// The suite's instance has no class: it never touches them.
		Consistently(func() []string {
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(blue), blue)).To(Succeed())
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(blueEntry), blueEntry)).To(Succeed())
			return append(append(paths(parentOf("class"))(), paths(parentOf("class-entry"))()...),
				append(blue.Finalizers, blueEntry.Finalizers...)...)
		}, resync).Should(BeEmpty())

		// The blue instance takes them, under its own prefix; and, not told
		// to watch classless objects, leaves the classless policy alone.
		classless := policyFor("class-none", func(s *v1alpha1.SpiffeRegistrationSpec) {
			s.NamespaceSelector.MatchLabels["test"] = "class"
		})
		Expect(k8s.Create(ctx, classless)).To(Succeed())
		_, stopBlue := launch(cp.Config, func(o *operator.Options) { o.ClassName, o.EntryIDPrefix = "blue", "blue." })
		defer stopBlue()
		Eventually(entryIDsAt(parentOf("class"))).Should(ConsistOf(HavePrefix("blue.")))
		Eventually(entryIDsAt(parentOf("class-entry"))).Should(ConsistOf(HavePrefix("blue.")))
		Eventually(policyReady(blue)).Should(Equal("True/Ready"))
		Eventually(entryIDsAt(parentOf("class-none"))).Should(HaveLen(1))
		Consistently(entryIDsAt(parentOf("class-none")), resync).Should(ConsistOf(Not(HavePrefix("blue."))))

		// The class cannot be changed to move a policy between instances.
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(blue), blue)).To(Succeed())
		patch := client.MergeFrom(blue.DeepCopy())
		blue.Spec.ClassName = "green"
		Expect(k8s.Patch(ctx, blue, patch)).To(MatchError(ContainSubstring("className is immutable")))
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(classless), classless)).To(Succeed())
		patch = client.MergeFrom(classless.DeepCopy())
		classless.Spec.ClassName = "blue"
		Expect(k8s.Patch(ctx, classless, patch)).To(MatchError(ContainSubstring("className is immutable")))

		// Deleted, the blue policy's entries go through the blue instance.
		Expect(k8s.Delete(ctx, blue)).To(Succeed())
		Eventually(paths(parentOf("class"))).Should(BeEmpty())
	})

	It("let an instance told to watch classless objects take them too", func() {
		namespace("class-wc", map[string]string{"test": "class-wc"})
		deployment("class-wc", "web", "web", nil)
		p := policyFor("class-wc", nil)
		// With the classless instance down, so that one instance alone acts.
		whileOperatorDown(func() {
			_, stopGreen := launch(cp.Config, func(o *operator.Options) {
				o.ClassName, o.WatchClassless, o.EntryIDPrefix = "green", true, "green."
			})
			defer stopGreen()
			Expect(k8s.Create(ctx, p)).To(Succeed())
			Eventually(entryIDsAt(parentOf("class-wc"))).Should(ConsistOf(HavePrefix("green.")))
			Expect(k8s.Delete(ctx, p)).To(Succeed())
			Eventually(func() error { return k8s.Get(ctx, client.ObjectKeyFromObject(p), p) }).Should(MatchError(ContainSubstring("not found")))
			Expect(entryIDsAt(parentOf("class-wc"))()).To(BeEmpty())
		})
	})
})

var _ = Describe("Classes of instances with leader election", func() {
	It("elect a leader per class, so that instances of two classes in one namespace both run", func() {
		namespace("class-le", map[string]string{"test": "class-le"})
		deployment("class-le", "web", "web", nil)
		byClass := map[string]*v1alpha1.SpiffeRegistration{}
		for _, c := range []string{"blue", "green"} {
			p := policyFor("class-le-"+c, func(s *v1alpha1.SpiffeRegistrationSpec) {
				s.ClassName = c
				s.NamespaceSelector.MatchLabels["test"] = "class-le"
			})
			Expect(k8s.Create(ctx, p)).To(Succeed())
			byClass[c] = p
			DeferCleanup(func() {
				Expect(client.IgnoreNotFound(k8s.Delete(ctx, p))).To(Succeed())
			})
		}
		for _, c := range []string{"blue", "green"} {
			instance, stop := launch(cp.Config, func(o *operator.Options) {
				o.ClassName, o.EntryIDPrefix = c, c+"."
				o.Manager.LeaderElect = true
				o.Manager.LeaderElectionNamespace = "default"
			})
			DeferCleanup(stop)
			Eventually(instance.Manager.Elected(), 30*time.Second).Should(BeClosed(), "the %s instance never led", c)
		}
		for c, p := range byClass {
			Eventually(policyReady(p)).Should(Equal("True/Ready"), c)
			Eventually(entryIDsAt(parentOf("class-le-" + c))).Should(ConsistOf(HavePrefix(c + ".")))
		}
		for c, p := range byClass {
			Expect(k8s.Delete(ctx, p)).To(Succeed())
			Eventually(gone(p)).Should(BeTrue(), c)
		}
	})
})

var _ = Describe("Classes of instances and SpiffeFederations", func() {
	It("let only the instance of the object's class take it, and only objects of one class compete for a trust domain", func() {
		blue := federation("classfed-blue", "classfed.test", func(s *v1alpha1.SpiffeFederationSpec) { s.ClassName = "blue" })
		Expect(k8s.Create(ctx, blue)).To(Succeed())
		// The suite's classless instance never touches it.
		Consistently(func() string {
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(blue), blue)).To(Succeed())
			return endpointOf("classfed.test")() + strings.Join(blue.Finalizers, ",")
		}, resync).Should(BeEmpty())

		// A younger classless object for the same trust domain does not
		// wait for the blue one: they belong to different SPIRE servers.
		none := federation("classfed-none", "classfed.test", nil)
		Expect(k8s.Create(ctx, none)).To(Succeed())
		Eventually(federationReady(none)).Should(Equal("True/Ready"))
		Expect(endpointOf("classfed.test")()).To(Equal(none.Spec.BundleEndpointURL))

		// The blue instance takes the blue object; here both instances
		// share one SPIRE server, so it finds the classless object's
		// relationship foreign and leaves it alone.
		_, stopBlue := launch(cp.Config, func(o *operator.Options) { o.ClassName, o.EntryIDPrefix = "blue", "blue." })
		defer stopBlue()
		Eventually(conflictOf(blue)).Should(Equal("True/" + spiffefederation.ReasonForeignRelationship))
		Consistently(endpointOf("classfed.test"), resync).Should(Equal(none.Spec.BundleEndpointURL))

		Expect(k8s.Delete(ctx, blue)).To(Succeed())
		Eventually(gone(blue)).Should(BeTrue())
		Expect(endpointOf("classfed.test")()).To(Equal(none.Spec.BundleEndpointURL))
		Expect(k8s.Delete(ctx, none)).To(Succeed())
		Eventually(gone(none)).Should(BeTrue())
		Expect(relationship("classfed.test")).To(BeNil())
	})
})
