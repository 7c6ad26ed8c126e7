package testenv_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	widgetv1 "github.com/trustplane/trustplane/common/examples/widget/api/v1"
	"github.com/trustplane/trustplane/common/internal/testapi"
	"github.com/trustplane/trustplane/common/testenv"
)

var _ = Describe("ControlPlane", Ordered, func() {
	var cp *testenv.ControlPlane

	BeforeAll(func() {
		var err error
		cp, err = testapi.StartControlPlane()
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() {
			if CurrentSpecReport().Failed() {
				GinkgoWriter.Println(cp.Logs())
			}
			Expect(cp.Stop()).To(Succeed())
		})
	})

	It("serves the installed CRD and stores a custom resource", func(ctx context.Context) {
		w := &widgetv1.Widget{ObjectMeta: metav1.ObjectMeta{Name: "w1", Namespace: "default"},
			Spec: widgetv1.WidgetSpec{Children: []string{"a"}}}
		Expect(cp.Client.Create(ctx, w)).To(Succeed())
		got := &widgetv1.Widget{}
		Expect(cp.Client.Get(ctx, client.ObjectKeyFromObject(w), got)).To(Succeed())
		Expect(got.Spec.Children).To(Equal([]string{"a"}))
		Expect(got.UID).NotTo(BeEmpty())
	})

	It("gives another process a working kubeconfig", func(ctx context.Context) {
		Expect(cp.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "from-test", Namespace: "default"}})).To(Succeed())
		kubectl, err := testenv.Binary("kubectl")
		Expect(err).NotTo(HaveOccurred())
		out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", cp.KubeconfigPath,
			"get", "configmap", "from-test", "-n", "default", "-o", "jsonpath={.metadata.name}").CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))
		Expect(string(out)).To(Equal("from-test"))

		out, err = exec.CommandContext(ctx, kubectl, "--kubeconfig", cp.KubeconfigPath, "version", "-o", "json").CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))
		Expect(string(out)).To(ContainSubstring(`"gitVersion": "` + testenv.KubernetesVersion + `"`))
	})

	It("authenticates other users for RBAC tests", func(ctx context.Context) {
		cfg, err := cp.UserConfig("system:serviceaccount:default:nobody", nil)
		Expect(err).NotTo(HaveOccurred())
		c, err := client.New(cfg, client.Options{Scheme: cp.Scheme})
		Expect(err).NotTo(HaveOccurred())
		err = c.List(ctx, &corev1.ConfigMapList{}, client.InNamespace("default"))
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("forbidden"))
	})
})

var _ = Describe("AsServiceAccount", Ordered, func() {
	It("gives exactly the rights of the role file", func(ctx context.Context) {
		cp, err := testapi.StartControlPlane()
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(cp.Stop)
		role := filepath.Join(GinkgoT().TempDir(), "role.yaml")
		Expect(os.WriteFile(role, []byte(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: reader}
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list]
`), 0o600)).To(Succeed())
		access, err := cp.AsServiceAccount(ctx, "ops", "reader", role)
		Expect(err).NotTo(HaveOccurred())
		c, err := client.New(access.Config, client.Options{Scheme: cp.Scheme})
		Expect(err).NotTo(HaveOccurred())
		Expect(c.List(ctx, &corev1.ConfigMapList{}, client.InNamespace("default"))).To(Succeed())
		err = c.List(ctx, &corev1.SecretList{}, client.InNamespace("default"))
		Expect(err).To(MatchError(ContainSubstring("forbidden")))

		kubectl, err := testenv.Binary("kubectl")
		Expect(err).NotTo(HaveOccurred())
		out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", access.KubeconfigPath, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}").CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))
		Expect(string(out)).To(Equal("system:serviceaccount:ops:reader"))

		_, err = cp.AsServiceAccount(ctx, "ops", "other", filepath.Join(GinkgoT().TempDir(), "missing.yaml"))
		Expect(err).To(MatchError(ContainSubstring("read role")))
	})
})

var _ = Describe("CreateManifests", func() {
	It("creates every document of each file, leaves what exists, and names the document it cannot read", func(ctx context.Context) {
		cp, err := testapi.StartControlPlane()
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(cp.Stop)
		dir := GinkgoT().TempDir()
		two := filepath.Join(dir, "two.yaml")
		Expect(os.WriteFile(two, []byte(`# a comment first
apiVersion: v1
kind: ConfigMap
metadata: {name: first, namespace: default}
data: {k: "1"}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: second, namespace: default}
data: {k: "2"}
`), 0o600)).To(Succeed())
		Expect(testenv.CreateManifests(ctx, cp.Client, two)).To(Succeed())
		for name, want := range map[string]string{"first": "1", "second": "2"} {
			cm := &corev1.ConfigMap{}
			Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, cm)).To(Succeed())
			Expect(cm.Data).To(Equal(map[string]string{"k": want}))
		}
		By("again: the objects exist, and are left as they are")
		Expect(testenv.CreateManifests(ctx, cp.Client, two)).To(Succeed())

		bad := filepath.Join(dir, "bad.yaml")
		Expect(os.WriteFile(bad, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok, namespace: default}\n---\n: not yaml: [\n"), 0o600)).To(Succeed())
		Expect(testenv.CreateManifests(ctx, cp.Client, bad)).To(MatchError(ContainSubstring("bad.yaml, document 2")))
		Expect(testenv.CreateManifests(ctx, cp.Client, filepath.Join(dir, "missing.yaml"))).To(MatchError(ContainSubstring("read manifest")))
	})
})
