package controller_test

import (
	"context"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/trustplane/trustplane/common/labels"

	"github.com/trustplane/trustplane/identity-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/identity-operator/internal/testsupport"
)

var _ = Describe("Samples: every sample is accepted by the CRD and reconciled", func() {
	It("reconciles config/samples/identity_v1alpha1_identitybinding.yaml", func(ctx context.Context) {
		data, err := os.ReadFile(filepath.Join(testsupport.ModuleRoot(), "config", "samples", "identity_v1alpha1_identitybinding.yaml"))
		Expect(err).NotTo(HaveOccurred())
		b := &v1alpha1.IdentityBinding{}
		Expect(yaml.UnmarshalStrict(data, b)).To(Succeed())
		Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: b.Namespace}})).To(Succeed())
		b.Labels[labels.Environment] = environment
		Expect(k8s.Create(ctx, inferencePool(b.Namespace, b.Spec.PoolRef.Name, map[string]any{"app": "llm"}))).To(Succeed())
		Expect(k8s.Create(ctx, b)).To(Succeed())
		Eventually(readyReason(ctx, b.Namespace, b.Name)).Should(Equal("True"))
		Expect(getBinding(ctx, b.Namespace, b.Name)(Default).Status.SPIFFEID).To(Equal(
			"spiffe://example.org/ns/models/sa/model-server/pool/llm/variant/canary"))
		Expect(k8s.Delete(ctx, b)).To(Succeed())
		Eventually(func() error { return k8s.Get(ctx, client.ObjectKeyFromObject(b), &v1alpha1.IdentityBinding{}) }).ShouldNot(Succeed())
	}, SpecTimeout(time.Minute))
})
