package operator_test

import (
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"

	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

var _ = Describe("config/samples", func() {
	samples := filepath.Join("..", "..", "config", "samples")

	It("has a SpiffeRegistration sample that is admitted, becomes Ready and registers a pod under its node's agent", func() {
		namespace("sample-apps", map[string]string{"spiffe.trustplane.dev/register": "true"})
		createSA("sample-apps", "web")
		deployment("sample-apps", "web", "web", nil)
		n := createNode("sample-1")
		podOn("sample-apps", "web-1", "web", n.Name, map[string]string{"app": "web"}, nil)
		b, err := os.ReadFile(filepath.Join(samples, "spiffe_v1alpha1_spifferegistration.yaml"))
		Expect(err).NotTo(HaveOccurred())
		var p v1alpha1.SpiffeRegistration
		Expect(yaml.UnmarshalStrict(b, &p)).To(Succeed())
		Expect(k8s.Create(ctx, &p)).To(Succeed())
		// The k8s_psat agent of the pod's node can issue it: the parent an
		// agent of a real cluster has.
		Eventually(paths(agentOf(n))).Should(Equal([]string{"/ns/sample-apps/sa/web"}))
		Eventually(policyReady(&p)).Should(Equal("True/Ready"))
		Expect(k8s.Delete(ctx, &p)).To(Succeed())
		Eventually(gone(&p)).Should(BeTrue())
	})

	It("has a SpiffeEntry sample that is admitted and registered", func() {
		b, err := os.ReadFile(filepath.Join(samples, "spiffe_v1alpha1_spiffeentry.yaml"))
		Expect(err).NotTo(HaveOccurred())
		var e v1alpha1.SpiffeEntry
		Expect(yaml.UnmarshalStrict(b, &e)).To(Succeed())
		Expect(k8s.Create(ctx, &e)).To(Succeed())
		Eventually(entryReady(&e)).Should(Equal("True/Ready"))
		Expect(entryAt(e.Spec.ParentID, "/vm/billing-db")).NotTo(BeNil())
	})

	It("has a SpiffeFederation sample that is admitted and creates its relationship", func() {
		b, err := os.ReadFile(filepath.Join(samples, "spiffe_v1alpha1_spiffefederation.yaml"))
		Expect(err).NotTo(HaveOccurred())
		var f v1alpha1.SpiffeFederation
		Expect(yaml.UnmarshalStrict(b, &f)).To(Succeed())
		Expect(k8s.Create(ctx, &f)).To(Succeed())
		Eventually(federationReady(&f)).Should(Equal("True/Ready"))
		Expect(endpointOf(string(f.Spec.TrustDomain))()).To(Equal(f.Spec.BundleEndpointURL))
		Expect(k8s.Delete(ctx, &f)).To(Succeed())
		Eventually(gone(&f)).Should(BeTrue())
	})
})
