package controller_test

import (
	"context"
	"encoding/pem"
	"errors"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/target"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

var _ = Describe("Fan-out and drift repair", func() {
	It("writes the bundle to every selected namespace and repairs deletions and hand edits", func(ctx context.Context) {
		group := unique("fan")
		ca := testpki.ValidCA("fan-out")
		nss := []string{newNamespace(ctx, map[string]string{"group": group}), newNamespace(ctx, map[string]string{"group": group})}
		other := newNamespace(ctx, map[string]string{"group": "other"})
		tb := newTrustBundle(group, inline(ca.PEM()))
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())

		want := pemOf(ca.PEM())
		for _, ns := range nss {
			Eventually(func() string { return caData(ctx, ns) }).Should(Equal(want))
		}
		Expect(configMap(ctx, other, "ca")).To(BeNil(), "a namespace outside the selector gets nothing")
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))
		cur := get(ctx, tb)
		Expect(cur.Status.TargetsInSync).To(BeEquivalentTo(2))
		Expect(cur.Status.CACount).To(BeEquivalentTo(1))
		Expect(cur.Status.Fingerprint).To(HavePrefix("sha256:"))
		Expect(cur.Status.EarliestExpiry.Time).To(BeTemporally("~", ca.Cert.NotAfter, time.Second))
		Expect(cur.Status.LastChangeTime).NotTo(BeNil())

		By("deleting a target by hand")
		Expect(cp.Client.Delete(ctx, configMap(ctx, nss[0], "ca"))).To(Succeed())
		Eventually(func() string { return caData(ctx, nss[0]) }).Should(Equal(want))

		By("editing our key by hand")
		cm := configMap(ctx, nss[1], "ca")
		cm.Data["ca.crt"] = "tampered"
		Expect(cp.Client.Update(ctx, cm)).To(Succeed())
		Eventually(func() string { return caData(ctx, nss[1]) }).Should(Equal(want))
	})
})

var _ = Describe("A bad source keeps the last good bundle", func() {
	good := testpki.ValidCA("good")
	headers := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Headers: map[string]string{"X": "y"}, Bytes: good.Cert.Raw}))
	DescribeTable("targets are not touched and Ready names the source and the reason",
		func(ctx context.Context, bad, reason string) {
			group := unique("bad")
			ns := newNamespace(ctx, map[string]string{"group": group})
			tb := newTrustBundle(group, inline(good.PEM()), inline(good.PEM()))
			Expect(cp.Client.Create(ctx, tb)).To(Succeed())
			Eventually(func() string { return caData(ctx, ns) }).Should(Equal(pemOf(good.PEM())))
			Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))
			rv := resourceVersion(ctx, ns)

			updateSpec(ctx, tb, func(t *v1alpha1.TrustBundle) { t.Spec.Sources[1].Inline = bad })
			Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal(reason))
			Expect(conditionMessage(ctx, tb, "Ready")).To(ContainSubstring("sources[1] (inline)"))
			Consistently(func() string { return resourceVersion(ctx, ns) }).Should(Equal(rv))
			Expect(caData(ctx, ns)).To(Equal(pemOf(good.PEM())))
		},
		Entry("an unparseable block", good.PEM()+"-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n", bundle.ReasonUnparseable),
		Entry("a private key", good.PEM()+good.KeyPEM(), bundle.ReasonPrivateKey),
		Entry("PEM headers", headers, bundle.ReasonPEMHeaders),
		Entry("only expired CAs", testpki.ExpiredCA("old").PEM(), bundle.ReasonNoValidCA),
		Entry("an empty source", "\n", bundle.ReasonEmpty),
	)
})

var _ = Describe("Determinism", func() {
	It("deduplicates and sorts, so the same CAs in any order write the same bytes", func(ctx context.Context) {
		a, b, c := testpki.ValidCA("a"), testpki.ValidCA("b"), testpki.ValidCA("c")
		group1, group2 := unique("det"), unique("det")
		ns1 := newNamespace(ctx, map[string]string{"group": group1})
		ns2 := newNamespace(ctx, map[string]string{"group": group2})
		Expect(cp.Client.Create(ctx, newTrustBundle(group1, inline(a.PEM(), b.PEM()), inline(c.PEM(), a.PEM())))).To(Succeed())
		Expect(cp.Client.Create(ctx, newTrustBundle(group2, inline(c.PEM(), b.PEM(), b.PEM(), a.PEM())))).To(Succeed())

		Eventually(func() string { return caData(ctx, ns1) }).ShouldNot(BeEmpty())
		Eventually(func() string { return caData(ctx, ns2) }).Should(Equal(caData(ctx, ns1)))
		certs, err := bundle.ParsePEM([]byte(caData(ctx, ns1)))
		Expect(err).NotTo(HaveOccurred())
		Expect(certs).To(HaveLen(3))
	})
})

