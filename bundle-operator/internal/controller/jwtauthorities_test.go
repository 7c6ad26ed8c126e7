package controller_test

import (
	"context"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	bundlev1 "github.com/spiffe/spire-api-sdk/proto/spire/api/server/bundle/v1"
	"github.com/spiffe/spire-api-sdk/proto/spire/api/types"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/spireconn"
	"github.com/trustplane/trustplane/common/testenv"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/handler/trustbundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/spire"
)

// appendJWTAuthority adds a JWT authority to the spire-server's own bundle
// through its bundle API, as an administrator can.
func appendJWTAuthority(ctx context.Context, sp *testenv.Spire, keyID string, der []byte) {
	conn, err := sp.Dial(ctx)
	Expect(err).NotTo(HaveOccurred())
	defer conn.Close()
	_, err = bundlev1.NewBundleClient(conn).AppendBundle(ctx, &bundlev1.AppendBundleRequest{
		JwtAuthorities: []*types.JWTKey{{KeyId: keyID, PublicKey: der, ExpiresAt: time.Now().Add(time.Hour).Unix()}},
	})
	Expect(err).NotTo(HaveOccurred(), "spire-server refused the JWT authority")
}

var _ = Describe("JWT authorities a real spire-server holds", func() {
	It("fail only the targets of a format that cannot hold them, and a second key under a key ID stops the bundle", func(ctx context.Context) {
		// A spire-server of its own: its bundle is changed for good.
		sp, err := testenv.StartSpire(testenv.SpireOptions{TrustDomain: "example.org"})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { Expect(sp.Cleanup()).To(Succeed()) })
		runManagerAs(cp.Config, sp.SocketPath)

		By("an X25519 key, which SPIRE accepts and a JWKS cannot hold")
		x, err := ecdh.X25519().GenerateKey(rand.Reader)
		Expect(err).NotTo(HaveOccurred())
		der, err := x509.MarshalPKIXPublicKey(x.PublicKey())
		Expect(err).NotTo(HaveOccurred())
		appendJWTAuthority(ctx, sp, "x25519", der)

		group := unique("jwt")
		ns := newNamespace(ctx, map[string]string{"group": group})
		tb := newTrustBundle(group, v1alpha1.Source{SPIRE: &v1alpha1.SPIRESource{}})
		tb.Spec.Target.ConfigMap.Keys = v1alpha1.Keys{PEM: "ca.crt", JWKS: "jwks.json"}
		tb.Spec.Target.Secret = &v1alpha1.ObjectTarget{Name: "ca-secret", Keys: v1alpha1.Keys{PEM: "ca.crt"}}
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())

		shown, err := sp.BundlePEM(ctx)
		Expect(err).NotTo(HaveOccurred())
		want := pemOf(shown)
		sec := &corev1.Secret{}
		Eventually(func() string {
			if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ca-secret"}, sec); err != nil {
				return err.Error()
			}
			return string(sec.Data["ca.crt"])
		}).Should(Equal(want), "the PEM-only target is written")
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal(trustbundle.ReasonTargetsFailed))
		Expect(failedTargets(ctx, tb)).To(And(ContainSubstring("ConfigMap targets"), ContainSubstring("x25519")))
		Expect(configMap(ctx, ns, "ca")).To(BeNil(), "the target naming the JWKS is not written")

		By("the same bundle with the JWKS taken out of the ConfigMap target")
		updateSpec(ctx, tb, func(t *v1alpha1.TrustBundle) { t.Spec.Target.ConfigMap.Keys = v1alpha1.Keys{PEM: "ca.crt"} })
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))
		Expect(caData(ctx, ns)).To(Equal(want))
		rv := resourceVersion(ctx, ns)

		By("a second key under the key ID of SPIRE's own JWT authority, which SPIRE keeps beside the first")
		sc, err := spire.Dial(ctx, spireconn.Options{SocketPath: sp.SocketPath})
		Expect(err).NotTo(HaveOccurred())
		defer sc.Close()
		own, err := sc.ServerBundle(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(own.JWTAuthorities).NotTo(BeEmpty())
		kid := own.JWTAuthorities[0].KeyID
		ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		Expect(err).NotTo(HaveOccurred())
		der, err = x509.MarshalPKIXPublicKey(&ec.PublicKey)
		Expect(err).NotTo(HaveOccurred())
		appendJWTAuthority(ctx, sp, kid, der)
		Eventually(func() int {
			b, err := sc.ServerBundle(ctx)
			Expect(err).NotTo(HaveOccurred())
			n := 0
			for _, k := range b.JWTAuthorities {
				if k.KeyID == kid {
					n++
				}
			}
			return n
		}).Should(Equal(2), "SPIRE holds both keys under the key ID")
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal(bundle.ReasonKeyIDConflict))
		Expect(conditionMessage(ctx, tb, "Ready")).To(ContainSubstring(kid))
		Consistently(func() string { return resourceVersion(ctx, ns) }).Should(Equal(rv), "targets keep the last good bundle")
	})
})
