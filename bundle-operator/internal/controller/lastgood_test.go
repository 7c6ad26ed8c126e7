package controller_test

import (
	"context"
	"encoding/base64"
	"maps"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/handler/trustbundle"
	"github.com/trustplane/trustplane/bundle-operator/internal/source"
	"github.com/trustplane/trustplane/bundle-operator/internal/target"
	"github.com/trustplane/trustplane/bundle-operator/internal/testpki"
)

// allFormats asks for every format, so that the SPIFFE bundle and the JWKS
// (JWT authorities of SPIRE) must be rebuilt too.
var allFormats = v1alpha1.Keys{PEM: "ca.crt", SPIFFE: "bundle.spiffe", JWKS: "jwks.json"}

// held is what one target holds: its data and its hash annotation.
type held struct {
	Data map[string]string
	Hash string
}

// heldBy reads the ConfigMap or Secret ns/name (Secret data as text); the
// zero value when it does not exist.
func heldBy(ctx context.Context, kind target.Kind, ns, name string) held {
	var obj client.Object = &corev1.ConfigMap{}
	if kind == target.KindSecret {
		obj = &corev1.Secret{}
	}
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
		Expect(client.IgnoreNotFound(err)).To(Succeed())
		return held{}
	}
	h := held{Data: map[string]string{}, Hash: obj.GetAnnotations()[target.AnnotationHash]}
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		maps.Copy(h.Data, o.Data)
	case *corev1.Secret:
		for k, v := range o.Data {
			h.Data[k] = string(v)
		}
	}
	return h
}

// versions returns the resourceVersion of each kind/ns/name ("" when absent).
func versions(ctx context.Context, objs ...client.Object) map[string]string {
	out := map[string]string{}
	for _, o := range objs {
		cur := o.DeepCopyObject().(client.Object)
		key := kindKey(o)
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(o), cur); err != nil {
			Expect(client.IgnoreNotFound(err)).To(Succeed())
			out[key] = ""
			continue
		}
		out[key] = cur.GetResourceVersion()
	}
	return out
}

func kindKey(o client.Object) string {
	return o.GetObjectKind().GroupVersionKind().Kind + "/" + o.GetNamespace() + "/" + o.GetName()
}

func cmRef(ns, name string) client.Object {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	cm.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	return cm
}

func secretRef(ns, name string) client.Object {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	s.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	return s
}

// lastGoodEvents returns the notes of the LastGoodBundle events about tb.
func lastGoodEvents(ctx context.Context, tb *v1alpha1.TrustBundle) []string {
	return eventNotes(ctx, tb, trustbundle.ReasonLastGoodBundle)
}

// eventNotes returns the notes of the events of reason about tb.
func eventNotes(ctx context.Context, tb *v1alpha1.TrustBundle, reason string) []string {
	var l eventsv1.EventList
	Expect(cp.Client.List(ctx, &l)).To(Succeed())
	var out []string
	for _, e := range l.Items {
		if e.Regarding.Name == tb.Name && e.Reason == reason {
			out = append(out, e.Note)
		}
	}
	return out
}