var _ = Describe("Unchanged output writes nothing", func() {
	It("keeps the resourceVersion of every target across reconciles and a restart", func(ctx context.Context) {
		group := unique("same")
		nss := []string{newNamespace(ctx, map[string]string{"group": group}), newNamespace(ctx, map[string]string{"group": group})}
		tb := newTrustBundle(group, inline(testpki.ValidCA("same").PEM()))
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))
		rvs := map[string]string{}
		for _, ns := range nss {
			Eventually(func() string { return resourceVersion(ctx, ns) }).ShouldNot(BeEmpty())
			rvs[ns] = resourceVersion(ctx, ns)
		}
		snapshot := func() map[string]string {
			out := map[string]string{}
			for _, ns := range nss {
				out[ns] = resourceVersion(ctx, ns)
			}
			return out
		}

		By("reconciling again after an unrelated change")
		updateSpec(ctx, tb, func(t *v1alpha1.TrustBundle) { t.Annotations = map[string]string{"touch": "1"} })
		newNamespace(ctx, map[string]string{"group": "unrelated"})
		Consistently(snapshot).Should(Equal(rvs))

		By("restarting the operator")
		stopManager()
		stopManager = startManager()
		Consistently(snapshot, 4*time.Second).Should(Equal(rvs))
	})
})

var _ = Describe("Foreign keys are preserved", func() {
	It("leaves a ConfigMap of the target's name another writer made as it is, and on release of its own target removes only its key", func(ctx context.Context) {
		group := unique("shared")
		ns := newNamespace(ctx, map[string]string{"group": group})
		Expect(cp.Client.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "ca", Namespace: ns},
			Data:       map[string]string{"theirs": "keep me"},
		}, client.FieldOwner("someone-else"))).To(Succeed())
		ca := testpki.ValidCA("shared")
		tb := newTrustBundle(group, inline(ca.PEM()))
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())

		By("the other writer's ConfigMap is not written (the target policy refuses it), and the failure is named")
		Eventually(func() string { return failedTargets(ctx, tb) }).Should(And(
			ContainSubstring("ConfigMap "+ns+"/ca"), ContainSubstring("only TrustBundle targets")))
		Expect(configMap(ctx, ns, "ca").Data).To(Equal(map[string]string{"theirs": "keep me"}))
		Expect(configMap(ctx, ns, "ca").Labels).NotTo(HaveKey(target.LabelTrustBundle))

		By("once it is gone, the operator's own target, to which the other writer adds a key")
		Expect(cp.Client.Delete(ctx, configMap(ctx, ns, "ca"))).To(Succeed())
		Eventually(func() string { return caData(ctx, ns) }).Should(Equal(pemOf(ca.PEM())))
		cm := configMap(ctx, ns, "ca")
		cm.Data["theirs"] = "keep me"
		Expect(cp.Client.Update(ctx, cm, client.FieldOwner("someone-else"))).To(Succeed())

		By("the namespace leaving the selector")
		setNamespaceLabels(ctx, ns, map[string]string{"group": "elsewhere"})
		Eventually(func() map[string]string { return configMap(ctx, ns, "ca").Data }).Should(Equal(map[string]string{"theirs": "keep me"}))
		cm = configMap(ctx, ns, "ca")
		Expect(cm.Labels).NotTo(HaveKey(target.LabelTrustBundle))
		Expect(cm.Annotations).NotTo(HaveKey(target.AnnotationHash))
	})
})

