package controller_test

import (
	"bytes"
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/pavlo-v-chernykh/keystore-go/v4"
	"software.sslmate.com/src/go-pkcs12"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

var _ = Describe("PKCS#12 and JKS trust stores", func() {
	It("go to binaryData, decode to the bundle with the password, and an unchanged bundle rewrites nothing", func(ctx context.Context) {
		group := unique("stores")
		ns := newNamespace(ctx, map[string]string{"group": group})
		ca := testpki.ValidCA("stores")
		tb := newTrustBundle(group, inline(ca.PEM()))
		tb.Spec.Target.ConfigMap.Keys = v1alpha1.Keys{PEM: "ca.crt", PKCS12: "truststore.p12", JKS: "truststore.jks", TrustStorePassword: "changeit"}
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))

		cm := configMap(ctx, ns, "ca")
		Expect(cm.Data).To(HaveKey("ca.crt"))
		Expect(cm.BinaryData).To(HaveKey("truststore.p12"))
		Expect(cm.BinaryData).To(HaveKey("truststore.jks"))
		certs, err := pkcs12.DecodeTrustStore(cm.BinaryData["truststore.p12"], "changeit")
		Expect(err).NotTo(HaveOccurred())
		Expect(certs).To(HaveLen(1))
		Expect(certs[0].Equal(ca.Cert)).To(BeTrue())
		ks := keystore.New()
		Expect(ks.Load(bytes.NewReader(cm.BinaryData["truststore.jks"]), []byte("changeit"))).To(Succeed())
		Expect(ks.Aliases()).To(HaveLen(1))

		By("a pass that renders the same bundle again")
		updateSpec(ctx, tb, func(t *v1alpha1.TrustBundle) { t.Spec.Options.DropExpired = true })
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))
		Consistently(func() string { return resourceVersion(ctx, ns) }).Should(Equal(cm.ResourceVersion))
	})
})