var _ = Describe("While the sources fail, new targets get the last good bundle", func() {
	It("gives a namespace that starts matching exactly what the others hold, and changes no existing target", func(ctx context.Context) {
		group := unique("lastgood")
		srcNS, srcName := sourceNamespace, unique("src")
		good := testpki.ValidCA("lastgood")
		src := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: srcName, Namespace: srcNS}, Data: map[string]string{"pem": good.PEM()}}
		Expect(cp.Client.Create(ctx, src)).To(Succeed())
		nss := []string{newNamespace(ctx, map[string]string{"group": group}), newNamespace(ctx, map[string]string{"group": group})}
		tb := newTrustBundle(group, v1alpha1.Source{ConfigMap: &v1alpha1.KeySelector{Namespace: srcNS, Name: srcName, Key: "pem"}})
		tb.Spec.Target.Secret = &v1alpha1.ObjectTarget{Name: "ca-secret"}
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))
		var refs []client.Object
		for _, ns := range nss {
			Eventually(func() string { return caData(ctx, ns) }).Should(Equal(pemOf(good.PEM())))
			refs = append(refs, cmRef(ns, "ca"), secretRef(ns, "ca-secret"))
		}
		cmHeld := heldBy(ctx, target.KindConfigMap, nss[0], "ca")
		secretHeld := heldBy(ctx, target.KindSecret, nss[0], "ca-secret")
		Expect(cmHeld.Hash).NotTo(BeEmpty())
		fingerprint := get(ctx, tb).Status.Fingerprint

		By("adding a private key to the source")
		src.Data["pem"] = good.PEM() + good.KeyPEM()
		Expect(cp.Client.Update(ctx, src)).To(Succeed())
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal(bundle.ReasonPrivateKey))
		before := versions(ctx, refs...)

		By("a namespace starting to match, another one leaving the selector")
		fresh := newNamespace(ctx, map[string]string{"group": group})
		setNamespaceLabels(ctx, nss[1], map[string]string{"group": "left-during-the-outage"})
		Eventually(func() held { return heldBy(ctx, target.KindConfigMap, fresh, "ca") }).Should(Equal(cmHeld))
		Eventually(func() held { return heldBy(ctx, target.KindSecret, fresh, "ca-secret") }).Should(Equal(secretHeld))
		Expect(cmHeld.Data["ca.crt"]).To(Equal(pemOf(good.PEM())), "the last good bundle, not the private key")

		refs = append(refs, cmRef(fresh, "ca"), secretRef(fresh, "ca-secret"))
		after := versions(ctx, refs...)
		for k, v := range before {
			Expect(after).To(HaveKeyWithValue(k, v), "existing targets are neither updated nor deleted")
		}
		Consistently(func() map[string]string { return versions(ctx, refs...) }).Should(Equal(after))

		Expect(readyReason(ctx, tb)).To(Equal(bundle.ReasonPrivateKey))
		Expect(conditionMessage(ctx, tb, "Ready")).To(And(
			ContainSubstring("sources[0] (configMap %s/%s key pem)", srcNS, srcName),
			ContainSubstring("targets keep their last good bundle %s and new targets get it", fingerprint)))
		Eventually(func() []string { return lastGoodEvents(ctx, tb) }).Should(ContainElement(And(
			MatchRegexp(`^\d+ new targets were given the last good bundle `),
			ContainSubstring(fingerprint), ContainSubstring(bundle.ReasonPrivateKey))))

		By("fixing the source: the same bundle, so the new targets are not written again")
		src.Data["pem"] = good.PEM()
		Expect(cp.Client.Update(ctx, src)).To(Succeed())
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))
		inSync := []client.Object{cmRef(fresh, "ca"), secretRef(fresh, "ca-secret"), cmRef(nss[0], "ca"), secretRef(nss[0], "ca-secret")}
		unchanged := versions(ctx, inSync...)
		for k, v := range unchanged {
			Expect(after).To(HaveKeyWithValue(k, v), "the pass with the fixed source wrote a target")
		}
		Consistently(func() map[string]string { return versions(ctx, inSync...) }).Should(Equal(unchanged))
		Eventually(func() *corev1.ConfigMap { return configMap(ctx, nss[1], "ca") }).Should(BeNil(),
			"with a valid source again, the namespace that left loses its target")
	})

	It("gives them every format from SPIRE while SPIRE is stopped, and nothing is written when it is back", func(ctx context.Context) {
		group := unique("spire-down")
		ns := newNamespace(ctx, map[string]string{"group": group})
		tb := newTrustBundle(group, v1alpha1.Source{SPIRE: &v1alpha1.SPIRESource{}})
		tb.Spec.Target.ConfigMap.Keys = allFormats
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))
		published := heldBy(ctx, target.KindConfigMap, ns, "ca")
		Expect(published.Data).To(HaveKey("jwks.json"))
		Expect(published.Data["jwks.json"]).To(ContainSubstring(`"kid"`))

		By("stopping SPIRE")
		Expect(spireSrv.Stop()).To(Succeed())
		DeferCleanup(func() {
			if !spireSrv.Running() {
				Expect(spireSrv.Restart()).To(Succeed())
			}
		})
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal(source.ReasonSpireUnavailable))
		existing := resourceVersion(ctx, ns)

		By("a namespace starting to match during the outage")
		fresh := newNamespace(ctx, map[string]string{"group": group})
		Eventually(func() held { return heldBy(ctx, target.KindConfigMap, fresh, "ca") }).Should(Equal(published))
		created := resourceVersion(ctx, fresh)
		Consistently(func() []string { return []string{resourceVersion(ctx, ns), resourceVersion(ctx, fresh)} }).
			Should(Equal([]string{existing, created}))
		Expect(readyReason(ctx, tb)).To(Equal(source.ReasonSpireUnavailable))

		By("starting SPIRE again")
		Expect(spireSrv.Restart()).To(Succeed())
		Eventually(func() string { return readyReason(ctx, tb) }, "90s").Should(Equal("True"))
		Consistently(func() []string { return []string{resourceVersion(ctx, ns), resourceVersion(ctx, fresh)} }).
			Should(Equal([]string{existing, created}), "SPIRE renders the same bundle: nothing to write")
	})

	It("rebuilds it from the status after an operator restart during the failure", func(ctx context.Context) {
		group := unique("restart")
		srcNS, srcName := sourceNamespace, unique("src")
		extra := testpki.ValidCA("restart")
		Expect(cp.Client.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: srcName, Namespace: srcNS}, Data: map[string]string{"pem": extra.PEM()},
		})).To(Succeed())
		ns := newNamespace(ctx, map[string]string{"group": group})
		tb := newTrustBundle(group, v1alpha1.Source{SPIRE: &v1alpha1.SPIRESource{}},
			v1alpha1.Source{ConfigMap: &v1alpha1.KeySelector{Namespace: srcNS, Name: srcName, Key: "pem"}})
		tb.Spec.Target.ConfigMap.Keys = allFormats
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal("True"))
		published := heldBy(ctx, target.KindConfigMap, ns, "ca")
		Expect(published.Data["jwks.json"]).To(ContainSubstring(`"kid"`))
		Expect(countCAs(published.Data["ca.crt"])).To(BeNumerically(">=", 2))

		By("deleting the ConfigMap source")
		Expect(cp.Client.Delete(ctx, cmRef(srcNS, srcName))).To(Succeed())
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal(source.ReasonNotFound))
		existing := resourceVersion(ctx, ns)

		By("restarting the operator, then a namespace starting to match")
		stopManager()
		stopManager = startManager()
		fresh := newNamespace(ctx, map[string]string{"group": group})
		Eventually(func() held { return heldBy(ctx, target.KindConfigMap, fresh, "ca") }).Should(Equal(published))
		created := resourceVersion(ctx, fresh)
		Consistently(func() []string { return []string{resourceVersion(ctx, ns), resourceVersion(ctx, fresh)} }).
			Should(Equal([]string{existing, created}))
		Expect(readyReason(ctx, tb)).To(Equal(source.ReasonNotFound))
	})

	It("creates nothing for a TrustBundle that never published", func(ctx context.Context) {
		group := unique("never")
		good := testpki.ValidCA("never")
		ns := newNamespace(ctx, map[string]string{"group": group})
		tb := newTrustBundle(group, inline(good.PEM()+good.KeyPEM()))
		tb.Spec.Target.Secret = &v1alpha1.ObjectTarget{Name: "ca-secret"}
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal(bundle.ReasonPrivateKey))
		Expect(conditionMessage(ctx, tb, "Ready")).To(ContainSubstring("no bundle was published yet, so no target is written"))

		fresh := newNamespace(ctx, map[string]string{"group": group})
		refs := []client.Object{cmRef(ns, "ca"), secretRef(ns, "ca-secret"), cmRef(fresh, "ca"), secretRef(fresh, "ca-secret")}
		Consistently(func() map[string]string { return versions(ctx, refs...) }).Should(HaveEach(""))
		Expect(get(ctx, tb).Status.Fingerprint).To(BeEmpty())
		Expect(lastGoodEvents(ctx, tb)).To(BeEmpty())
	})

	It("injects it into newly annotated objects with no caBundle and leaves any other caBundle alone", func(ctx context.Context) {
		good := testpki.ValidCA("inject-lastgood")
		tb := newTrustBundle(unique("inject-lastgood"), inline(good.PEM()))
		tb.Spec.Target = v1alpha1.Target{}
		want := base64.StdEncoding.EncodeToString([]byte(pemOf(good.PEM())))
		create := func(in injectable) {
			Expect(cp.Client.Create(ctx, in.obj.DeepCopy())).To(Succeed())
			DeferCleanup(func(ctx context.Context) {
				Expect(client.IgnoreNotFound(cp.Client.Delete(ctx, in.obj.DeepCopy()))).To(Succeed())
			})
		}
		old := webhookConfig(target.ValidatingWebhookConfigurationGVK, unique("vwc"), tb.Name)
		create(old)
		Expect(cp.Client.Create(ctx, tb)).To(Succeed())
		Eventually(func() []string { return caBundles(ctx, old) }).Should(HaveEach(want))

		By("making the source bad")
		updateSpec(ctx, tb, func(t *v1alpha1.TrustBundle) { t.Spec.Sources[0].Inline = good.PEM() + good.KeyPEM() })
		Eventually(func() string { return readyReason(ctx, tb) }).Should(Equal(bundle.ReasonPrivateKey))

		By("annotating a new webhook configuration and an APIService, and one holding another caBundle")
		fresh := webhookConfig(target.MutatingWebhookConfigurationGVK, unique("mwc"), tb.Name)
		api := apiService(unique("apis"), tb.Name)
		foreign := webhookConfig(target.ValidatingWebhookConfigurationGVK, unique("vwc"), tb.Name)
		other := base64.StdEncoding.EncodeToString([]byte(testpki.ValidCA("theirs").PEM()))
		foreign.obj = foreign.obj.DeepCopy() // its webhooks share one clientConfig map until copied
		setCABundle(foreign.obj.Object, foreign.paths[0], other)
		create(fresh)
		create(api)
		create(foreign)
		Eventually(func() []string { return caBundles(ctx, fresh) }).Should(HaveEach(want))
		Eventually(func() []string { return caBundles(ctx, api) }).Should(HaveEach(want))
		Consistently(func() []string { return caBundles(ctx, foreign) }).Should(Equal([]string{other, ""}))
	})
})
