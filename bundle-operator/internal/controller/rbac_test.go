package controller_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/target"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
	"github.com/trustplane/trustplane/common/testenv"
)

// rbacFiles are the RBAC manifests the operator is deployed with: the
// generated ClusterRole, the Role of the source namespaces, and the Secret
// components (the suite's operator allows Secret targets and sources).
var rbacFiles = []string{
	filepath.Join("..", "..", "config", "rbac", "role.yaml"),
	filepath.Join("..", "..", "config", "rbac", "source_role.yaml"),
	filepath.Join("..", "..", "config", "components", "secret-targets", "role.yaml"),
	filepath.Join("..", "..", "config", "components", "secret-sources", "role.yaml"),
}

// operatorIdentity creates the ClusterRoles and Roles of rbacFiles unchanged
// (the Roles in the source namespace), binds them to a service account, and
// returns its client configuration.
func operatorIdentity(ctx context.Context) *rest.Config {
	const saNamespace, saName = "rbac-operator", "bundle-operator"
	Expect(client.IgnoreAlreadyExists(cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: saNamespace}}))).To(Succeed())
	Expect(client.IgnoreAlreadyExists(cp.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: saNamespace, Name: saName}}))).To(Succeed())
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: saNamespace, Name: saName}}
	for _, file := range rbacFiles {
		raw, err := os.ReadFile(file)
		Expect(err).NotTo(HaveOccurred())
		for _, doc := range bytes.Split(raw, []byte("\n---\n")) {
			var meta metav1.TypeMeta
			Expect(yaml.Unmarshal(doc, &meta)).To(Succeed())
			switch meta.Kind {
			case "ClusterRole":
				role := &rbacv1.ClusterRole{}
				Expect(yaml.UnmarshalStrict(doc, role)).To(Succeed())
				Expect(client.IgnoreAlreadyExists(cp.Client.Create(ctx, role))).To(Succeed())
				Expect(client.IgnoreAlreadyExists(cp.Client.Create(ctx, &rbacv1.ClusterRoleBinding{
					ObjectMeta: metav1.ObjectMeta{Name: role.Name + "-rbac-spec"},
					RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
					Subjects:   subjects,
				}))).To(Succeed())
			case "Role":
				role := &rbacv1.Role{}
				Expect(yaml.UnmarshalStrict(doc, role)).To(Succeed())
				role.Namespace = sourceNamespace
				Expect(client.IgnoreAlreadyExists(cp.Client.Create(ctx, role))).To(Succeed())
				Expect(client.IgnoreAlreadyExists(cp.Client.Create(ctx, &rbacv1.RoleBinding{
					ObjectMeta: metav1.ObjectMeta{Namespace: sourceNamespace, Name: role.Name + "-rbac-spec"},
					RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
					Subjects:   subjects,
				}))).To(Succeed())
			case "RoleBinding", "ClusterRoleBinding":
				// Bound above to the spec's service account.
			default:
				Fail("unexpected kind " + meta.Kind + " in " + file)
			}
		}
	}
	cfg, err := cp.UserConfig("system:serviceaccount:"+saNamespace+":"+saName,
		[]string{"system:serviceaccounts", "system:serviceaccounts:" + saNamespace, "system:authenticated"})
	Expect(err).NotTo(HaveOccurred())
	return cfg
}

// withoutVerb takes verb on resource out of every rule of the role (a
// ClusterRole, or a Role in the source namespace) and returns what puts
// the rules back.
func withoutVerb(ctx context.Context, role client.Object, resource, verb string) func() {
	rulesOf := func(o client.Object) *[]rbacv1.PolicyRule {
		switch r := o.(type) {
		case *rbacv1.ClusterRole:
			return &r.Rules
		case *rbacv1.Role:
			return &r.Rules
		}
		Fail("not a role")
		return nil
	}
	Expect(cp.Client.Get(ctx, client.ObjectKeyFromObject(role), role)).To(Succeed())
	saved := slices.Clone(*rulesOf(role))
	var cut []rbacv1.PolicyRule
	found := false
	for _, r := range saved {
		r = *r.DeepCopy()
		if slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) {
			found = true
			r.Verbs = slices.DeleteFunc(r.Verbs, func(v string) bool { return v == verb })
		}
		if len(r.Verbs) > 0 {
			cut = append(cut, r)
		}
	}
	Expect(found).To(BeTrue(), "%s holds no %s on %s", role.GetName(), verb, resource)
	*rulesOf(role) = cut
	Expect(cp.Client.Update(ctx, role)).To(Succeed())
	return func() {
		ctx := context.Background() // also as a cleanup, after the spec's context ended
		Eventually(func() error {
			if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(role), role); err != nil {
				return err
			}
			*rulesOf(role) = saved
			return cp.Client.Update(ctx, role)
		}).Should(Succeed())
	}
}

