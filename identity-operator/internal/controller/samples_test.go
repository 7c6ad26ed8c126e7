package controller_test

import (
	"context"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/trustplane/trustplane/identity-operator/internal/testsupport"
)

// applySamples creates every resource that config/samples/kustomization.yaml
// lists, exactly as written, and returns them.
func applySamples(ctx context.Context) []*unstructured.Unstructured {
	dir := filepath.Join(testsupport.ModuleRoot(), "config", "samples")
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	Expect(err).NotTo(HaveOccurred())
	var k struct {
		Resources []string `json:"resources"`
	}
	Expect(yaml.UnmarshalStrict(data, &k)).To(Succeed())
	Expect(k.Resources).NotTo(BeEmpty())
	var objs []*unstructured.Unstructured
	for _, f := range k.Resources {
		data, err := os.ReadFile(filepath.Join(dir, f))
		Expect(err).NotTo(HaveOccurred())
		u := &unstructured.Unstructured{}
		Expect(yaml.Unmarshal(data, &u.Object)).To(Succeed(), f)
		Expect(k8s.Create(ctx, u)).To(Succeed(), f)
		objs = append(objs, u)
	}
	return objs
}

var _ = Describe("Samples: config/samples works as is", func() {
	It("applies the namespace, pool and binding unchanged and the binding becomes Ready", func(ctx context.Context) {
		var ns, name string
		for _, u := range applySamples(ctx) {
			if u.GetKind() == "IdentityBinding" {
				ns, name = u.GetNamespace(), u.GetName()
			}
		}
		Expect(name).NotTo(BeEmpty(), "the samples hold an IdentityBinding")
		Eventually(readyReason(ctx, ns, name)).Should(Equal("True"))
		b := getBinding(ctx, ns, name)(Default)
		Expect(b.Status.SPIFFEID).To(Equal("spiffe://example.org/ns/models/sa/model-server/pool/llm/variant/canary"))
		Expect(b.Status.Selectors).To(Equal([]string{
			"k8s:ns:models", "k8s:pod-label:app:llm", "k8s:pod-label:identity.trustplane.dev/variant:canary", "k8s:sa:model-server",
		}))
		Expect(getEntry(ctx, ns, name)(Default).Spec.X509SVIDTTL.Duration).To(Equal(time.Hour))
		deleteBinding(ctx, ns, name)
		Expect(entryExists(ctx, ns, name)()).To(BeFalse())
	}, SpecTimeout(time.Minute))
})