var _ = Describe("A target name held by an object someone else created", func() {
	It("is never overwritten or deleted: the conflict is reported and the object left as it is", func(ctx context.Context) {
		group := unique("taken")
		ns := newNamespace(ctx, map[string]string{"group": group})
		theirs := map[string]string{"ca.crt": "the tenant's own trust"}
		Expect(cp.Client.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "ca", Namespace: ns}, Data: theirs,
		}, client.FieldOwner("tenant"))).To(Succeed())
		tb := newTrustBundle(group, inline(testpki.ValidCA("taken").PEM()))
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())

		Eventually(func() []string { return get(ctx, tb).Status.FailedTargets }).Should(ContainElement(ContainSubstring("ConfigMap %s/ca", ns)))
		Consistently(func() map[string]string { return configMap(ctx, ns, "ca").Data }).Should(Equal(theirs))
		Expect(configMap(ctx, ns, "ca").Labels).NotTo(HaveKey(target.LabelTrustBundle))

		By("the namespace leaving the selector and the TrustBundle deleted")
		setNamespaceLabels(ctx, ns, map[string]string{"group": "elsewhere"})
		Expect(cp.Client.Delete(ctx, tb)).To(Succeed())
		Eventually(func() error { return cp.Client.Get(ctx, client.ObjectKeyFromObject(tb), &v1alpha1.TrustBundle{}) }).ShouldNot(Succeed())
		Expect(configMap(ctx, ns, "ca").Data).To(Equal(theirs))
	})
})

var _ = Describe("A target name held by an object someone else created in a source namespace", func() {
	// The operator's cache holds every ConfigMap of a source namespace, not
	// only the ones labelled as targets: being in the cache must not make an
	// object ours.
	It("is never overwritten or deleted either: the conflict is reported and the object left as it is", func(ctx context.Context) {
		name := unique("platform-ca")
		theirs := map[string]string{"ca.crt": "the platform's own trust"}
		Expect(cp.Client.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: sourceNamespace}, Data: theirs,
		}, client.FieldOwner("platform"))).To(Succeed())
		tb := newTrustBundle("", inline(testpki.ValidCA("platform").PEM()))
		tb.Spec.Target.ConfigMap.Name = name
		tb.Spec.Target.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: sourceNamespace}}
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())

		Eventually(func() []string { return get(ctx, tb).Status.FailedTargets }).Should(
			ContainElement(ContainSubstring("ConfigMap %s/%s", sourceNamespace, name)))
		Consistently(func() map[string]string { return configMap(ctx, sourceNamespace, name).Data }).Should(Equal(theirs))
		Expect(configMap(ctx, sourceNamespace, name).Labels).NotTo(HaveKey(target.LabelTrustBundle))

		By("the TrustBundle deleted")
		Expect(cp.Client.Delete(ctx, tb)).To(Succeed())
		Eventually(func() error { return cp.Client.Get(ctx, client.ObjectKeyFromObject(tb), &v1alpha1.TrustBundle{}) }).ShouldNot(Succeed())
		Expect(configMap(ctx, sourceNamespace, name)).NotTo(BeNil(), "not deleted")
		Expect(configMap(ctx, sourceNamespace, name).Data).To(Equal(theirs))
	})
})

var _ = Describe("Our target with its label removed by hand", func() {
	It("is labelled again: it is not mistaken for an object someone else created", func(ctx context.Context) {
		group := unique("unlabelled")
		ns := newNamespace(ctx, map[string]string{"group": group})
		tb := newTrustBundle(group, inline(testpki.ValidCA("unlabelled").PEM()))
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Eventually(func() string { return caData(ctx, ns) }).ShouldNot(BeEmpty())

		cm := configMap(ctx, ns, "ca")
		delete(cm.Labels, target.LabelTrustBundle)
		Expect(cp.Client.Update(ctx, cm, client.FieldOwner("kubectl-edit"))).To(Succeed())
		Eventually(func() map[string]string { return configMap(ctx, ns, "ca").Labels }).Should(HaveKeyWithValue(target.LabelTrustBundle, tb.Name))
		Expect(get(ctx, tb).Status.FailedTargets).To(BeEmpty())
	})
})

