package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/e2e/framework"
)

const (
	environment = "e2e"
	timeout     = 60 * time.Second
)

var nsCount atomic.Int64

// selectedNamespace creates a namespace that the e2e registration selects.
func selectedNamespace(ctx context.Context) string {
	name := fmt.Sprintf("e2e-%d-%d", GinkgoParallelProcess(), nsCount.Add(1))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"e2e.trustplane.dev/selected": "true"}}}
	Expect(cluster.Client().Create(ctx, ns)).To(Succeed())
	return name
}

func create(ctx context.Context, format string, args ...any) *unstructured.Unstructured {
	u, err := framework.FromYAML(format, args...)
	Expect(err).NotTo(HaveOccurred())
	Expect(cluster.Client().Create(ctx, u)).To(Succeed())
	return u
}

func deployment(ctx context.Context, ns, name, sa string, podLabels string) *unstructured.Unstructured {
	return create(ctx, `
apiVersion: apps/v1
kind: Deployment
metadata: {name: %s, namespace: %s}
spec:
  selector: {matchLabels: {app: %s}}
  template:
    metadata: {labels: {app: %s%s}}
    spec:
      serviceAccountName: %s
      containers: [{name: main, image: registry.k8s.io/pause:3.10}]
`, name, ns, name, name, podLabels, sa)
}

func entryCount(ctx context.Context, id string) func() (int, error) {
	return func() (int, error) {
		entries, err := framework.EntriesFor(ctx, cluster, id)
		return len(entries), err
	}
}

func workloadID(ns, sa string) string {
	return fmt.Sprintf("spiffe://%s/ns/%s/sa/%s", cluster.TrustDomain(), ns, sa)
}

func readyStatus(ctx context.Context, u *unstructured.Unstructured) func() (string, error) {
	return func() (string, error) {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(u.GroupVersionKind())
		if err := cluster.Client().Get(ctx, client.ObjectKeyFromObject(u), got); err != nil {
			return "", err
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Ready" {
				return fmt.Sprintf("%v/%v", m["status"], m["reason"]), nil
			}
		}
		return "", nil
	}
}

var _ = Describe("spiffe-operator", Ordered, func() {
	BeforeAll(func(ctx context.Context) {
		create(ctx, `
apiVersion: spiffe.trustplane.dev/v1alpha1
kind: SpiffeRegistration
metadata:
  name: e2e-workloads
  labels: {trustplane.dev/environment: %s}
spec:
  trustDomain: %s
  parentID: %s
  namespaceSelector: {matchLabels: {e2e.trustplane.dev/selected: "true"}}
`, environment, cluster.TrustDomain(), cluster.AgentParentID())
	})

	It("gives a Deployment in a selected namespace its entry", smoke, func(ctx context.Context) {
		ns := selectedNamespace(ctx)
		deployment(ctx, ns, "web", "web-sa", "")
		Eventually(entryCount(ctx, workloadID(ns, "web-sa")), timeout).Should(Equal(1))

		// With the default flags, the entry's ID carries this cluster's tag:
		// the first 8 hex digits of the kube-system namespace's UID.
		var ks corev1.Namespace
		Expect(cluster.Client().Get(ctx, client.ObjectKey{Name: "kube-system"}, &ks)).To(Succeed())
		list, err := framework.EntriesFor(ctx, cluster, workloadID(ns, "web-sa"))
		Expect(err).NotTo(HaveOccurred())
		Expect(list[0].Id).To(HavePrefix("trustplane." + strings.ReplaceAll(string(ks.UID), "-", "")[:8] + "."))
	})

	It("keeps a shared service account's entry until its last Deployment goes", func(ctx context.Context) {
		ns := selectedNamespace(ctx)
		first := deployment(ctx, ns, "first", "shared", "")
		second := deployment(ctx, ns, "second", "shared", "")
		id := workloadID(ns, "shared")
		Eventually(entryCount(ctx, id), timeout).Should(Equal(1))

		Expect(cluster.Client().Delete(ctx, first)).To(Succeed())
		Consistently(entryCount(ctx, id), "5s", "500ms").Should(Equal(1))

		Expect(cluster.Client().Delete(ctx, second)).To(Succeed())
		Eventually(entryCount(ctx, id), timeout).Should(Equal(0))
	})

	It("converges with nothing duplicated after the operator is killed and restarted", smoke, func(ctx context.Context) {
		ns := selectedNamespace(ctx)
		deployment(ctx, ns, "before", "before-sa", "")
		Eventually(entryCount(ctx, workloadID(ns, "before-sa")), timeout).Should(Equal(1))

		Expect(cluster.RestartOperator(ctx, "spiffe-operator")).To(Succeed())
		deployment(ctx, ns, "during", "during-sa", "")
		Eventually(entryCount(ctx, workloadID(ns, "during-sa")), timeout).Should(Equal(1))
		Consistently(entryCount(ctx, workloadID(ns, "before-sa")), "3s", "500ms").Should(Equal(1))
	})
})