// failedTargets returns the failures the TrustBundle's status reports.
func failedTargets(ctx context.Context, tb *v1alpha1.TrustBundle) string {
	return strings.Join(get(ctx, tb).Status.FailedTargets, "; ")
}

// targetCacheLists runs the operator's ConfigMap metadata cache as cfg and
// returns how many list requests it sent in the 5 seconds after it synced.
func targetCacheLists(ctx context.Context, cfg *rest.Config) int64 {
	// Counts the ConfigMap list requests, not watches.
	var lists atomic.Int64
	cfg = rest.CopyConfig(cfg)
	testenv.ObserveRequests(cfg, func(req *http.Request) {
		if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/configmaps") && req.URL.Query().Get("watch") != "true" {
			lists.Add(1)
		}
	})
	// The cluster-wide informer of targets, as CacheOptions configures it.
	c, err := cache.New(cfg, cache.Options{Scheme: scheme, ByObject: map[client.Object]cache.ByObject{
		&corev1.ConfigMap{}: {Label: labels.SelectorFromSet(labels.Set{target.LabelTrustBundle: "rbac"})},
	}})
	Expect(err).NotTo(HaveOccurred())
	cacheCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = c.Start(cacheCtx) }()
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	_, err = c.GetInformer(ctx, m)
	Expect(err).NotTo(HaveOccurred())
	synced := lists.Load()
	// A measurement window: the informer's relists back off from 0.8 s.
	time.Sleep(5 * time.Second)
	return lists.Load() - synced
}

