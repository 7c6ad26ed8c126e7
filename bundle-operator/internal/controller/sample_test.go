package controller_test

import (
	"context"
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
)

var _ = Describe("The sample", func() {
	It("becomes Ready and fills a labelled namespace", func(ctx context.Context) {
		raw, err := os.ReadFile(filepath.Join("..", "..", "config", "samples", "bundle_v1alpha1_trustbundle.yaml"))
		Expect(err).NotTo(HaveOccurred())
		tb := &v1alpha1.TrustBundle{}
		Expect(yaml.UnmarshalStrict(raw, tb)).To(Succeed())
		ns := newNamespace(ctx, map[string]string{"trustplane.dev/trust-bundle": "spire"})
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		DeferCleanup(func(ctx context.Context) { Expect(cp.Client.Delete(ctx, tb)).To(Succeed()) })

		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))
		Eventually(func() map[string]string {
			if cm := configMap(ctx, ns, "spire-ca"); cm != nil {
				return cm.Data
			}
			return nil
		}).Should(And(HaveKey("ca.crt"), HaveKey("bundle.spiffe"), HaveKey("jwks.json")))
	})
})