var _ = Describe("identity-operator", Ordered, func() {
	var ns string
	binding := func(ctx context.Context, name, variant string) *unstructured.Unstructured {
		return create(ctx, `
apiVersion: identity.trustplane.dev/v1alpha1
kind: IdentityBinding
metadata:
  name: %s
  namespace: %s
  labels: {trustplane.dev/environment: %s}
spec:
  poolRef: {group: apps, kind: Deployment, name: model}
  serviceAccountName: model-sa
  identityBoundary: {variant: %s}
`, name, ns, environment, variant)
	}
	bindingID := func(variant string) string {
		return fmt.Sprintf("spiffe://%s/ns/%s/sa/model-sa/pool/model/variant/%s", cluster.TrustDomain(), ns, variant)
	}

	BeforeAll(func(ctx context.Context) {
		ns = selectedNamespace(ctx)
		deployment(ctx, ns, "model", "model-sa", ", identity.trustplane.dev/variant: stable")
	})

	It("gives two variants two entries", smoke, func(ctx context.Context) {
		binding(ctx, "stable", "stable")
		binding(ctx, "canary", "canary")
		Eventually(entryCount(ctx, bindingID("stable")), timeout).Should(Equal(1))
		Eventually(entryCount(ctx, bindingID("canary")), timeout).Should(Equal(1))
	})

	It("gives a conflicting third binding no entry", func(ctx context.Context) {
		third := binding(ctx, "stable-again", "stable")
		Eventually(readyStatus(ctx, third), timeout).Should(HavePrefix("False/"))
		Eventually(entryCount(ctx, bindingID("stable")), timeout).Should(Equal(0), "conflict members keep no output")
		Consistently(entryCount(ctx, bindingID("canary")), "3s", "500ms").Should(Equal(1), "the canary is not part of the conflict")
	})
})

var _ = Describe("bundle-operator", Ordered, func() {
	It("brings the SPIRE bundle to a new namespace and an annotated webhook", smoke, func(ctx context.Context) {
		create(ctx, `
apiVersion: bundle.trustplane.dev/v1alpha1
kind: TrustBundle
metadata:
  name: e2e-bundle
  labels: {trustplane.dev/environment: %s}
spec:
  sources: [{spire: {}}]
  target:
    configMap: {name: trust-bundle, keys: {pem: ca.crt}}
    namespaceSelector: {matchLabels: {e2e.trustplane.dev/selected: "true"}}
`, environment)
		ns := selectedNamespace(ctx)
		Eventually(func() (string, error) {
			cm := &corev1.ConfigMap{}
			err := cluster.Client().Get(ctx, client.ObjectKey{Namespace: ns, Name: "trust-bundle"}, cm)
			return cm.Data["ca.crt"], err
		}, timeout).Should(ContainSubstring("BEGIN CERTIFICATE"))

		webhook := create(ctx, `
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: e2e-webhook
  annotations: {bundle.trustplane.dev/inject: e2e-bundle}
webhooks:
- name: e2e.trustplane.dev
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Ignore
  rules: [{apiGroups: ["e2e.invalid"], apiVersions: [v1], operations: [CREATE], resources: [nothings]}]
  clientConfig: {url: "https://127.0.0.1:1/validate"}
`)
		Eventually(func() (string, error) {
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(webhook.GroupVersionKind())
			if err := cluster.Client().Get(ctx, client.ObjectKeyFromObject(webhook), got); err != nil {
				return "", err
			}
			hooks, _, _ := unstructured.NestedSlice(got.Object, "webhooks")
			if len(hooks) == 0 {
				return "", nil
			}
			ca, _, _ := unstructured.NestedString(hooks[0].(map[string]any), "clientConfig", "caBundle")
			return ca, nil
		}, timeout).ShouldNot(BeEmpty())
	})
})