var _ = Describe("The generated RBAC", func() {
	It("is enough for every path, and each ConfigMap right it holds is needed", func(ctx context.Context) {
		cfg := operatorIdentity(ctx)
		runManagerAs(cfg, spireSrv.SocketPath)
		clusterRole := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "bundle-operator-manager-role"}}
		sourceRole := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: sourceNamespace, Name: "bundle-operator-sources"}}

		group := unique("rbac")
		first, second := testpki.ValidCA("rbac-first"), testpki.ValidCA("rbac-second")
		src := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: sourceNamespace, Name: unique("rbac-src")},
			Data: map[string]string{"ca.crt": first.PEM()}}
		Expect(cp.Client.Create(ctx, src)).To(Succeed())
		secretSrc := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: sourceNamespace, Name: unique("rbac-src")},
			Data: map[string][]byte{"ca.crt": []byte(second.PEM())}}
		Expect(cp.Client.Create(ctx, secretSrc)).To(Succeed())
		ns := newNamespace(ctx, map[string]string{"group": group})
		// A namespace where someone else created an object of the target's
		// name: the operator inspects it with a list by name (no get).
		contested := newNamespace(ctx, map[string]string{"group": group})
		foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: contested, Name: "ca"}, Data: map[string]string{"theirs": "kept"}}
		Expect(cp.Client.Create(ctx, foreign, client.FieldOwner("someone-else"))).To(Succeed())

		tb := newTrustBundle(group,
			v1alpha1.Source{ConfigMap: &v1alpha1.KeySelector{Namespace: sourceNamespace, Name: src.Name, Key: "ca.crt"}},
			v1alpha1.Source{Secret: &v1alpha1.KeySelector{Namespace: sourceNamespace, Name: secretSrc.Name, Key: "ca.crt"}})
		tb.Spec.Target.Secret = &v1alpha1.ObjectTarget{Name: "ca-secret"}
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		want := pemOf(first.PEM(), second.PEM())
		// The object someone else created is inspected, then left alone:
		// the target policy refuses a key of the operator's in it.
		Eventually(func() string { return failedTargets(ctx, tb) }).Should(And(
			ContainSubstring("ConfigMap "+contested+"/ca"), ContainSubstring("only TrustBundle targets")))
		Expect(configMap(ctx, contested, "ca").Data).To(Equal(map[string]string{"theirs": "kept"}))
		Expect(cp.Client.Delete(ctx, foreign)).To(Succeed())
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))
		for _, n := range []string{ns, contested} {
			Expect(caData(ctx, n)).To(Equal(want))
			sec := &corev1.Secret{}
			Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: n, Name: "ca-secret"}, sec)).To(Succeed())
			Expect(string(sec.Data["ca.crt"])).To(Equal(want))
		}

		By("without create on ConfigMaps, a newly selected namespace gets no target")
		restore := withoutVerb(ctx, clusterRole, "configmaps", "create")
		added := newNamespace(ctx, map[string]string{"group": group})
		Eventually(func() string { return failedTargets(ctx, tb) }).Should(And(
			ContainSubstring("ConfigMap "+added+"/ca"), ContainSubstring("forbidden")))
		Expect(configMap(ctx, added, "ca")).To(BeNil())
		restore()
		Eventually(func() string { return caData(ctx, added) }).Should(Equal(want))

		By("without patch on ConfigMaps, a hand edit of a target is not repaired")
		restore = withoutVerb(ctx, clusterRole, "configmaps", "patch")
		cm := configMap(ctx, ns, "ca")
		cm.Data["ca.crt"] = "tampered"
		Expect(cp.Client.Update(ctx, cm)).To(Succeed())
		Eventually(func() string { return failedTargets(ctx, tb) }).Should(And(
			ContainSubstring("ConfigMap "+ns+"/ca"), ContainSubstring("forbidden")))
		Expect(caData(ctx, ns)).To(Equal("tampered"))
		restore()
		Eventually(func() string { return caData(ctx, ns) }).Should(Equal(want))

		By("without list on ConfigMaps, an object of the target's name someone else created cannot be inspected")
		restore = withoutVerb(ctx, clusterRole, "configmaps", "list")
		another := newNamespace(ctx, nil)
		Expect(cp.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: another, Name: "ca"},
			Data: map[string]string{"theirs": "kept"}}, client.FieldOwner("someone-else"))).To(Succeed())
		setNamespaceLabels(ctx, another, map[string]string{"group": group})
		Eventually(func() string { return failedTargets(ctx, tb) }).Should(And(
			ContainSubstring("ConfigMap "+another+"/ca"), ContainSubstring("forbidden")))
		Expect(keyData(ctx, another, "ca", "ca.crt")).To(BeEmpty())
		restore()
		Eventually(func() string { return failedTargets(ctx, tb) }).Should(And(
			ContainSubstring("ConfigMap "+another+"/ca"), ContainSubstring("only TrustBundle targets")))
		Expect(cp.Client.Delete(ctx, configMap(ctx, another, "ca"))).To(Succeed())
		Eventually(func() string { return keyData(ctx, another, "ca", "ca.crt") }).Should(Equal(want))

		By("without delete on ConfigMaps, a target of a namespace no longer selected stays")
		restore = withoutVerb(ctx, clusterRole, "configmaps", "delete")
		setNamespaceLabels(ctx, added, nil)
		Eventually(func() string { return failedTargets(ctx, tb) }).Should(And(
			ContainSubstring("release ConfigMap "+added+"/ca"), ContainSubstring("forbidden")))
		Expect(caData(ctx, added)).To(Equal(want))
		restore()
		Eventually(func() *corev1.ConfigMap { return configMap(ctx, added, "ca") }).Should(BeNil())

		By("without get on ConfigMaps in the source namespace (the Role), a source cannot be read")
		restore = withoutVerb(ctx, sourceRole, "configmaps", "get")
		src.Data["ca.crt"] = testpki.ValidCA("rbac-third").PEM()
		Expect(cp.Client.Update(ctx, src)).To(Succeed())
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("SourceReadFailed"))
		Expect(conditionMessage(ctx, tb, "Ready")).To(ContainSubstring("forbidden"))
		Expect(caData(ctx, ns)).To(Equal(want), "targets keep the last good bundle")
		restore()
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))
		Expect(caData(ctx, ns)).To(Equal(pemOf(src.Data["ca.crt"], second.PEM())))

		By("without watch on ConfigMaps, the target cache lists every target again and again instead of following changes")
		Expect(targetCacheLists(ctx, cfg)).To(BeZero(), "with watch, no list after the sync")
		restore = withoutVerb(ctx, clusterRole, "configmaps", "watch")
		DeferCleanup(restore)
		Expect(targetCacheLists(ctx, cfg)).To(BeNumerically(">=", 2), "without watch, a list after every refused watch")
	})
})
