package controller_test

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/handler/trustbundle"
)

// A target whose only key is keys.federatedSpiffe, of a TrustBundle whose
// spire source lists no federated trust domain, would hold nothing at all.
// It is never written (empty), and the TrustBundle says why instead of
// reporting its targets in sync.
var _ = Describe("A target that would hold no data", func() {
	It("is not written empty and the TrustBundle is not Ready", func(ctx context.Context) {
		group := unique("empty")
		selected := newNamespace(ctx, map[string]string{"group": group})
		tb := newTrustBundle(group, v1alpha1.Source{SPIRE: &v1alpha1.SPIRESource{}})
		tb.Spec.Target.ConfigMap.Keys = v1alpha1.Keys{FederatedSPIFFE: "federated."}
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal(trustbundle.ReasonTargetsFailed),
			func() string { return fmt.Sprintf("status %+v", get(ctx, tb).Status) })
		Expect(get(ctx, tb).Status.FailedTargets).To(ContainElement(ContainSubstring("lists no federatedTrustDomains")))
		Consistently(func() bool { return configMap(ctx, selected, "ca") == nil }, time.Second, 100*time.Millisecond).
			Should(BeTrue(), "a target holding no bundle was written")
	})
})
