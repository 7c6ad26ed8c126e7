package controller_test

import (
	"context"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// These objects only exercise admission: client.DryRunAll validates without
// storing them.
var _ = Describe("Admission rejects what the CRD schema can check", func() {
	valid := func() *v1alpha1.TrustBundle {
		return newTrustBundle(unique("cel"), inline(testpki.ValidCA("cel").PEM()))
	}

	It("accepts a valid TrustBundle", func(ctx context.Context) {
		tb := valid()
		tb.Spec.Sources = append(tb.Spec.Sources, v1alpha1.Source{SPIRE: &v1alpha1.SPIRESource{}})
		tb.Spec.Target.ConfigMap.Keys = v1alpha1.Keys{PEM: "ca.crt", SPIFFE: "bundle.spiffe", JWKS: "jwks.json", FederatedSPIFFE: "federated."}
		tb.Spec.TrustDomain = "example.org"
		tb.Spec.Options.RetainRemovedFor = &metav1.Duration{Duration: 0}
		Expect(cp.Client.Create(ctx, tb, client.DryRunAll)).To(Succeed())
	})

	DescribeTable("an invalid TrustBundle is rejected with a message naming the rule",
		func(ctx context.Context, change func(*v1alpha1.TrustBundle), message string) {
			tb := valid()
			change(tb)
			err := cp.Client.Create(ctx, tb, client.DryRunAll)
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("no source", func(tb *v1alpha1.TrustBundle) { tb.Spec.Sources = nil }, "spec.sources"),
		Entry("a source with two kinds", func(tb *v1alpha1.TrustBundle) {
			tb.Spec.Sources[0].SPIRE = &v1alpha1.SPIRESource{}
		}, "set exactly one of spire, configMap, secret, inline"),
		Entry("publicRoots beside another kind in one source", func(tb *v1alpha1.TrustBundle) {
			tb.Spec.Sources[0].PublicRoots = &v1alpha1.PublicRootsSource{}
		}, "set exactly one of spire, configMap, secret, inline, publicRoots"),
		Entry("a source with no kind", func(tb *v1alpha1.TrustBundle) {
			tb.Spec.Sources = []v1alpha1.Source{{}}
		}, "set exactly one of spire, configMap, secret, inline"),
		Entry("a name too long for the label value", func(tb *v1alpha1.TrustBundle) {
			tb.Name = strings.Repeat("a", 64)
		}, "at most 63 characters"),
		Entry("two formats in one key", func(tb *v1alpha1.TrustBundle) {
			tb.Spec.TrustDomain = "example.org"
			tb.Spec.Target.ConfigMap.Keys = v1alpha1.Keys{PEM: "ca.crt", SPIFFE: "ca.crt"}
		}, "the keys of the formats must be distinct"),
		Entry("a data key that is not a valid key", func(tb *v1alpha1.TrustBundle) {
			tb.Spec.Target.ConfigMap.Keys = v1alpha1.Keys{PEM: "ca/crt"}
		}, "spec.target.configMap.keys.pem"),
		Entry("a SPIFFE key without a spire source, even with a trust domain", func(tb *v1alpha1.TrustBundle) {
			tb.Spec.TrustDomain = "example.org"
			tb.Spec.Target.ConfigMap.Keys = v1alpha1.Keys{SPIFFE: "bundle.spiffe"}
		}, "the spiffe and federatedSpiffe keys need a spire source"),
		Entry("a federated SPIFFE key of a Secret without a spire source", func(tb *v1alpha1.TrustBundle) {
			tb.Spec.Target.Secret = &v1alpha1.ObjectTarget{Name: "ca", Keys: v1alpha1.Keys{FederatedSPIFFE: "federated."}}
		}, "the spiffe and federatedSpiffe keys need a spire source"),
		Entry("a target name that is not an object name", func(tb *v1alpha1.TrustBundle) {
			tb.Spec.Target.ConfigMap.Name = "Not_A_Name"
		}, "spec.target.configMap.name"),
		Entry("a source namespace that is not a namespace name", func(tb *v1alpha1.TrustBundle) {
			tb.Spec.Sources = []v1alpha1.Source{{ConfigMap: &v1alpha1.KeySelector{Namespace: "a.b", Name: "ca", Key: "ca.crt"}}}
		}, "spec.sources[0].configMap.namespace"),
		Entry("a trust domain with a scheme", func(tb *v1alpha1.TrustBundle) {
			tb.Spec.TrustDomain = "spiffe://example.org"
		}, "spec.trustDomain"),
		Entry("a federated trust domain with a scheme", func(tb *v1alpha1.TrustBundle) {
			tb.Spec.Sources = []v1alpha1.Source{{SPIRE: &v1alpha1.SPIRESource{FederatedTrustDomains: []string{"spiffe://other.org"}}}}
		}, "spec.sources[0].spire.federatedTrustDomains[0]"),
		Entry("a negative grace period", func(tb *v1alpha1.TrustBundle) {
			tb.Spec.Options.RetainRemovedFor = &metav1.Duration{Duration: -1}
		}, "must not be negative"),
	)
})