var _ = Describe("A target name held by an object someone else created, holding nothing", func() {
	It("is left alone even when it holds nothing any writer owns: an empty ConfigMap is neither written nor deleted", func(ctx context.Context) {
		group := unique("empty")
		ns := newNamespace(ctx, map[string]string{"group": group})
		Expect(cp.Client.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "ca", Namespace: ns},
		}, client.FieldOwner("tenant"))).To(Succeed())
		theirs := configMap(ctx, ns, "ca")
		Expect(theirs.ManagedFields).To(BeEmpty(), "an empty ConfigMap records no field manager")
		tb := newTrustBundle(group, inline(testpki.ValidCA("empty").PEM()))
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())

		Eventually(func() []string { return get(ctx, tb).Status.FailedTargets }).Should(ContainElement(ContainSubstring("ConfigMap %s/ca", ns)))
		Consistently(func() string { return configMap(ctx, ns, "ca").ResourceVersion }).Should(Equal(theirs.ResourceVersion))

		By("the namespace leaving the selector")
		setNamespaceLabels(ctx, ns, map[string]string{"group": "elsewhere"})
		Eventually(func() []string { return get(ctx, tb).Status.FailedTargets }).ShouldNot(ContainElement(ContainSubstring("ConfigMap %s/ca", ns)))
		Consistently(func() *corev1.ConfigMap { return configMap(ctx, ns, "ca") }).Should(
			And(Not(BeNil()), WithTransform(func(cm *corev1.ConfigMap) string { return cm.ResourceVersion }, Equal(theirs.ResourceVersion))))
	})
})

var _ = Describe("Namespaces entering and leaving the selector", func() {
	It("gives a namespace that starts matching its ConfigMap and deletes ours from one that stops", func(ctx context.Context) {
		group := unique("sel")
		ca := testpki.ValidCA("sel")
		tb := newTrustBundle(group, inline(ca.PEM()))
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		ns := newNamespace(ctx, map[string]string{"group": "not-yet"})
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))
		Expect(configMap(ctx, ns, "ca")).To(BeNil())

		setNamespaceLabels(ctx, ns, map[string]string{"group": group})
		Eventually(func() string { return caData(ctx, ns) }).Should(Equal(pemOf(ca.PEM())))

		setNamespaceLabels(ctx, ns, map[string]string{"group": "no-more"})
		Eventually(func() *corev1.ConfigMap { return configMap(ctx, ns, "ca") }).Should(BeNil())
	})

	It("releases every target when the TrustBundle is deleted", func(ctx context.Context) {
		group := unique("del")
		ns := newNamespace(ctx, map[string]string{"group": group})
		tb := newTrustBundle(group, inline(testpki.ValidCA("del").PEM()))
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Eventually(func() string { return caData(ctx, ns) }).ShouldNot(BeEmpty())
		Expect(cp.Client.Delete(ctx, tb)).To(Succeed())
		Eventually(func() *corev1.ConfigMap { return configMap(ctx, ns, "ca") }).Should(BeNil())
	})
})

var _ = Describe("Formats and Secret targets", func() {
	It("writes PEM, SPIFFE bundle and JWKS keys from SPIRE to a ConfigMap and a Secret", func(ctx context.Context) {
		group := unique("fmt")
		ns := newNamespace(ctx, map[string]string{"group": group})
		tb := newTrustBundle(group, v1alpha1.Source{SPIRE: &v1alpha1.SPIRESource{}})
		keys := v1alpha1.Keys{PEM: "ca.crt", SPIFFE: "bundle.spiffe", JWKS: "jwks.json"}
		tb.Spec.Target.ConfigMap.Keys = keys
		tb.Spec.Target.Secret = &v1alpha1.ObjectTarget{Name: "ca-secret", Keys: keys}
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())

		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))
		cm := configMap(ctx, ns, "ca")
		Expect(cm).NotTo(BeNil())
		shown, err := spireSrv.BundlePEM(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(cm.Data["ca.crt"]).To(Equal(pemOf(shown)))
		Expect(cm.Data["bundle.spiffe"]).To(ContainSubstring(`"x509-svid"`))
		Expect(cm.Data["bundle.spiffe"]).To(ContainSubstring(`"jwt-svid"`))
		Expect(cm.Data["jwks.json"]).To(ContainSubstring(`"kid"`))
		sec := &corev1.Secret{}
		Expect(cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ca-secret"}, sec)).To(Succeed())
		Expect(string(sec.Data["ca.crt"])).To(Equal(cm.Data["ca.crt"]))
		Expect(string(sec.Data["bundle.spiffe"])).To(Equal(cm.Data["bundle.spiffe"]))
	})

	It("reads ConfigMap and Secret sources and follows their edits", func(ctx context.Context) {
		group := unique("src")
		srcNS, srcName := sourceNamespace, unique("src")
		ns := newNamespace(ctx, map[string]string{"group": group})
		a, b := testpki.ValidCA("cm-src"), testpki.ValidCA("secret-src")
		src := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: srcName, Namespace: srcNS}, Data: map[string]string{"pem": a.PEM()}}
		Expect(cp.Client.Create(ctx, src)).To(Succeed())
		Expect(cp.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: srcName, Namespace: srcNS}, Data: map[string][]byte{"pem": []byte(b.PEM())}})).To(Succeed())
		tb := newTrustBundle(group,
			v1alpha1.Source{ConfigMap: &v1alpha1.KeySelector{Namespace: srcNS, Name: srcName, Key: "pem"}},
			v1alpha1.Source{Secret: &v1alpha1.KeySelector{Namespace: srcNS, Name: srcName, Key: "pem"}})
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Eventually(func() string { return caData(ctx, ns) }).Should(Equal(pemOf(a.PEM(), b.PEM())))

		c := testpki.ValidCA("cm-src-2")
		src.Data["pem"] = c.PEM()
		Expect(cp.Client.Update(ctx, src)).To(Succeed())
		Eventually(func() string { return caData(ctx, ns) }).Should(Equal(pemOf(c.PEM(), b.PEM())))
	})
})

