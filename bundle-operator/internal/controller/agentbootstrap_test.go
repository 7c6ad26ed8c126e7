package controller_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/common/labels"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
)

// The recipe of docs/bundle-operator.md: the spire-agent's bootstrap bundle
// ConfigMap kept current by a TrustBundle reading SPIRE over the admin
// socket (as this suite's operator does).
var _ = Describe("The spire-agent bootstrap bundle recipe", func() {
	It("writes a ConfigMap a real spire-agent bootstraps from", func(ctx context.Context) {
		spireNS := newNamespace(ctx, nil)
		tb := &v1alpha1.TrustBundle{
			ObjectMeta: metav1.ObjectMeta{Name: unique("spire-bundle"), Labels: map[string]string{labels.Environment: "test"}},
			Spec: v1alpha1.TrustBundleSpec{
				Sources: []v1alpha1.Source{{SPIRE: &v1alpha1.SPIRESource{}}},
				Target: v1alpha1.Target{
					ConfigMap:         &v1alpha1.ObjectTarget{Name: "spire-bundle", Keys: v1alpha1.Keys{PEM: "bundle.crt"}},
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": spireNS}},
				},
			},
		}
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Eventually(func() string { return keyData(ctx, spireNS, "spire-bundle", "bundle.crt") }).ShouldNot(BeEmpty())

		agent, err := spireSrv.StartAgentWithBundle(ctx, keyData(ctx, spireNS, "spire-bundle", "bundle.crt"))
		Expect(err).NotTo(HaveOccurred(), "a spire-agent with the ConfigMap as trust_bundle_path")
		Expect(agent.Cleanup()).To(Succeed())
	})
})
