package controller_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/trustplane/trustplane/common/labels"

	"github.com/trustplane/trustplane/bundle-operator/api/v1alpha1"
	"github.com/trustplane/trustplane/bundle-operator/internal/bundle"
)

var counter atomic.Int64

// unique returns a fresh name with prefix.
func unique(prefix string) string { return fmt.Sprintf("%s-%d", prefix, counter.Add(1)) }

// newNamespace creates a namespace with labels and returns its name.
func newNamespace(ctx context.Context, l map[string]string) string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: unique("ns"), Labels: l}}
	Expect(cp.Client.Create(ctx, ns)).To(Succeed())
	return ns.Name
}

// newTrustBundle returns a TrustBundle in environment "test" whose ConfigMap
// target "ca" goes to namespaces labelled group=<group>.
func newTrustBundle(group string, sources ...v1alpha1.Source) *v1alpha1.TrustBundle {
	return &v1alpha1.TrustBundle{
		ObjectMeta: metav1.ObjectMeta{Name: unique("tb"), Labels: map[string]string{labels.Environment: "test"}},
		Spec: v1alpha1.TrustBundleSpec{
			Sources: sources,
			Target: v1alpha1.Target{
				ConfigMap:         &v1alpha1.ObjectTarget{Name: "ca"},
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"group": group}},
			},
		},
	}
}

func inline(pems ...string) v1alpha1.Source {
	return v1alpha1.Source{Inline: strings.Join(pems, "")}
}

// configMap reads a ConfigMap, or returns nil when it does not exist.
func configMap(ctx context.Context, ns, name string) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{}
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cm); err != nil {
		Expect(client.IgnoreNotFound(err)).To(Succeed())
		return nil
	}
	return cm
}

// caData returns the PEM key of the target ConfigMap "ca" in ns ("" if absent).
func caData(ctx context.Context, ns string) string { return keyData(ctx, ns, "ca", "ca.crt") }

// keyData returns key of ConfigMap ns/name ("" if either is absent).
func keyData(ctx context.Context, ns, name, key string) string {
	cm := configMap(ctx, ns, name)
	if cm == nil {
		return ""
	}
	return cm.Data[key]
}

// resourceVersion of the target ConfigMap "ca" in ns.
func resourceVersion(ctx context.Context, ns string) string {
	cm := configMap(ctx, ns, "ca")
	if cm == nil {
		return ""
	}
	return cm.ResourceVersion
}

// pemOf renders PEMs the way the operator does: deduplicated and sorted.
func pemOf(pems ...string) string {
	certs, err := bundle.ParsePEM([]byte(strings.Join(pems, "")))
	Expect(err).NotTo(HaveOccurred())
	return string(bundle.New(certs, nil).PEM())
}

// get re-reads tb.
func get(ctx context.Context, tb *v1alpha1.TrustBundle) *v1alpha1.TrustBundle {
	out := &v1alpha1.TrustBundle{}
	Expect(cp.Client.Get(ctx, client.ObjectKeyFromObject(tb), out)).To(Succeed())
	return out
}

// readyReason returns "True" when tb is Ready for its generation, else the
// Ready reason.
func readyReason(ctx context.Context, tb *v1alpha1.TrustBundle) string {
	cur := get(ctx, tb)
	c := meta.FindStatusCondition(cur.Status.Conditions, "Ready")
	switch {
	case c == nil:
		return "<none>"
	case c.Status == metav1.ConditionTrue && c.ObservedGeneration == cur.Generation:
		return "True"
	default:
		return c.Reason
	}
}

// updateSpec re-reads tb, applies change and updates it, retrying conflicts.
func updateSpec(ctx context.Context, tb *v1alpha1.TrustBundle, change func(*v1alpha1.TrustBundle)) {
	Eventually(func() error {
		cur := get(ctx, tb)
		change(cur)
		return cp.Client.Update(ctx, cur)
	}).Should(Succeed())
}

// setNamespaceLabels replaces the labels of namespace ns.
func setNamespaceLabels(ctx context.Context, ns string, l map[string]string) {
	Eventually(func() error {
		cur := &corev1.Namespace{}
		if err := cp.Client.Get(ctx, client.ObjectKey{Name: ns}, cur); err != nil {
			return err
		}
		cur.Labels = l
		return cp.Client.Update(ctx, cur)
	}).Should(Succeed())
}