var _ = Describe("Grace-period retention", func() {
	It("keeps a CA that left the sources for retainRemovedFor, then drops it", func(ctx context.Context) {
		group := unique("grace")
		ns := newNamespace(ctx, map[string]string{"group": group})
		oldCA, newCA := testpki.ValidCA("old"), testpki.ValidCA("new")
		tb := newTrustBundle(group, inline(oldCA.PEM(), newCA.PEM()))
		tb.Spec.Options.RetainRemovedFor = &metav1.Duration{Duration: 4 * time.Second}
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Eventually(func() string { return caData(ctx, ns) }).Should(Equal(pemOf(oldCA.PEM(), newCA.PEM())))

		updateSpec(ctx, tb, func(t *v1alpha1.TrustBundle) { t.Spec.Sources[0].Inline = newCA.PEM() })
		Eventually(func() bool {
			for _, c := range get(ctx, tb).Status.Certificates {
				if c.LeftSourceAt != nil {
					return true
				}
			}
			return false
		}).Should(BeTrue(), "the old CA is recorded as retained")
		Expect(caData(ctx, ns)).To(Equal(pemOf(oldCA.PEM(), newCA.PEM())), "still published during the grace period")

		Eventually(func() string { return caData(ctx, ns) }, 15*time.Second).Should(Equal(pemOf(newCA.PEM())))
		Eventually(func() int32 { return get(ctx, tb).Status.CACount }).Should(BeEquivalentTo(1), "the status is written after the targets")
	})
})

func conditionMessage(ctx context.Context, tb *v1alpha1.TrustBundle, t string) string {
	for _, c := range get(ctx, tb).Status.Conditions {
		if c.Type == t {
			return c.Message
		}
	}
	return ""
}

var _ = Describe("Targets are cached metadata-only and filtered by our label", func() {
	It("holds our targets and no other ConfigMap, and refuses reads that would cache whole ConfigMaps", func(ctx context.Context) {
		group := unique("cache")
		ns := newNamespace(ctx, map[string]string{"group": group})
		Expect(cp.Client.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "foreign", Namespace: ns},
			Data:       map[string]string{"k": "v"},
		})).To(Succeed())
		tb := newTrustBundle(group, inline(testpki.ValidCA("cache").PEM()))
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Eventually(func() string { return caData(ctx, ns) }).ShouldNot(BeEmpty())

		cached := func() []string {
			l := &metav1.PartialObjectMetadataList{}
			l.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
			Expect(operatorCache.List(ctx, l, client.InNamespace(ns))).To(Succeed())
			var names []string
			for _, m := range l.Items {
				Expect(m.Labels).To(HaveKey(target.LabelTrustBundle), m.Name)
				names = append(names, m.Name)
			}
			return names
		}
		Eventually(cached).Should(ConsistOf("ca"))

		var full corev1.ConfigMapList
		err := operatorCache.List(ctx, &full, client.InNamespace(ns))
		var notCached *cache.ErrResourceNotCached
		Expect(errors.As(err, &notCached)).To(BeTrue(), "a typed ConfigMap read must not start an informer: %v", err)
	})
})
