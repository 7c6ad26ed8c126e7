package operator_test

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/common/testenv"
	"github.com/trustplane/trustplane/spiffe-operator/api/v1alpha1"
)

// operatorClient is a client of the suite's operator's identity.
func operatorClient() client.Client {
	GinkgoHelper()
	c, err := client.New(operatorConfig, client.Options{Scheme: cp.Scheme})
	Expect(err).NotTo(HaveOccurred())
	return c
}

// installOwnResourcesPolicy creates the policy config/rbac puts beside the
// operator's ClusterRole on its own resources, and returns once the API
// server enforces it.
func installOwnResourcesPolicy(ctx context.Context) {
	dir := filepath.Join("..", "..", "config", "rbac")
	Expect(testenv.CreateManifests(ctx, k8s, filepath.Join(dir, "own_resources_policy.yaml"), filepath.Join(dir, "own_resources_policy_binding.yaml"))).To(Succeed())
	probe := spiffeEntry("probe-own-resources-policy", nil)
	Expect(k8s.Create(ctx, probe)).To(Succeed())
	Expect(testenv.UntilRefused(ctx, 30*time.Second, "changes no spec", func(n int) error {
		body := fmt.Sprintf(`{"spec":{"selectors":["unix:uid:%d"]}}`, 2000+n)
		return operatorClient().Patch(ctx, probe.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(body)))
	})).To(Succeed())
	Expect(k8s.Delete(ctx, probe)).To(Succeed())
}

// spiffe-operator's ClusterRole patches every SpiffeEntry,
// SpiffeRegistration and SpiffeFederation (the finalizer, the environment
// label), which RBAC cannot narrow to metadata: its token could otherwise
// turn any SpiffeEntry into an admin or downstream entry, and the operator
// would write it to SPIRE.
var _ = Describe("The own-resources policy: spiffe-operator's service account changes only the finalizer and environment label of its resources", func() {
	It("refuses a change of a SpiffeEntry's or SpiffeRegistration's spec, labels, annotations or other finalizers", func(ctx context.Context) {
		e := spiffeEntry("own-resources", nil)
		p := policyFor("own-resources", nil)
		for _, obj := range []client.Object{e, p} {
			// Labelled, as the policy lets the operator add the label only
			// where there is none.
			obj.SetLabels(map[string]string{labels.Environment: "test"})
			Expect(k8s.Create(ctx, obj)).To(Succeed())
			Eventually(func(g Gomega) []string {
				g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
				return obj.GetFinalizers()
			}).Should(ContainElement(labels.Finalizer), "the operator's own finalizer is admitted")
		}
		merge := func(body string) client.Patch { return client.RawPatch(types.MergePatchType, []byte(body)) }
		metadata := map[string]client.Patch{
			"a label":               merge(`{"metadata":{"labels":{"team":"x"}}}`),
			"the environment label": merge(`{"metadata":{"labels":{"` + labels.Environment + `":"other"}}}`),
			"an annotation":         merge(`{"metadata":{"annotations":{"x":"y"}}}`),
			"another finalizer":     merge(`{"metadata":{"finalizers":["` + labels.Finalizer + `","example.com/hold"]}}`),
		}
		entry := map[string]client.Patch{
			"admin":         merge(`{"spec":{"admin":true}}`),
			"downstream":    merge(`{"spec":{"downstream":true}}`),
			"the selectors": merge(`{"spec":{"selectors":["unix:uid:0"]}}`),
			"the SPIFFE ID": merge(`{"spec":{"spiffeID":"spiffe://example.org/spire/server"}}`),
		}
		policy := map[string]client.Patch{
			"every namespace": merge(`{"spec":{"namespaceSelector":{"matchLabels":null}}}`),
			"the parent":      merge(`{"spec":{"parentID":"spiffe://example.org/spire/agent/x509pop/attacker"}}`),
		}
		for what, patches := range map[string]map[string]client.Patch{"entry": entry, "entry metadata": metadata, "policy": policy, "policy metadata": metadata} {
			var obj client.Object = e
			if what == "policy" || what == "policy metadata" {
				obj = p
			}
			Expect(testenv.Admitted(ctx, operatorClient(), obj, patches, "spiffe-operator changes no")).To(BeEmpty(), what)
		}
		got := &v1alpha1.SpiffeEntry{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(e), got)).To(Succeed())
		Expect(got.Spec).To(Equal(e.Spec))
		for _, obj := range []client.Object{e, p} {
			Expect(k8s.Delete(ctx, obj)).To(Succeed())
		}
	})
})
