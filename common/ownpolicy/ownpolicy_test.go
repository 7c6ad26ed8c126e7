package ownpolicy_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	widgetv1 "github.com/trustplane/trustplane/common/examples/widget/api/v1"
	"github.com/trustplane/trustplane/common/internal/testapi"
	"github.com/trustplane/trustplane/common/labels"
	"github.com/trustplane/trustplane/common/ownpolicy"
	"github.com/trustplane/trustplane/common/testenv"
)

var cp = testapi.NewSuite("op-")

func TestOwnPolicy(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "ownpolicy")
}

// widgetCRDs is the example operator's CRD directory.
var widgetCRDs = filepath.Join("..", "testdata", "crd")

var _ = Describe("Rendering", func() {
	It("holds the kinds of the operator's CRDs, for its service account, and is valid YAML of the API's types", func() {
		o, err := ownpolicy.FromCRDs("widget-operator", widgetCRDs)
		Expect(err).NotTo(HaveOccurred())
		Expect(o.Resources).To(Equal([]ownpolicy.Resource{{Group: widgetv1.GroupVersion.Group, Plural: "widgets", Kind: "Widget"}}))
		raw, err := o.Policy()
		Expect(err).NotTo(HaveOccurred())
		var policy admissionregistrationv1.ValidatingAdmissionPolicy
		Expect(yaml.UnmarshalStrict(raw, &policy)).To(Succeed())
		Expect(policy.Name).To(Equal("widget-operator-own-resources.trustplane.dev"))
		rules := policy.Spec.MatchConstraints.ResourceRules
		Expect(rules).To(HaveLen(1))
		Expect(rules[0].APIGroups).To(Equal([]string{widgetv1.GroupVersion.Group}))
		Expect(rules[0].Resources).To(Equal([]string{"widgets"}))
		Expect(rules[0].Operations).To(Equal([]admissionregistrationv1.OperationType{admissionregistrationv1.Update}))
		Expect(policy.Spec.MatchConditions[0].Expression).To(ContainSubstring("endsWith(':widget-operator')"))
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.HasPrefix(line, "#") {
				Expect(len(line)).To(BeNumerically("<=", 78), "comment line too long: %q", line)
			}
		}

		raw, err = o.Binding()
		Expect(err).NotTo(HaveOccurred())
		var binding admissionregistrationv1.ValidatingAdmissionPolicyBinding
		Expect(yaml.UnmarshalStrict(raw, &binding)).To(Succeed())
		Expect(binding.Spec.PolicyName).To(Equal(policy.Name))
		Expect(binding.Spec.ValidationActions).To(Equal([]admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}))
	})

	It("groups the resources of several kinds by API group, sorted, and names every kind", func() {
		o := ownpolicy.Operator{ServiceAccount: "multi", Resources: []ownpolicy.Resource{
			{Group: "b.example.org", Plural: "zeds", Kind: "Zed"},
			{Group: "a.example.org", Plural: "things", Kind: "Thing"},
			{Group: "b.example.org", Plural: "alphas", Kind: "Alpha"},
		}}
		raw, err := o.Policy()
		Expect(err).NotTo(HaveOccurred())
		var policy admissionregistrationv1.ValidatingAdmissionPolicy
		Expect(yaml.UnmarshalStrict(raw, &policy)).To(Succeed())
		rules := policy.Spec.MatchConstraints.ResourceRules
		Expect(rules).To(HaveLen(2))
		Expect(rules[0].APIGroups).To(Equal([]string{"a.example.org"}))
		Expect(rules[0].Resources).To(Equal([]string{"things"}))
		Expect(rules[1].APIGroups).To(Equal([]string{"b.example.org"}))
		Expect(rules[1].Resources).To(Equal([]string{"alphas", "zeds"}))
		Expect(strings.ReplaceAll(string(raw), "\n# ", " ")).To(ContainSubstring("(Alpha, Thing and Zed)"))
	})

	It("refuses what it could not hold exactly, with the reason", func() {
		_, err := ownpolicy.FromCRDs("widget-operator", GinkgoT().TempDir())
		Expect(err).To(MatchError(ContainSubstring("no CustomResourceDefinition")))
		_, err = ownpolicy.FromCRDs("ops:widget-operator", widgetCRDs)
		Expect(err).To(MatchError(ContainSubstring(`service account "ops:widget-operator"`)))
		_, err = ownpolicy.Operator{ServiceAccount: "x", Resources: []ownpolicy.Resource{{Group: "g", Kind: "K"}}}.Policy()
		Expect(err).To(MatchError(ContainSubstring("a group, a resource name and a kind are required")))
		Expect(ownpolicy.Write(ownpolicy.Operator{ServiceAccount: "x"}, GinkgoT().TempDir())).To(MatchError(ContainSubstring("no CustomResourceDefinition")))
	})
})

