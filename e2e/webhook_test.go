package e2e_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/e2e/framework"
)

// otherCA is the PEM certificate of a fresh self-signed CA that signed
// nothing the cluster serves.
func otherCA() []byte {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	Expect(err).NotTo(HaveOccurred())
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "not the SPIRE CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	Expect(err).NotTo(HaveOccurred())
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

var _ = Describe("a webhook served with an SVID on a real node", func() {
	It("is called by the apiserver over TLS once bundle-operator injected its caBundle, and not while the caBundle is another CA's", smoke, func(ctx context.Context) {
		w := requireWorkloads()
		const label = "e2e.trustplane.dev/webhook"
		ns := fmt.Sprintf("e2e-webhook-%d-%d", GinkgoParallelProcess(), nsCount.Add(1))
		// The webhook's SVID names the DNS name the apiserver verifies
		// for a Service webhook: <service>.<namespace>.svc. The
		// TrustBundle writes no ConfigMap: it serves the injection below.
		identityNamespace(ctx, framework.IdentityNamespace{Name: ns, Label: label, ParentID: cluster.AgentParentID(),
			DNSNameTemplates: []string{"{serviceAccount}.{namespace}.svc"}, Bundle: &framework.BundleTarget{}})

		Expect(framework.DeployProbe(ctx, cluster, w, framework.Probe{Namespace: ns, Name: "webhook", ServiceAccount: "webhook",
			Args: []string{"--webhook=:8443"}})).To(Succeed())
		Expect(cluster.Client().Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "webhook"},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "webhook"},
				Ports: []corev1.ServicePort{{Port: 443, TargetPort: intstr.FromInt32(8443)}}},
		})).To(Succeed())
		webhookID := workloadID(ns, "webhook")
		// The webhook and the probe's own fetch print independently.
		Eventually(probeLog(ctx, ns, "webhook"), podTimeout, time.Second).Should(SatisfyAll(
			ContainSubstring("webhook-serving id="+webhookID+"\n"), MatchRegexp(`(?m)^x509-svid `)))
		log, err := probeLog(ctx, ns, "webhook")()
		Expect(err).NotTo(HaveOccurred())
		Expect(framework.X509SVIDs(log)).To(ConsistOf(webhookID+" dns=webhook."+ns+".svc"), "the serving SVID names the Service")

		config := create(ctx, `
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: %s}
webhooks:
- name: deny.e2e.trustplane.dev
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
  timeoutSeconds: 5
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: %s}}
  objectSelector: {matchLabels: {%s: deny}}
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}]
  clientConfig:
    service: {namespace: %s, name: webhook, path: /validate, port: 443}
    caBundle: %s
`, ns, ns, label, ns, base64.StdEncoding.EncodeToString(otherCA()))
		DeferCleanup(func(ctx context.Context) {
			Expect(client.IgnoreNotFound(cluster.Client().Delete(ctx, config))).To(Succeed())
		})

		attempt := 0
		createConfigMap := func() error {
			attempt++
			return cluster.Client().Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
				Namespace: ns, Name: fmt.Sprintf("attempt-%d", attempt), Labels: map[string]string{label: "deny"}}})
		}
		By("with another CA's caBundle, the apiserver's call fails TLS verification")
		Eventually(createConfigMap, timeout, time.Second).Should(MatchError(ContainSubstring("x509: certificate signed by unknown authority")))
		Expect(probeLog(ctx, ns, "webhook")()).NotTo(ContainSubstring("webhook-denied "), "no review reached the webhook")

		By("once bundle-operator injected the SPIRE bundle, the apiserver calls the webhook, which denies")
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(config.GroupVersionKind())
		Expect(cluster.Client().Get(ctx, client.ObjectKeyFromObject(config), got)).To(Succeed())
		got.SetAnnotations(map[string]string{"bundle.trustplane.dev/inject": ns})
		Expect(cluster.Client().Update(ctx, got)).To(Succeed())
		Eventually(createConfigMap, timeout, time.Second).Should(MatchError(SatisfyAll(
			ContainSubstring(`admission webhook "deny.e2e.trustplane.dev" denied the request`),
			MatchRegexp(`ConfigMap attempt-\d+ denied by the webhook serving as `+webhookID))))
		// The webhook prints its line before it answers, but the kubelet
		// reads the container's log file, which the runtime writes behind.
		Eventually(probeLog(ctx, ns, "webhook"), timeout, time.Second).Should(MatchRegexp(`(?m)^webhook-denied uid=\S+ kind=ConfigMap name=attempt-\d+$`))
		Expect(cluster.Client().Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "unlabelled"}})).
			To(Succeed(), "the webhook applies only to the objects it selects")
	})
})