var _ = Describe("The rendered policy in a real API server", Ordered, func() {
	var (
		asOperator, asOther client.Client
		ns                  string
	)
	BeforeAll(func(ctx context.Context) {
		dir := GinkgoT().TempDir()
		o, err := ownpolicy.FromCRDs("widget-operator", widgetCRDs)
		Expect(err).NotTo(HaveOccurred())
		Expect(ownpolicy.Write(o, dir)).To(Succeed())
		role := filepath.Join(dir, "role.yaml")
		Expect(os.WriteFile(role, []byte(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: widget-editor
rules:
- apiGroups: ["`+widgetv1.GroupVersion.Group+`"]
  resources: ["widgets"]
  verbs: ["get", "list", "watch", "update", "patch"]
`), 0o644)).To(Succeed())
		for i, name := range []string{"widget-operator", "another-operator"} {
			access, err := cp.AsServiceAccount(ctx, "ops", name, role)
			Expect(err).NotTo(HaveOccurred())
			c, err := client.New(access.Config, client.Options{Scheme: cp.Scheme})
			Expect(err).NotTo(HaveOccurred())
			if i == 0 {
				asOperator = c
			} else {
				asOther = c
			}
		}
		Expect(testenv.CreateManifests(ctx, cp.Client, filepath.Join(dir, ownpolicy.PolicyFile), filepath.Join(dir, ownpolicy.BindingFile))).To(Succeed())
		ns, err = testapi.NewNamespace(ctx, cp.Client, "op-")
		Expect(err).NotTo(HaveOccurred())

		probe := newWidget(ctx, ns)
		Expect(testenv.UntilRefused(ctx, 30*time.Second, "widget-operator changes no spec of its own resources", func(n int) error {
			return asOperator.Patch(ctx, probe, merge(fmt.Sprintf(`{"spec":{"data":{"probe":"%d"}}}`, n)))
		})).To(Succeed())
	})

	It("admits the controller's own writes: its finalizer on and off, and the environment label where there is none or it is empty", func(ctx context.Context) {
		w := newWidget(ctx, ns)
		Expect(asOperator.Patch(ctx, w, merge(`{"metadata":{"finalizers":["`+labels.Finalizer+`"]}}`))).To(Succeed())
		Expect(asOperator.Patch(ctx, w, merge(`{"metadata":{"labels":{"`+labels.Environment+`":""}}}`))).To(Succeed())
		Expect(asOperator.Patch(ctx, w, merge(`{"metadata":{"labels":{"`+labels.Environment+`":"prod"}}}`))).To(Succeed())
		Expect(asOperator.Patch(ctx, w, merge(`{"metadata":{"finalizers":null}}`))).To(Succeed())
	})

	It("refuses the operator's account every other change of its own resources, each with its reason", func(ctx context.Context) {
		w := newWidget(ctx, ns)
		Expect(cp.Client.Patch(ctx, w, merge(`{"metadata":{"labels":{"`+labels.Environment+`":"prod"},"finalizers":["someone/else"]}}`))).To(Succeed())
		for patch, says := range map[string]string{
			`{"spec":{"children":["planted"]}}`:                                "changes no spec",
			`{"metadata":{"labels":{"` + labels.Environment + `":"staging"}}}`: "changes no label",
			`{"metadata":{"labels":{"team":"x"}}}`:                             "changes no label",
			`{"metadata":{"annotations":{"a":"b"}}}`:                           "changes no annotation",
			`{"metadata":{"finalizers":["someone/else","mine/too"]}}`:          "no finalizer but " + labels.Finalizer,
			`{"metadata":{"finalizers":null}}`:                                 "no finalizer but " + labels.Finalizer,
			`{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"x","uid":"` + string(w.UID) + `"}]}}`: "no annotation or owner",
		} {
			Expect(asOperator.Patch(ctx, w.DeepCopy(), merge(patch))).To(MatchError(ContainSubstring(says)), "patch %s", patch)
		}
		By("another account is not held by the policy")
		Expect(asOther.Patch(ctx, w.DeepCopy(), merge(`{"spec":{"children":["theirs"]}}`))).To(Succeed())
	})
})

// newWidget creates a Widget in ns as the administrator.
func newWidget(ctx context.Context, ns string) *widgetv1.Widget {
	w := &widgetv1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "w-"}}
	Expect(cp.Client.Create(ctx, w)).To(Succeed())
	return w
}

func merge(body string) client.Patch { return client.RawPatch(types.MergePatchType, []byte(body)) }
